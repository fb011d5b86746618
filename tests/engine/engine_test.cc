// The serving engine on the tiny V4.1 model: batch invariance with sampling, memory budgets
// with preemption, aborts, context limits and a load test that must leave nothing behind.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "backend/cpu_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

std::string TinyModel(const std::string& name = "tiny-a") {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/models/" + name;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::optional<float>> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int finishes = 0;  // updates that said finished: must be exactly one
  int64_t cached_tokens = 0;

  bool operator==(const Outcome& other) const {
    if (tokens != other.tokens || logprobs != other.logprobs || finish != other.finish) return false;
    if (top_logprobs.size() != other.top_logprobs.size()) return false;
    for (size_t i = 0; i < top_logprobs.size(); ++i) {
      if (top_logprobs[i].size() != other.top_logprobs[i].size()) return false;
      for (size_t k = 0; k < top_logprobs[i].size(); ++k) {
        if (top_logprobs[i][k].token != other.top_logprobs[i][k].token ||
            top_logprobs[i][k].logprob != other.top_logprobs[i][k].logprob) {
          return false;
        }
      }
    }
    return true;
  }
};

void Collect(const std::vector<RequestUpdate>& updates, std::map<RequestId, Outcome>& outcomes) {
  for (const RequestUpdate& u : updates) {
    Outcome& o = outcomes[u.id];
    for (const GeneratedToken& t : u.tokens) {
      o.tokens.push_back(t.token);
      o.logprobs.push_back(t.logprob);
      o.top_logprobs.push_back(t.top_logprobs);
    }
    o.cached_tokens = std::max(o.cached_tokens, u.cached_tokens);
    if (u.finished()) {
      o.finish = u.finish;
      o.error = u.error;
      ++o.finishes;
    }
  }
}

// A request and the step it arrives at.
struct Arrival {
  RequestParams params;
  int step = 0;
};

// Runs every request, adding each at its step; returns outcomes in arrival-list order.
std::vector<Outcome> Serve(Engine& engine, const std::vector<Arrival>& arrivals, const std::vector<size_t>& order,
                           int max_steps = 100000) {
  std::map<RequestId, Outcome> outcomes;
  std::vector<RequestId> ids(arrivals.size(), 0);
  size_t added = 0;
  std::vector<size_t> by_step = order;
  std::stable_sort(by_step.begin(), by_step.end(),
                   [&](size_t a, size_t b) { return arrivals[a].step < arrivals[b].step; });
  for (int step = 0; step < max_steps; ++step) {
    while (added < by_step.size() && arrivals[by_step[added]].step <= step) {
      ids[by_step[added]] = engine.Add(arrivals[by_step[added]].params);
      ++added;
    }
    if (added == by_step.size() && engine.idle()) break;
    Collect(engine.Step(), outcomes);
  }
  EXPECT_TRUE(engine.idle()) << "the engine did not drain in " << max_steps << " steps";
  std::vector<Outcome> result;
  for (RequestId id : ids) result.push_back(outcomes[id]);
  return result;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> id(3, 511);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = id(rng);
  return tokens;
}

