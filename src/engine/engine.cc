#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"

namespace deepinfer {

struct Engine::Request {
  RequestId id = 0;
  uint64_t arrival = 0;
  RequestParams params;
  std::vector<int32_t> tokens;  // the prompt, then every generated token
  int64_t prompt_length = 0;
  Rng rng;
  StopChecker stop;
  std::optional<SequenceState> state;  // while running
  int64_t cached_tokens = 0;
  int64_t offered_blocks = 0;                   // full blocks already offered to the prefix cache
  int64_t logits_returned = 0;                  // positions whose logits went out (a recompute does not resend)
  std::optional<ConstraintMatcher> constraint;  // with params.constraint: at the end of the output
  std::vector<uint64_t> allowed;                // its token mask, one bit per vocabulary id
  // Prefill until the step that samples its first token, then decode (a preempted request
  // prefills again). A decode step runs the pending token, and a verify step its drafts too.
  enum class Phase { kPrefill, kDecode } phase = Phase::kPrefill;
  // Speculative decoding, while running.
  std::optional<DraftState> draft;
  std::vector<float> unseeded_taps;    // taps of kept positions the draft has not seen, in order
  std::vector<int32_t> verify_tokens;  // this step's [next, d_1..d_k]
  std::vector<float> draft_logits;     // at T > 0: the draft logits of d_1..d_k
  std::vector<float> returned_draft;   // with return_draft_logits: this step's draft, every slot
  SpeculationGate gate;

  Request(RequestId id_, uint64_t arrival_, RequestParams params_, uint64_t seed, int eos, const Tokenizer* tokenizer)
      : id(id_),
        arrival(arrival_),
        params(std::move(params_)),
        tokens(params.prompt),
        prompt_length(static_cast<int64_t>(params.prompt.size())),
        rng(seed),
        stop(params.stop, eos, tokenizer) {
    if (params.constraint) {
      std::vector<int32_t> end_tokens = params.stop.stop_token_ids;
      end_tokens.push_back(eos);
      constraint.emplace(params.constraint, std::move(end_tokens));
    }
  }

  std::span<const int32_t> output() const { return std::span<const int32_t>(tokens).subspan(prompt_length); }
  int64_t pending_tokens() const { return static_cast<int64_t>(tokens.size()) - state->length(); }
};

namespace {

std::vector<int64_t> ContextBuckets(std::vector<int64_t> buckets, int64_t max_context) {
  if (buckets.empty()) {
    for (int64_t b = 1024; b < max_context; b *= 4) buckets.push_back(b);
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] <= 0 || (i > 0 && buckets[i] <= buckets[i - 1])) {
      throw MakeError("context buckets must be positive and ascending; bucket ", i, " is ", buckets[i]);
    }
    if (buckets[i] > max_context) {
      throw MakeError("context bucket ", buckets[i], " exceeds the maximum context of ", max_context, " tokens");
    }
  }
  if (buckets.empty() || buckets.back() != max_context) buckets.push_back(max_context);
  return buckets;
}

// Prepares pages for the largest chunk of at most `tokens` that fits, halving on failure;
// returns the chunk's size, 0 when not even one token fits.
int64_t PrepareLargestChunk(SequenceState& state, int64_t tokens) {
  for (int64_t n = tokens; n >= 1; n = (n == 1 ? 0 : std::max<int64_t>(1, n / 2))) {
    if (state.PrepareAppend(n)) return n;
  }
  return 0;
}

// Inserts `request` before the first one that arrived after it.
template <typename Queue, typename Request>
void InsertByArrival(Queue& queue, Request* request) {
  queue.insert(
      std::find_if(queue.begin(), queue.end(), [&](const Request* other) { return other->arrival > request->arrival; }),
      request);
}

uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

