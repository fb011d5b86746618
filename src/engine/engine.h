// The serving engine: many requests share one model through continuous batching over a paged,
// prefix-cached KV cache. The CLI and the HTTP server use only this API.
//
//   Engine engine(model, ctx, options, &tokenizer);
//   RequestId id = engine.Add({.prompt = ids, .sampling = ..., .stop = ...});
//   while (!engine.idle()) for (const RequestUpdate& u : engine.Step()) ...;  // stream u
//
// Structured output: a request may carry a Constraint (structured/constraint.h, built by
// CompileStructuredOutput in chat/structured_output.h). Each request gets its own matcher (so `n`
// choices are `n` requests sharing one compiled constraint); before each sample its token mask
// is applied to the raw logits (sampler.h step 0), the sampled token advances it, and EOS / stop
// token ids are allowed exactly when the document is complete. A preempted request keeps its
// generated tokens and its matcher (the recompute samples nothing), so the matcher always stands
// at the end of the output. When no token can continue, the request finishes with kError saying
// what the constraint expected. Requests without a constraint take exactly the old path.
//
// Exactness: each request's tokens and logprobs are the ones it produces when run alone,
// whatever else runs, in whatever order requests arrive, under any token budget, after
// preemption, and when its prefix comes from the cache. This holds because the forward is
// invariant to batching and chunking, a block boundary is a complete state, and every request
// samples from its own seeded Rng.
//
// Speculative decoding (EngineOptions::speculative, a model with DSpark stages): a decoding
// request's step drafts up to a block of tokens, verifies [next, d_1..d_k] in one multi-token
// target step and keeps the longest accepted prefix plus one token (engine/speculative.h). Greedy
// output is token for token the plain greedy output; at T > 0 the tokens are distributed exactly
// as the plain sampler's (lossless speculative sampling from the request's own Rng), and the same
// seed gives the same tokens. Requests with a constraint or return_logits, or that opt out, run
// plain; a request whose drafts do not pay for their bytes turns it off for a while by itself.
//
// Not thread-safe: one thread calls Add / Abort / Step (the server wraps it in a loop thread).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "engine/stop_conditions.h"
#include "model/model.h"
#include "structured/constraint.h"