SamplingParams SamplingVariant(int i) {
  SamplingParams p;
  switch (i % 7) {
    case 0:
      break;  // greedy
    case 1:
      p.temperature = 0.8f;
      p.top_k = 20;
      break;
    case 2:
      p.temperature = 1.0f;
      p.top_p = 0.9f;
      p.logprobs = 3;
      break;
    case 3:
      p.temperature = 0.7f;
      p.min_p = 0.05f;
      p.repetition_penalty = 1.2f;
      break;
    case 4:
      p.temperature = 1.2f;
      p.presence_penalty = 0.5f;
      p.frequency_penalty = 0.3f;
      p.logprobs = 0;
      break;
    case 5:
      p.temperature = 0.9f;
      p.logit_bias = {{17, 2.5f}, {42, -100.0f}};
      break;
    default:
      p.logprobs = 5;  // greedy with logprobs
      break;
  }
  return p;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::Load(TinyModel()).release();
    threads_ = new ThreadPool(2);
    backend_ = new CpuBackend(*threads_, DetectIsa());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete backend_;
    delete threads_;
  }
  // One backend for every engine of the suite: they step one at a time.
  ComputeContext Ctx() const { return ComputeContext{*backend_}; }

  // Each request run alone in a fresh engine: the reference for everything else.
  std::vector<Outcome> Alone(const std::vector<Arrival>& arrivals) const {
    std::vector<Outcome> result;
    for (const Arrival& a : arrivals) {
      Engine engine(*model_, Ctx(), EngineOptions{.prefix_caching = false});
      result.push_back(Serve(engine, {{a.params, 0}}, {0})[0]);
    }
    return result;
  }

  static std::vector<Arrival> MixedRequests(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<int32_t> system_prompt = RandomTokens(rng, 40);
    std::vector<Arrival> arrivals;
    for (int i = 0; i < n; ++i) {
      Arrival a;
      std::uniform_int_distribution<int> length(1, 90);
      if (i % 4 == 0) {  // a shared system prompt, to make the prefix cache serve some
        a.params.prompt = system_prompt;
        const std::vector<int32_t> tail = RandomTokens(rng, length(rng) / 3 + 1);
        a.params.prompt.insert(a.params.prompt.end(), tail.begin(), tail.end());
      } else {
        a.params.prompt = RandomTokens(rng, length(rng));
      }
      a.params.sampling = SamplingVariant(i);
      a.params.stop.max_tokens = 4 + i % 7;
      if (i % 5 == 3) a.params.stop.stop_token_ids = {static_cast<int32_t>(3 + i)};
      a.params.seed = 1000 + i;
      a.step = static_cast<int>(rng() % 12);
      arrivals.push_back(std::move(a));
    }
    return arrivals;
  }

  static Model* model_;
  static ThreadPool* threads_;
  static CpuBackend* backend_;
};

Model* EngineTest::model_ = nullptr;
ThreadPool* EngineTest::threads_ = nullptr;
CpuBackend* EngineTest::backend_ = nullptr;

TEST_F(EngineTest, RequestsProduceTheirAloneTokensWhateverRunsBesideThem) {
  const std::vector<Arrival> arrivals = MixedRequests(32, 7);
  const std::vector<Outcome> alone = Alone(arrivals);
  for (const Outcome& o : alone) {
    ASSERT_EQ(o.finishes, 1);
    ASSERT_FALSE(o.tokens.empty());
  }
  struct Setting {
    uint32_t order_seed;
    int64_t step_tokens;
    int max_running;
  };
  for (const Setting& s : {Setting{1, 512, 32}, Setting{2, 7, 4}, Setting{3, 61, 16}}) {
    std::vector<size_t> order(arrivals.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(s.order_seed));
    Engine engine(*model_, Ctx(), EngineOptions{.max_step_tokens = s.step_tokens, .max_running = s.max_running});
    const std::vector<Outcome> together = Serve(engine, arrivals, order);
    for (size_t i = 0; i < arrivals.size(); ++i) {
      EXPECT_EQ(together[i].finishes, 1) << "request " << i;
      EXPECT_TRUE(together[i] == alone[i])
          << "request " << i << " differs with budget " << s.step_tokens << ", order seed " << s.order_seed;
    }
    EXPECT_GT(engine.stats().prefix.hit_tokens, 0u) << "the shared system prompt should hit";
  }
}