Engine::Engine(const Model& model, const ComputeContext& ctx, EngineOptions options, const Tokenizer* tokenizer)
    : model_(model),
      ctx_(ctx),
      options_(std::move(options)),
      tokenizer_(tokenizer),
      layout_(std::make_shared<const CacheLayout>(
          CacheLayout::For(model.config(), CacheLayout::BlockTokensAtLeast(model.config(), options_.block_tokens)))),
      pool_(PagePool::Create(options_.kv_cache_memory)),
      buckets_(ContextBuckets(options_.context_buckets, model.max_context())),
      seed_source_(options_.seed ? *options_.seed : RandomSeed()) {
  if (options_.max_step_tokens < 1) throw MakeError("max step tokens must be >= 1, got ", options_.max_step_tokens);
  if (options_.max_running < 1) throw MakeError("max running requests must be >= 1, got ", options_.max_running);
  if (options_.max_running > options_.max_step_tokens) {
    // Every decoding request runs in every step; more of them than tokens would starve some.
    throw MakeError("max running requests (", options_.max_running, ") exceeds the step token budget (",
                    options_.max_step_tokens, ")");
  }
  if (options_.speculative) {
    if (!model.has_draft()) {
      throw MakeError("speculative decoding needs a model with DSpark stages; ", model.config().source, " has none");
    }
    if (options_.speculative_length < 0 || options_.speculative_length > model.draft_block()) {
      throw MakeError("speculative length must be 0 (the confidence policy) or 1..", model.draft_block(),
                      " (the draft block), got ", options_.speculative_length);
    }
    const Model::ReadBytes bytes = model.read_bytes();
    step_bytes_ = StepBytes{static_cast<double>(bytes.fixed),
                            static_cast<double>(bytes.expert),
                            std::max(bytes.experts, 1),
                            std::max(bytes.top_k, 1),
                            bytes.moe_layers,
                            static_cast<double>(bytes.draft)};
    stats_.speculation.verified_at.assign(model.draft_block(), 0);
    stats_.speculation.accepted_at.assign(model.draft_block(), 0);
  }
  if (options_.prefix_caching) {
    prefix_cache_ = std::make_unique<PrefixCache>(layout_);
    pool_->SetEvictor([cache = prefix_cache_.get()] { return cache->EvictOne(); });
  }
  stats_.steps_per_bucket.assign(buckets_.size(), 0);
}

Engine::~Engine() {
  pool_->SetEvictor({});
  running_.clear();
  waiting_.clear();
  requests_.clear();
  prefix_cache_.reset();
}

RequestId Engine::Add(RequestParams params) {
  const ModelConfig& c = model_.config();
  if (params.prompt.empty()) throw MakeError("request: the prompt is empty");
  for (size_t i = 0; i < params.prompt.size(); ++i) {
    if (params.prompt[i] < 0 || params.prompt[i] >= c.vocab_size) {
      throw MakeError("request: prompt token ", i, " has id ", params.prompt[i], ", outside the vocabulary [0, ",
                      c.vocab_size, ")");
    }
  }
  if (static_cast<int64_t>(params.prompt.size()) > model_.max_context()) {
    throw MakeError("request: the prompt's ", params.prompt.size(), " tokens exceed the maximum context of ",
                    model_.max_context(), " tokens");
  }
  ValidateSamplingParams(params.sampling, static_cast<size_t>(c.vocab_size));
  ValidateStopParams(params.stop, static_cast<size_t>(c.vocab_size));
  if (!params.stop.stop.empty() && tokenizer_ == nullptr) {
    throw MakeError("request: stop strings need a tokenizer, and this engine has none");
  }
  if (params.constraint && params.stop.ignore_eos) {
    throw MakeError(
        "request: ignore_eos cannot be combined with structured output (the output ends with EOS "
        "once the constraint is complete)");
  }
  const RequestId id = next_id_++;
  const uint64_t seed = params.seed ? *params.seed : seed_source_.Next();
  auto request = std::make_unique<Request>(id, next_arrival_++, std::move(params), seed, c.eos_token_id, tokenizer_);
  waiting_.push_back(request.get());
  requests_.emplace(id, std::move(request));
  return id;
}

bool Engine::Abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  std::vector<RequestUpdate> updates;
  Finish(*it->second, FinishReason::kAbort, "", updates);
  for (RequestUpdate& update : updates) pending_updates_.push_back(std::move(update));
  return true;
}

void Engine::ClearPrefixCache() {
  if (prefix_cache_) prefix_cache_->Clear();
}

void Engine::Release(Request& request) {
  request.state.reset();
  request.draft.reset();
  request.unseeded_taps.clear();
}