namespace deepinfer {

class Tokenizer;

using RequestId = uint64_t;

struct RequestParams {
  std::vector<int32_t> prompt;  // token ids, non-empty, inside the vocabulary
  SamplingParams sampling = {};
  StopParams stop = {};
  // Unset: the engine picks one (from EngineOptions::seed when set, so runs reproduce).
  std::optional<uint64_t> seed = std::nullopt;
  // Hand back the fp32 logits of every position run (prompt and output), as the updates'
  // `logits`. Such a request never adopts a cached prefix (those positions would have none).
  bool return_logits = false;
  // Structured output (see the header comment); null: unconstrained. Not with stop.ignore_eos.
  std::shared_ptr<const Constraint> constraint = nullptr;
  // Opt-out of speculative decoding when the engine has it on.
  bool speculative = true;
  // Hand back every draft's logits (all block slots, Markov bias included) as `draft_logits`.
  bool return_draft_logits = false;
};

struct GeneratedToken {
  int32_t token = 0;
  std::optional<float> logprob = std::nullopt;  // when sampling.logprobs is set
  std::vector<TokenLogprob> top_logprobs = {};
};

// What one step did for one request: the stream's next chunk.
struct RequestUpdate {
  RequestId id = 0;
  std::vector<GeneratedToken> tokens;  // new tokens, in order
  std::string text;                    // their text (with a tokenizer), stop strings removed
  FinishReason finish = FinishReason::kNone;
  std::string error;                // why, for kError
  int64_t prompt_tokens = 0;        // prompt length
  int64_t cached_tokens = 0;        // prompt tokens the prefix cache supplied (latest admission)
  std::vector<float> logits;        // with return_logits: [positions run this step, vocab]
  std::vector<float> draft_logits;  // with return_draft_logits: [block, vocab] per draft this step
  bool finished() const { return finish != FinishReason::kNone; }
};

struct EngineOptions {
  // Tokens one step may run (prefill chunks plus one per decoding request), and the most
  // requests running at once.
  int64_t max_step_tokens = 512;
  int max_running = 64;
  // Byte budget of the KV cache (pages of every sequence and of the prefix cache); 0: no limit.
  uint64_t kv_cache_memory = 0;
  int block_tokens = kDefaultBlockTokens;  // rounded up to a multiple of every compress ratio
  bool prefix_caching = true;
  // Context buckets, ascending; a step runs in the smallest that holds every sequence in it.
  // Empty: 1024 * 4^k up to the model's maximum context (which is always the last bucket).
  std::vector<int64_t> context_buckets = {};
  std::optional<uint64_t> seed = std::nullopt;  // seeds requests that bring none
  // DSpark speculative decoding (needs a model with DSpark stages).
  bool speculative = false;
  // Drafts verified per step: 0 = the confidence policy (ChooseVerifyLength), 1..block a fixed
  // count (room permitting).
  int speculative_length = 0;
  // The per-request off-switch (SpeculationGate); off: every decode step verifies (measurements).
  bool speculative_gate = true;
};

// Speculative decoding counters (all requests, since the engine started).
struct SpeculationStats {
  uint64_t verify_steps = 0;          // request-steps that verified drafts
  uint64_t drafted_tokens = 0;        // drafts verified
  uint64_t accepted_tokens = 0;       // of those, accepted
  uint64_t emitted_tokens = 0;        // tokens verify steps produced (accepted + one each)
  std::vector<uint64_t> verified_at;  // per draft position: drafts verified there ...
  std::vector<uint64_t> accepted_at;  // ... and accepted
  double draft_seconds = 0;           // in Model::Draft
  double verify_seconds = 0;          // in forwards that verified drafts
  uint64_t gate_closed_steps = 0;     // decode steps run plain because a request's gate was closed
  // Mean tokens per verify step, bonus counted.
  double mean_accepted_length() const { return verify_steps ? static_cast<double>(emitted_tokens) / verify_steps : 0; }
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t computed_tokens = 0;       // tokens run through the model
  uint64_t prompt_tokens = 0;         // prompt tokens admitted (re-admissions count again)
  uint64_t cached_prompt_tokens = 0;  // of those, supplied by the prefix cache
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t finished_requests = 0;
  size_t running = 0;
  size_t waiting = 0;
  uint64_t kv_budget_bytes = 0;
  uint64_t kv_held_bytes = 0;       // pool memory now (pages in use, cached and kept free)
  uint64_t backend_held_bytes = 0;  // the backend's workspace and scratch (Backend::held_bytes)
  uint64_t one_thread_steps = 0;    // forwards the backend ran on one thread (Backend::one_thread_steps)
  uint64_t kv_peak_bytes = 0;       // the most the pool ever held
  uint64_t kv_in_use_bytes = 0;
  uint64_t kv_pages_in_use = 0;  // referenced by a request or the prefix cache
  size_t prefix_cached_blocks = 0;
  PrefixCache::Stats prefix = {};
  std::vector<uint64_t> steps_per_bucket;  // parallel to context_buckets()
  int64_t last_step_bucket = 0;
  SpeculationStats speculation = {};
};

class Engine {
 public:
  Engine(const Model& model, const ComputeContext& ctx, EngineOptions options = {},
         const Tokenizer* tokenizer = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates everything about the request (throws Error naming the field; nothing is kept) and
  // queues it.
  RequestId Add(RequestParams params);
  // Frees everything the request holds now; the next Step reports it finished with kAbort.
  // False when the id is unknown or already finished.
  bool Abort(RequestId id);
  // One scheduling step and one batched forward; the updates of every request that produced
  // output or finished.
  std::vector<RequestUpdate> Step();
  bool idle() const { return waiting_.empty() && running_.empty() && pending_updates_.empty(); }
  // Drops every prefix-cache entry (their pages go back to the pool unless a request holds them).
  void ClearPrefixCache();

  EngineStats stats() const;
  const std::vector<int64_t>& context_buckets() const { return buckets_; }
  const CacheLayout& cache_layout() const { return *layout_; }
  const Model& model() const { return model_; }

 private:
  struct Request;
  struct PlannedItem {
    Request* request;
    int64_t tokens;  // run tokens[length, length + tokens)
  };
  std::vector<PlannedItem> Schedule(std::vector<RequestUpdate>& updates);
  // Pages for up to `tokens` more tokens of a running request (fewer for a prefill chunk when
  // memory is short), preempting newer requests if needed. Returns the tokens reserved; 0 when
  // the request itself was preempted or failed.
  int64_t Reserve(Request& request, int64_t tokens, bool plan_empty, std::vector<RequestUpdate>& updates);
  void Admit(Request& request);
  void Release(Request& request);  // drops its state (pages back to the pool or the cache)
  void Preempt(Request& request);
  void Finish(Request& request, FinishReason reason, std::string error, std::vector<RequestUpdate>& updates);
  void RunStep(const std::vector<PlannedItem>& plan, std::vector<RequestUpdate>& updates);
  void RunForward(const std::vector<PlannedItem>& plan, std::vector<ForwardItem>& items,
                  std::vector<RequestUpdate>& updates);
  // Speculative decoding (see the header comment).
  bool Speculates(const Request& request) const;
  int64_t SpeculativeExtra(const Request& request) const;  // draft tokens a decode step may verify
  // Drafts for the planned decode steps that have room to verify, turning their items into
  // verify steps. A failed draft finishes its requests with the error; it returns their indices
  // in `plan` (those requests no longer exist).
  std::vector<size_t> DraftFor(const std::vector<PlannedItem>& plan, std::vector<ForwardItem>& items,
                               std::vector<RequestUpdate>& updates);
  // Row by row acceptance of a verify step; the tokens emitted, then the state truncated.
  void AcceptDrafts(Request& request, std::span<const float> rows, std::span<const float> taps,
                    std::vector<RequestUpdate>& updates);
  // Offers the request's new full blocks to the prefix cache and drops stale window pages.
  void AfterForward(Request& request);
  // Queues taps of kept positions for the request's next draft (at most a window of them).
  void AppendTaps(Request& request, std::span<const float> taps);
  // Fills the request's token mask for its next token; the error when no token can continue.
  std::optional<std::string> ConstrainNext(Request& request, int64_t vocab);

  const Model& model_;
  ComputeContext ctx_;
  std::vector<float> logits_;  // the last step's, reused
  std::vector<float> taps_;    // the last step's DSpark taps, reused
  StepBytes step_bytes_;       // for the verify-length policy
  EngineOptions options_;
  const Tokenizer* tokenizer_;
  std::shared_ptr<const CacheLayout> layout_;
  std::shared_ptr<PagePool> pool_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  std::vector<int64_t> buckets_;
  Rng seed_source_;

  RequestId next_id_ = 1;
  uint64_t next_arrival_ = 0;
  std::map<RequestId, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;                // arrival order (preempted requests go back in order)
  std::vector<Request*> running_;               // arrival order
  std::vector<RequestUpdate> pending_updates_;  // aborts, reported by the next Step
  EngineStats stats_;
};

}  // namespace deepinfer