TEST_F(EngineTest, MemoryBudgetTooSmallForAllStillCompletesEverythingExactly) {
  std::vector<Arrival> arrivals = MixedRequests(12, 11);
  for (Arrival& a : arrivals) {
    a.step = 0;
    a.params.stop.max_tokens = 12;
  }
  const std::vector<Outcome> alone = Alone(arrivals);
  const CacheLayout layout = CacheLayout::For(model_->config(), 16);
  // Room for about two sequences of ~100 tokens.
  const uint64_t per_sequence = 7 * (layout.window_page_bytes + layout.compressed_page_bytes) + layout.state_page_bytes;
  const uint64_t budget = 2 * per_sequence;
  Engine engine(*model_, Ctx(), EngineOptions{.max_step_tokens = 64, .max_running = 8, .kv_cache_memory = budget});
  std::vector<size_t> order(arrivals.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const std::vector<Outcome> together = Serve(engine, arrivals, order);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    EXPECT_EQ(together[i].finishes, 1) << "request " << i;
    EXPECT_TRUE(together[i] == alone[i]) << "request " << i << " differs under the memory budget";
  }
  const EngineStats stats = engine.stats();
  std::printf("[engine] budget %llu B: peak %llu B (%.1f%%), %llu preemptions, %llu steps\n",
              static_cast<unsigned long long>(budget), static_cast<unsigned long long>(stats.kv_peak_bytes),
              100.0 * stats.kv_peak_bytes / budget, static_cast<unsigned long long>(stats.preemptions),
              static_cast<unsigned long long>(stats.steps));
  EXPECT_LE(stats.kv_peak_bytes, budget);
  EXPECT_GT(stats.preemptions, 0u) << "the budget was meant to force preemption";
}

TEST_F(EngineTest, SharedSystemPromptHitsThePrefixCacheAndStaysExact) {
  std::mt19937 rng(21);
  const std::vector<int32_t> system_prompt = RandomTokens(rng, 100);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 6; ++i) {
    Arrival a;
    a.params.prompt = system_prompt;
    const std::vector<int32_t> question = RandomTokens(rng, 5 + 3 * i);
    a.params.prompt.insert(a.params.prompt.end(), question.begin(), question.end());
    a.params.sampling = SamplingVariant(i);
    a.params.stop.max_tokens = 6;
    a.params.seed = 77 + i;
    a.step = i == 0 ? 0 : 4;  // the first one warms the cache
    arrivals.push_back(std::move(a));
  }
  const std::vector<Outcome> alone = Alone(arrivals);
  Engine engine(*model_, Ctx());
  const std::vector<Outcome> served = Serve(engine, arrivals, {0, 1, 2, 3, 4, 5});
  for (size_t i = 0; i < arrivals.size(); ++i) {
    EXPECT_TRUE(served[i] == alone[i]) << "request " << i;
    // Every full 16-token block of the 100-token system prompt: 96 tokens.
    EXPECT_EQ(served[i].cached_tokens, i == 0 ? 0 : 96) << "request " << i;
  }
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.prefix.hits, 5u);
  EXPECT_EQ(stats.cached_prompt_tokens, 5u * 96);
}

// return_logits hands back every position's logits exactly once, even when a preemption makes
// the engine recompute positions it already returned.
TEST_F(EngineTest, ReturnedLogitsSurvivePreemptionUnchanged) {
  std::mt19937 rng(31);
  std::vector<RequestParams> requests;
  for (int i = 0; i < 4; ++i) {
    RequestParams p{.prompt = RandomTokens(rng, 50 + 7 * i)};
    p.stop.max_tokens = 10;
    p.stop.ignore_eos = true;
    p.return_logits = true;
    requests.push_back(std::move(p));
  }
  auto run = [&](const EngineOptions& options, std::vector<RequestParams> batch) {
    Engine engine(*model_, Ctx(), options);
    std::map<RequestId, std::vector<float>> logits;
    std::vector<RequestId> ids;
    for (RequestParams& p : batch) ids.push_back(engine.Add(std::move(p)));
    while (!engine.idle()) {
      for (const RequestUpdate& u : engine.Step()) {
        logits[u.id].insert(logits[u.id].end(), u.logits.begin(), u.logits.end());
      }
    }
    std::vector<std::vector<float>> ordered;
    for (RequestId id : ids) ordered.push_back(logits[id]);
    return std::make_pair(ordered, engine.stats().preemptions);
  };
  std::vector<std::vector<float>> alone;
  for (const RequestParams& p : requests) alone.push_back(run(EngineOptions{}, {p}).first[0]);
  const CacheLayout layout = CacheLayout::For(model_->config(), 16);
  const uint64_t budget = 7 * (layout.window_page_bytes + layout.compressed_page_bytes) + 2 * layout.state_page_bytes;
  const auto [together, preemptions] =
      run(EngineOptions{.max_step_tokens = 128, .max_running = 4, .kv_cache_memory = budget}, requests);
  EXPECT_GT(preemptions, 0u) << "the budget was meant to force preemption";
  const size_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < requests.size(); ++i) {
    // Prompt positions plus every generated token fed back (the last one is not).
    EXPECT_EQ(alone[i].size(), (requests[i].prompt.size() + 9) * vocab) << "request " << i;
    EXPECT_TRUE(together[i] == alone[i]) << "request " << i;
  }
}