bool Engine::Speculates(const Request& request) const {
  return options_.speculative && request.params.speculative && !request.params.constraint &&
         !request.params.return_logits;
}

int64_t Engine::SpeculativeExtra(const Request& request) const {
  if (!Speculates(request) || request.phase != Request::Phase::kDecode) return 0;
  if (options_.speculative_gate && !request.gate.open()) return 0;
  const int64_t room = model_.max_context() - static_cast<int64_t>(request.tokens.size());
  return std::clamp<int64_t>(room, 0, model_.draft_block());
}

void Engine::Finish(Request& request, FinishReason reason, std::string error, std::vector<RequestUpdate>& updates) {
  RequestUpdate* update = nullptr;
  for (RequestUpdate& u : updates) {
    if (u.id == request.id) update = &u;
  }
  if (update == nullptr) {
    update = &updates.emplace_back();
    update->id = request.id;
    update->prompt_tokens = request.prompt_length;
    update->cached_tokens = request.cached_tokens;
  }
  update->finish = reason;
  update->error = std::move(error);
  if (reason == FinishReason::kLength || reason == FinishReason::kError) update->text += request.stop.Flush();
  Release(request);
  running_.erase(std::remove(running_.begin(), running_.end(), &request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &request), waiting_.end());
  ++stats_.finished_requests;
  requests_.erase(request.id);  // last: `request` dies here
}

void Engine::Admit(Request& request) {
  request.state.emplace(layout_, pool_);
  request.phase = Request::Phase::kPrefill;
  request.cached_tokens = 0;
  if (prefix_cache_ && !request.params.return_logits) {
    request.cached_tokens = prefix_cache_->Attach(request.tokens, *request.state);
    if (request.cached_tokens > 0) {
      request.state->AdoptEngramHistory(
          model_.EngramHistory(std::span<const int32_t>(request.tokens).first(request.cached_tokens)));
    }
  }
  request.offered_blocks = request.state->full_blocks();
  if (Speculates(request)) {
    request.draft = model_.NewDraftState();
    request.unseeded_taps.clear();
    request.draft->SkipTo(request.cached_tokens);  // the cache brings no taps
  }
}

void Engine::Preempt(Request& request) {
  Release(request);
  running_.erase(std::remove(running_.begin(), running_.end(), &request), running_.end());
  // Back to the queue in arrival order: it keeps its place ahead of newer requests.
  InsertByArrival(waiting_, &request);
  ++stats_.preemptions;
}

int64_t Engine::Reserve(Request& request, int64_t tokens, bool plan_empty, std::vector<RequestUpdate>& updates) {
  for (;;) {
    // A prefill chunk shrinks before anyone is preempted for it.
    if (const int64_t got = PrepareLargestChunk(*request.state, tokens); got > 0) return got;
    Request* victim = running_.back();
    if (victim != &request) {
      Preempt(*victim);
      continue;
    }
    if (running_.size() == 1 && plan_empty) {
      Finish(request, FinishReason::kError,
             "the KV cache budget of " + std::to_string(pool_->budget_bytes()) + " bytes cannot hold a context of " +
                 std::to_string(request.state->length() + 1) + " tokens",
             updates);
    } else {
      Preempt(request);
    }
    return 0;
  }
}