TEST_F(EngineTest, ARequestThatCannotFitAloneFailsWithAReason) {
  const CacheLayout layout = CacheLayout::For(model_->config(), 16);
  Engine engine(*model_, Ctx(), EngineOptions{.kv_cache_memory = static_cast<uint64_t>(layout.window_page_bytes)});
  std::mt19937 rng(3);
  const std::vector<Outcome> out = Serve(engine, {{RequestParams{.prompt = RandomTokens(rng, 20)}, 0}}, {0});
  EXPECT_EQ(out[0].finish, FinishReason::kError);
  EXPECT_THAT(out[0].error, HasSubstr("KV cache budget"));
  EXPECT_EQ(engine.stats().kv_in_use_bytes, 0u);
}

TEST_F(EngineTest, LongRequestStopsAtTheContextLimit) {
  const std::unique_ptr<Model> model = Model::Load(TinyModel(), ModelOptions{.max_context = 40});
  Engine engine(*model, Ctx());
  std::mt19937 rng(4);
  RequestParams params{.prompt = RandomTokens(rng, 35)};
  params.stop.ignore_eos = true;
  const std::vector<Outcome> out = Serve(engine, {{params, 0}}, {0});
  EXPECT_EQ(out[0].finish, FinishReason::kLength);
  EXPECT_EQ(out[0].tokens.size(), 6u);  // the 41st token can no longer be processed
}