std::vector<Engine::PlannedItem> Engine::Schedule(std::vector<RequestUpdate>& updates) {
  std::vector<PlannedItem> plan;
  int64_t budget = options_.max_step_tokens;
  // Every decoding request runs each step (max_running <= budget); prefill chunks share the
  // rest, oldest request first, so neither decodes nor long prompts starve.
  int64_t decode_reserve = 0;
  auto decode_tokens = [&](const Request& r) { return r.pending_tokens() + SpeculativeExtra(r); };
  for (const Request* r : running_) decode_reserve += r->phase == Request::Phase::kDecode ? decode_tokens(*r) : 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Request* r = running_[i];
    const bool decoding = r->phase == Request::Phase::kDecode;
    const int64_t want = decoding ? decode_tokens(*r) : std::min(r->pending_tokens(), budget - decode_reserve);
    if (decoding) decode_reserve -= decode_tokens(*r);
    if (want <= 0) continue;
    const int64_t got = Reserve(*r, want, plan.empty(), updates);
    if (got == 0) {
      --i;  // r left running_ (it was the newest: the loop ends)
      continue;
    }
    budget -= got;
    plan.push_back({r, got});
  }
  // New (and preempted) requests, in arrival order, while tokens and memory last.
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_running && budget > 0) {
    Request* r = waiting_.front();
    Admit(*r);
    const int64_t got = PrepareLargestChunk(*r->state, std::min(r->pending_tokens(), budget));
    if (got == 0) {
      if (running_.empty() && plan.empty()) {
        Finish(*r, FinishReason::kError,
               "the KV cache budget of " + std::to_string(pool_->budget_bytes()) + " bytes cannot hold one block",
               updates);
        continue;
      }
      Release(*r);
      break;
    }
    waiting_.pop_front();
    stats_.prompt_tokens += r->tokens.size();
    stats_.cached_prompt_tokens += r->cached_tokens;
    if (prefix_cache_ && !r->params.return_logits) prefix_cache_->RecordLookup(r->tokens.size(), r->cached_tokens);
    InsertByArrival(running_, r);
    budget -= got;
    plan.push_back({r, got});
  }
  return plan;
}

std::vector<RequestUpdate> Engine::Step() {
  std::vector<RequestUpdate> updates = std::move(pending_updates_);
  pending_updates_.clear();
  const std::vector<PlannedItem> plan = Schedule(updates);
  if (!plan.empty()) RunStep(plan, updates);
  return updates;
}

void Engine::RunStep(const std::vector<PlannedItem>& plan, std::vector<RequestUpdate>& updates) {
  std::vector<ForwardItem> items(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Request& r = *plan[i].request;
    const int64_t start = r.state->length();
    items[i].state = &*r.state;
    items[i].tokens =
        std::span<const int32_t>(r.tokens).subspan(start, std::min<int64_t>(plan[i].tokens, r.pending_tokens()));
    items[i].logits = r.params.return_logits                                           ? LogitsMode::kAll
                      : start + plan[i].tokens < static_cast<int64_t>(r.tokens.size()) ? LogitsMode::kNone
                                                                                       : LogitsMode::kLast;
    items[i].keep_window_pages = prefix_cache_ != nullptr;
    if (Speculates(r)) items[i].tap_rows = static_cast<int64_t>(items[i].tokens.size());
  }
  const std::vector<size_t> failed = DraftFor(plan, items, updates);
  if (failed.empty()) return RunForward(plan, items, updates);
  // Requests the draft finished with an error run nothing.
  std::vector<PlannedItem> kept_plan;
  std::vector<ForwardItem> kept_items;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (std::find(failed.begin(), failed.end(), i) != failed.end()) continue;
    kept_plan.push_back(plan[i]);
    kept_items.push_back(items[i]);
  }
  RunForward(kept_plan, kept_items, updates);
}

void Engine::RunForward(const std::vector<PlannedItem>& plan, std::vector<ForwardItem>& items,
                        std::vector<RequestUpdate>& updates) {
  if (plan.empty()) return;
  const int64_t vocab = model_.config().vocab_size;
  const int64_t width = model_.has_draft() ? model_.draft_tap_width() : 0;
  int64_t longest = 0;
  bool verifies = false;
  for (const ForwardItem& item : items) {
    longest = std::max(longest, item.state->length() + static_cast<int64_t>(item.tokens.size()));
    stats_.computed_tokens += item.tokens.size();
    verifies = verifies || item.rollback;
  }
  const size_t bucket = std::lower_bound(buckets_.begin(), buckets_.end(), longest) - buckets_.begin();
  ++stats_.steps_per_bucket[bucket];
  stats_.last_step_bucket = buckets_[bucket];
  ++stats_.steps;

  std::vector<float>& logits = logits_;
  const auto forward_start = std::chrono::steady_clock::now();
  try {
    model_.ForwardInto(items, ctx_, logits, nullptr, options_.speculative ? &taps_ : nullptr);
  } catch (const Error& error) {
    // Nothing changed in any state (Forward validates first); the requests cannot go on.
    for (const PlannedItem& item : plan) Finish(*item.request, FinishReason::kError, error.what(), updates);
    return;
  }
  if (verifies) {
    stats_.speculation.verify_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - forward_start).count();
  }

  int64_t row = 0;
  int64_t tap_row = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Request& r = *plan[i].request;
    SequenceState& state = *r.state;
    const int64_t tokens = static_cast<int64_t>(items[i].tokens.size());
    const std::span<const float> taps =
        std::span<const float>(taps_).subspan(tap_row * width, items[i].tap_rows * width);
    tap_row += items[i].tap_rows;
    if (items[i].rollback) {
      AcceptDrafts(r, std::span<const float>(logits).subspan(row * vocab, tokens * vocab), taps, updates);
      row += tokens;
      continue;
    }
    AfterForward(r);
    if (r.draft) {
      AppendTaps(r, taps);
      if (r.phase == Request::Phase::kDecode && options_.speculative_gate && !r.gate.open()) {
        r.gate.RecordPlainStep();
        ++stats_.speculation.gate_closed_steps;
      }
    }
    if (items[i].logits == LogitsMode::kNone) continue;
    const int64_t rows = items[i].logits == LogitsMode::kAll ? tokens : 1;
    const std::span<const float> returned(logits.data() + row * vocab, rows * vocab);
    row += rows;
    const std::span<const float> row_logits = returned.last(vocab);
    // With return_logits: the rows of positions not handed back before (after a preemption the
    // recompute produces them again, bit-identical).
    std::span<const float> fresh;
    if (items[i].logits == LogitsMode::kAll) {
      const int64_t first_position = state.length() - tokens;
      const int64_t skip = std::clamp<int64_t>(r.logits_returned - first_position, 0, tokens);
      fresh = returned.subspan(skip * vocab);
      r.logits_returned = std::max(r.logits_returned, state.length());
    }
    if (state.length() < static_cast<int64_t>(r.tokens.size())) {  // a prefill chunk: only logits to hand back
      if (fresh.empty()) continue;
      RequestUpdate& update = updates.emplace_back();
      update.id = r.id;
      update.prompt_tokens = r.prompt_length;
      update.logits.assign(fresh.begin(), fresh.end());
      continue;
    }
    TokenMask allowed;
    if (r.constraint) {
      if (const std::optional<std::string> dead_end = ConstrainNext(r, vocab)) {
        Finish(r, FinishReason::kError, *dead_end, updates);
        continue;
      }
      allowed = r.allowed;
    }
    SampleResult sample;
    try {
      sample = Sample(
          row_logits, r.params.sampling,
          TokenHistory{.prompt = std::span<const int32_t>(r.tokens).first(r.prompt_length), .output = r.output()},
          r.rng, allowed);
    } catch (const Error& error) {
      Finish(r, FinishReason::kError, error.what(), updates);
      continue;
    }
    if (r.constraint) DI_CHECK(r.constraint->Accept(sample.token), "sampled token ", sample.token, " outside the mask");
    r.tokens.push_back(sample.token);
    r.phase = Request::Phase::kDecode;
    ++stats_.generated_tokens;
    StopStep stop = r.stop.Append(sample.token);
    RequestUpdate& update = updates.emplace_back();
    update.id = r.id;
    update.prompt_tokens = r.prompt_length;
    update.cached_tokens = r.cached_tokens;
    update.tokens.push_back({sample.token, sample.logprob, std::move(sample.top_logprobs)});
    update.text = std::move(stop.text);
    update.logits.assign(fresh.begin(), fresh.end());
    if (stop.finished()) {
      Finish(r, stop.finish, "", updates);
    } else if (static_cast<int64_t>(r.tokens.size()) > model_.max_context()) {
      Finish(r, FinishReason::kLength, "", updates);
    }
  }
}

void Engine::AfterForward(Request& r) {
  SequenceState& state = *r.state;
  if (prefix_cache_ && state.full_blocks() > r.offered_blocks) {
    prefix_cache_->Insert(r.tokens, state);
    r.offered_blocks = state.full_blocks();
  }
  state.ReleaseStaleWindowPages();
}