TEST_F(EngineTest, AddRejectsBadRequestsWithoutKeepingThem) {
  Engine engine(*model_, Ctx());
  auto error_of = [&](RequestParams p) {
    try {
      engine.Add(std::move(p));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of({}), HasSubstr("the prompt is empty"));
  EXPECT_THAT(error_of({.prompt = {1, 512}}), HasSubstr("prompt token 1 has id 512, outside the vocabulary [0, 512)"));
  EXPECT_THAT(error_of({.prompt = std::vector<int32_t>(4097, 5)}), HasSubstr("exceed the maximum context of 4096"));
  EXPECT_THAT(error_of({.prompt = {5}, .sampling = {.temperature = -1.0f}}), HasSubstr("temperature"));
  RequestParams with_stop{.prompt = {5}};
  with_stop.stop.stop = {"x"};
  EXPECT_THAT(error_of(with_stop), HasSubstr("stop strings need a tokenizer"));
  EXPECT_TRUE(engine.idle());
}

TEST_F(EngineTest, AbortFreesEverythingAndIsReportedOnce) {
  Engine engine(*model_, Ctx(), EngineOptions{.max_step_tokens = 8, .max_running = 2});
  std::mt19937 rng(6);
  RequestParams long_params{.prompt = RandomTokens(rng, 60)};
  long_params.stop.max_tokens = 50;
  const RequestId running = engine.Add(long_params);
  const RequestId waiting = engine.Add(long_params);
  const RequestId queued = engine.Add(long_params);
  std::map<RequestId, Outcome> outcomes;
  Collect(engine.Step(), outcomes);
  Collect(engine.Step(), outcomes);
  EXPECT_TRUE(engine.Abort(running));
  EXPECT_TRUE(engine.Abort(queued));
  EXPECT_FALSE(engine.Abort(queued)) << "a second abort finds nothing";
  EXPECT_FALSE(engine.Abort(12345));
  while (!engine.idle()) Collect(engine.Step(), outcomes);
  EXPECT_EQ(outcomes[running].finish, FinishReason::kAbort);
  EXPECT_EQ(outcomes[queued].finish, FinishReason::kAbort);
  EXPECT_EQ(outcomes[running].finishes, 1);
  EXPECT_EQ(outcomes[waiting].finish, FinishReason::kMaxTokens);
  EXPECT_EQ(outcomes[waiting].tokens.size(), 50u);
  engine.ClearPrefixCache();
  EXPECT_EQ(engine.stats().kv_in_use_bytes, 0u);
}

// 256 requests of random lengths arriving over time, a fifth of them aborted at random moments
// (queued, prefilling, decoding or already finished), under a budget that forces preemption.
TEST_F(EngineTest, LoadTestWithRandomAbortsLeavesTheCacheEmpty) {
  std::mt19937 rng(2026);
  const CacheLayout layout = CacheLayout::For(model_->config(), 16);
  const uint64_t budget = 14 * (layout.window_page_bytes + layout.compressed_page_bytes + layout.state_page_bytes);
  Engine engine(*model_, Ctx(),
                EngineOptions{.max_step_tokens = 96, .max_running = 16, .kv_cache_memory = budget, .seed = 1});
  std::uniform_int_distribution<int> prompt_length(1, 64), output_length(1, 12), coin(0, 4);
  std::vector<RequestId> ids;
  std::map<RequestId, int> abort_at;  // step
  std::map<RequestId, Outcome> outcomes;
  std::set<RequestId> aborted;
  int step = 0;
  for (int i = 0; i < 256 || !engine.idle(); ++step) {
    for (int k = 0; k < 3 && i < 256; ++k, ++i) {
      RequestParams p{.prompt = RandomTokens(rng, prompt_length(rng))};
      p.sampling = SamplingVariant(i);
      p.stop.max_tokens = output_length(rng);
      const RequestId id = engine.Add(std::move(p));
      ids.push_back(id);
      if (coin(rng) == 0) abort_at[id] = step + static_cast<int>(rng() % 30);
    }
    for (const auto& [id, at] : abort_at) {
      if (at == step && engine.Abort(id)) aborted.insert(id);
    }
    Collect(engine.Step(), outcomes);
    ASSERT_LT(step, 20000) << "the load test does not drain";
  }
  for (RequestId id : ids) {
    const Outcome& o = outcomes[id];
    EXPECT_EQ(o.finishes, 1) << "request " << id;
    if (aborted.count(id)) {
      EXPECT_EQ(o.finish, FinishReason::kAbort);
    } else {
      EXPECT_TRUE(o.finish == FinishReason::kMaxTokens || o.finish == FinishReason::kStopToken)
          << "request " << id << ": " << OpenAiFinishReason(o.finish) << " " << o.error;
    }
  }
  const EngineStats stats = engine.stats();
  std::printf("[engine] load: %zu requests, %zu aborted, %llu steps, %llu preemptions, peak %llu of %llu B\n",
              ids.size(), aborted.size(), static_cast<unsigned long long>(stats.steps),
              static_cast<unsigned long long>(stats.preemptions), static_cast<unsigned long long>(stats.kv_peak_bytes),
              static_cast<unsigned long long>(budget));
  EXPECT_GT(aborted.size(), 10u);
  EXPECT_LE(stats.kv_peak_bytes, budget);
  EXPECT_EQ(stats.running, 0u);
  EXPECT_EQ(stats.waiting, 0u);
  engine.ClearPrefixCache();
  EXPECT_EQ(engine.stats().kv_in_use_bytes, 0u) << "pages leaked";
}

}  // namespace
}  // namespace deepinfer