void Engine::AppendTaps(Request& r, std::span<const float> taps) {
  const int64_t width = model_.draft_tap_width();
  r.unseeded_taps.insert(r.unseeded_taps.end(), taps.begin(), taps.end());
  // Older rows land in ring slots a newer row overwrites: drop them.
  const int64_t rows = static_cast<int64_t>(r.unseeded_taps.size()) / width;
  const int64_t window = model_.config().window_size;
  if (rows > window) {
    r.unseeded_taps.erase(r.unseeded_taps.begin(), r.unseeded_taps.begin() + (rows - window) * width);
    r.draft->SkipTo(r.draft->length() + rows - window);
  }
}

std::vector<size_t> Engine::DraftFor(const std::vector<PlannedItem>& plan, std::vector<ForwardItem>& items,
                                     std::vector<RequestUpdate>& updates) {
  std::vector<size_t> drafting;
  std::vector<DraftItem> draft_items;
  for (size_t i = 0; i < plan.size(); ++i) {
    Request& r = *plan[i].request;
    if (!r.draft || r.phase != Request::Phase::kDecode || plan[i].tokens < 2 || r.pending_tokens() != 1) continue;
    drafting.push_back(i);
    draft_items.push_back(DraftItem{&*r.draft, r.unseeded_taps, true, r.tokens.back()});
  }
  if (drafting.empty()) return {};
  const int block = model_.draft_block();
  auto choose = [&](int j, int, std::span<const float> logits) -> int32_t {
    Request& r = *plan[drafting[j]].request;
    const float temperature = r.params.sampling.temperature;
    if (temperature == 0.0f)
      return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    return DrawFrom(DraftDistribution(logits, temperature), r.rng);
  };
  DraftResult result;
  const auto start = std::chrono::steady_clock::now();
  try {
    model_.Draft(draft_items, ctx_, choose, result);
  } catch (const Error& error) {
    for (size_t i : drafting) Finish(*plan[i].request, FinishReason::kError, error.what(), updates);
    return drafting;
  }
  stats_.speculation.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t vocab = model_.config().vocab_size;
  for (size_t j = 0; j < drafting.size(); ++j) {
    const size_t i = drafting[j];
    Request& r = *plan[i].request;
    r.unseeded_taps.clear();
    const std::span<const float> confidence = std::span<const float>(result.confidence).subspan(j * block, block);
    const int max_k = static_cast<int>(std::min<int64_t>(plan[i].tokens - 1, block));
    const int k = options_.speculative_length > 0 ? std::min(options_.speculative_length, max_k)
                                                  : ChooseVerifyLength(confidence, max_k, step_bytes_);
    r.verify_tokens.assign(1, r.tokens.back());
    r.verify_tokens.insert(r.verify_tokens.end(), result.tokens.begin() + j * block,
                           result.tokens.begin() + j * block + k);
    if (r.params.return_draft_logits) {
      r.returned_draft.assign(result.logits.begin() + j * block * vocab,
                              result.logits.begin() + (j + 1) * block * vocab);
    }
    if (r.params.sampling.temperature > 0.0f) {
      r.draft_logits.assign(result.logits.begin() + j * block * vocab, result.logits.begin() + (j * block + k) * vocab);
    }
    items[i].tokens = r.verify_tokens;
    items[i].logits = LogitsMode::kAll;
    items[i].tap_rows = k + 1;
    items[i].rollback = true;
  }
  return {};
}

void Engine::AcceptDrafts(Request& r, std::span<const float> rows, std::span<const float> taps,
                          std::vector<RequestUpdate>& updates) {
  const int64_t vocab = model_.config().vocab_size;
  const int k = static_cast<int>(r.verify_tokens.size()) - 1;
  const int64_t start = r.state->length() - (k + 1);
  const SamplingParams& params = r.params.sampling;
  SpeculationStats& spec = stats_.speculation;
  RequestUpdate& update = updates.emplace_back();
  update.id = r.id;
  update.prompt_tokens = r.prompt_length;
  update.cached_tokens = r.cached_tokens;
  update.draft_logits = std::move(r.returned_draft);
  r.returned_draft.clear();
  int accepted = 0;
  int emitted = 0;
  ++spec.verify_steps;
  spec.drafted_tokens += k;
  for (int i = 0; i <= k; ++i) {
    const std::span<const float> row = rows.subspan(i * vocab, vocab);
    const TokenHistory history{.prompt = std::span<const int32_t>(r.tokens).first(r.prompt_length),
                               .output = r.output()};
    SampleResult result;
    bool accept = false;
    try {
      if (i == k || params.temperature == 0.0f) {
        // The bonus token after every draft survived, or the plain greedy pick.
        result = Sample(row, params, history, r.rng);
        accept = i < k && result.token == r.verify_tokens[i + 1];
      } else {
        const std::vector<double> p = SamplingDistribution(row, params, history);
        const std::vector<double> q =
            DraftDistribution(std::span<const float>(r.draft_logits).subspan(i * vocab, vocab), params.temperature);
        const DraftVerdict verdict = VerifyDraftToken(p, q, r.verify_tokens[i + 1], r.rng);
        result = TokenResult(row, params, verdict.token);
        accept = verdict.accepted;
      }
    } catch (const Error& error) {
      Finish(r, FinishReason::kError, error.what(), updates);
      return;
    }
    if (i < k) {
      ++spec.verified_at[i];
      spec.accepted_at[i] += accept ? 1 : 0;
    }
    const int32_t token = result.token;
    r.tokens.push_back(token);
    ++stats_.generated_tokens;
    ++emitted;
    ++spec.emitted_tokens;
    StopStep stop = r.stop.Append(token);
    update.tokens.push_back({token, result.logprob, std::move(result.top_logprobs)});
    update.text += stop.text;
    if (stop.finished()) return Finish(r, stop.finish, "", updates);
    if (static_cast<int64_t>(r.tokens.size()) > model_.max_context())
      return Finish(r, FinishReason::kLength, "", updates);
    if (!accept) break;
    ++accepted;
    ++spec.accepted_tokens;
  }
  // Keep [next, d_1..d_accepted]; the last emitted token is the next step's input.
  const int64_t kept = accepted + 1;
  r.state->Truncate(start + kept, model_.EngramHistory(std::span<const int32_t>(r.tokens).first(start + kept)));
  AfterForward(r);
  AppendTaps(r, taps.first(kept * model_.draft_tap_width()));
  r.gate.RecordVerify(emitted, step_bytes_.draft + step_bytes_.Step(k + 1), step_bytes_);
}

std::optional<std::string> Engine::ConstrainNext(Request& r, int64_t vocab) {
  ConstraintMatcher& matcher = *r.constraint;
  DI_CHECK(matcher.num_accepted() == r.output().size(), "the constraint stands at token ", matcher.num_accepted(),
           " of an output of ", r.output().size());
  r.allowed.resize((static_cast<size_t>(vocab) + 63) / 64);
  matcher.FillNextTokenMask(r.allowed);
  if (vocab % 64 != 0) r.allowed.back() &= (uint64_t{1} << (vocab % 64)) - 1;  // ids the model does not have
  for (uint64_t word : r.allowed) {
    if (word != 0) return std::nullopt;
  }
  const std::string& what = matcher.constraint().options().description;
  return "structured output" + (what.empty() ? "" : " (" + what + ")") + ": no token of the model's " +
         std::to_string(vocab) + "-token vocabulary can continue the output after " +
         std::to_string(r.output().size()) + " tokens; the constraint expects " + matcher.Expected();
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.running = running_.size();
  s.waiting = waiting_.size();
  s.kv_budget_bytes = pool_->budget_bytes();
  s.kv_held_bytes = pool_->held_bytes();
  s.backend_held_bytes = ctx_.backend.held_bytes();
  s.one_thread_steps = ctx_.backend.one_thread_steps();
  s.kv_peak_bytes = pool_->peak_held_bytes();
  s.kv_in_use_bytes = pool_->in_use_bytes();
  s.kv_pages_in_use = pool_->pages_in_use();
  if (prefix_cache_) {
    s.prefix = prefix_cache_->stats();
    s.prefix_cached_blocks = prefix_cache_->cached_blocks();
  }
  return s;
}

}  // namespace deepinfer
