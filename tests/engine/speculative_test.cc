// DSpark speculative decoding in the engine (engine/speculative.h): greedy output is token for
// token (and logprob for logprob) the plain engine's, under batching, chunked prefill, the prefix
// cache and preemption; sampling is reproducible per seed; and the acceptance rule is lossless
// (a chi-square test of its output distribution, with a broken variant showing the test's power).
#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/cpu_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

std::string ModelDir(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/models/" + name; }

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::optional<float>> logprobs;
  FinishReason finish = FinishReason::kNone;
  bool operator==(const Outcome&) const = default;
};

std::vector<Outcome> Serve(Engine& engine, const std::vector<RequestParams>& requests) {
  std::map<RequestId, Outcome> outcomes;
  std::vector<RequestId> ids;
  for (const RequestParams& r : requests) ids.push_back(engine.Add(r));
  for (int step = 0; step < 100000 && !engine.idle(); ++step) {
    for (const RequestUpdate& u : engine.Step()) {
      Outcome& o = outcomes[u.id];
      for (const GeneratedToken& t : u.tokens) {
        o.tokens.push_back(t.token);
        o.logprobs.push_back(t.logprob);
      }
      if (u.finished()) o.finish = u.finish;
    }
  }
  EXPECT_TRUE(engine.idle());
  std::vector<Outcome> result;
  for (RequestId id : ids) result.push_back(outcomes[id]);
  return result;
}

class SpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = std::make_unique<ThreadPool>(2);
    backend_ = std::make_unique<CpuBackend>(*pool_, DetectIsa());
  }
  static void TearDownTestSuite() {
    backend_.reset();
    pool_.reset();
  }
  static ComputeContext Ctx() { return ComputeContext{*backend_}; }
  static std::unique_ptr<ThreadPool> pool_;
  static std::unique_ptr<CpuBackend> backend_;
};
std::unique_ptr<ThreadPool> SpeculativeTest::pool_;
std::unique_ptr<CpuBackend> SpeculativeTest::backend_;

std::vector<RequestParams> GreedyRequests(int64_t vocab, int n, int max_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = static_cast<int32_t>(3 + rng() % (vocab - 3));
  std::vector<RequestParams> requests;
  for (int i = 0; i < n; ++i) {
    RequestParams r;
    if (i % 3 == 0) r.prompt = shared;  // the prefix cache serves these
    const int tail = 1 + static_cast<int>(rng() % 60);
    for (int t = 0; t < tail; ++t) r.prompt.push_back(static_cast<int32_t>(3 + rng() % (vocab - 3)));
    r.stop.max_tokens = max_tokens - i % 5;
    if (i % 4 == 1) r.sampling.logprobs = 2;
    if (i % 4 == 2) r.sampling.repetition_penalty = 1.3f;  // penalties see the accepted drafts
    if (i % 4 == 3) r.sampling.logit_bias = {{7, 1.5f}};
    if (i == n - 1) r.speculative = false;  // an opt-out beside speculating requests
    r.seed = 100 + i;
    requests.push_back(std::move(r));
  }
  return requests;
}

TEST_F(SpeculativeTest, GreedyOutputIsThePlainOutputUnderBatchingChunkingCachingAndPreemption) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-d"));
  const std::vector<RequestParams> requests = GreedyRequests(model->config().vocab_size, 10, 48, 3);
  Engine plain(*model, Ctx(), EngineOptions{.prefix_caching = false});
  const std::vector<Outcome> expected = Serve(plain, requests);

  struct Setup {
    const char* name;
    EngineOptions options;
  };
  const CacheLayout layout = CacheLayout::For(model->config(), 16);
  const std::vector<Setup> setups = {
      {"speculative", EngineOptions{.speculative = true}},
      {"one at a time", EngineOptions{.max_running = 1, .speculative = true}},
      {"chunked prefill", EngineOptions{.max_step_tokens = 24, .max_running = 4, .speculative = true}},
      {"tight memory (preemption)",
       EngineOptions{.max_step_tokens = 64,
                     .max_running = 8,
                     .kv_cache_memory = static_cast<uint64_t>(
                         14 * (layout.window_page_bytes + layout.compressed_page_bytes) + 8 * layout.state_page_bytes),
                     .speculative = true}},
  };
  for (const Setup& setup : setups) {
    Engine engine(*model, Ctx(), setup.options);
    const std::vector<Outcome> got = Serve(engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i].tokens, expected[i].tokens) << setup.name << ", request " << i;
      EXPECT_EQ(got[i].logprobs, expected[i].logprobs) << setup.name << ", request " << i;
      EXPECT_EQ(got[i].finish, expected[i].finish) << setup.name << ", request " << i;
    }
    const EngineStats stats = engine.stats();
    EXPECT_GT(stats.speculation.verify_steps, 0u) << setup.name;
    std::printf(
        "[speculative] tiny-d %-26s verify steps %llu, drafted %llu, accepted %llu, mean accepted length %.3f, "
        "preemptions %llu\n",
        setup.name, static_cast<unsigned long long>(stats.speculation.verify_steps),
        static_cast<unsigned long long>(stats.speculation.drafted_tokens),
        static_cast<unsigned long long>(stats.speculation.accepted_tokens), stats.speculation.mean_accepted_length(),
        static_cast<unsigned long long>(stats.preemptions));
  }
}

TEST_F(SpeculativeTest, TrainedModelLongGreedyGenerationsAreUnchanged) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("kjv-tiny"));
  const Tokenizer tokenizer = Tokenizer::FromFile(ModelDir("kjv-tiny") + "/tokenizer.json");
  std::ifstream in(ModelDir("kjv-tiny") + "/eval/text_prompts.json");
  const std::vector<std::string> prompts = nlohmann::json::parse(in).get<std::vector<std::string>>();
  std::vector<RequestParams> requests;
  for (size_t i = 0; i < 3; ++i) {
    RequestParams r;
    r.prompt = tokenizer.Encode(prompts[i]);
    r.stop.max_tokens = 512;
    r.stop.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  Engine plain(*model, Ctx());
  const std::vector<Outcome> expected = Serve(plain, requests);
  // The confidence policy, and the full block every step (the reference measurement's setting).
  for (const int length : {0, 5}) {
    Engine engine(*model, Ctx(),
                  EngineOptions{.speculative = true, .speculative_length = length, .speculative_gate = length == 0});
    const std::vector<Outcome> got = Serve(engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(expected[i].tokens.size(), 512u);
      EXPECT_EQ(got[i].tokens, expected[i].tokens) << "prompt " << i << ", speculative length " << length;
    }
    const SpeculationStats& spec = engine.stats().speculation;
    EXPECT_GT(spec.accepted_tokens, 0u);
    std::printf(
        "[speculative] kjv-tiny 3 x 512 greedy tokens, length %s: verify steps %llu, mean accepted length "
        "%.3f, accepted %llu of %llu drafts; accepted/verified per position:",
        length == 0 ? "policy" : "5", static_cast<unsigned long long>(spec.verify_steps), spec.mean_accepted_length(),
        static_cast<unsigned long long>(spec.accepted_tokens), static_cast<unsigned long long>(spec.drafted_tokens));
    for (size_t i = 0; i < spec.verified_at.size(); ++i) {
      std::printf(" %llu/%llu", static_cast<unsigned long long>(spec.accepted_at[i]),
                  static_cast<unsigned long long>(spec.verified_at[i]));
    }
    std::printf("\n");
  }
}

TEST_F(SpeculativeTest, SamplingIsReproduciblePerSeed) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-d"));
  std::vector<RequestParams> requests = GreedyRequests(model->config().vocab_size, 6, 40, 9);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling.temperature = 0.6f + 0.2f * static_cast<float>(i % 3);
    if (i % 2 == 0) requests[i].sampling.top_p = 0.9f;
  }
  std::vector<Outcome> first;
  for (int run = 0; run < 2; ++run) {
    Engine engine(*model, Ctx(), EngineOptions{.max_step_tokens = 32, .max_running = 8, .speculative = true});
    const std::vector<Outcome> got = Serve(engine, requests);
    if (run == 0) {
      first = got;
      EXPECT_GT(engine.stats().speculation.verify_steps, 0u);
    } else {
      EXPECT_TRUE(got == first) << "the same seeds gave other tokens";
    }
  }
}

TEST_F(SpeculativeTest, AModelWithoutDSparkCannotSpeculate) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-a"));
  try {
    Engine engine(*model, Ctx(), EngineOptions{.speculative = true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DSpark"), std::string::npos) << e.what();
  }
}

// Chi-square of `draws` counts against the distribution p (cells with p = 0 must stay empty).
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t draws, int* cells) {
  double chi = 0;
  *cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double expected = p[i] * static_cast<double>(draws);
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++*cells;
  }
  return chi;
}

// The acceptance rule yields exactly the target's sampling distribution p, for a draft q that
// is nothing like it, on an 8-token vocabulary, with the target's own transforms (top-k, top-p,
// penalties) in p. 200,000 draws per case at fixed seeds; the bound is the chi-square 0.999
// quantile for 7 degrees of freedom (24.32), so a correct rule fails 1 time in 1000 (never, at
// these seeds). Power: the variant that resamples from p instead of the residual after a
// rejection (a classic bug; its distribution is off by a few percent in each cell) lands far
// above the bound at the same seeds, as does returning the draft's token unverified.
TEST(SpeculativeSampling, AcceptanceIsLosslessChiSquare) {
  constexpr int64_t kDraws = 200000;
  constexpr double kBound = 24.32;
  const std::vector<float> target_logits = {1.0f, 2.5f, 0.2f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f};
  const std::vector<float> draft_logits = {2.0f, 0.1f, 1.5f, 1.0f, -1.0f, 0.5f, 0.3f, 1.2f};
  struct Case {
    const char* name;
    SamplingParams params;
  };
  SamplingParams top_k;
  top_k.temperature = 0.9f;
  top_k.top_k = 5;
  SamplingParams top_p;
  top_p.temperature = 1.3f;
  top_p.top_p = 0.8f;
  top_p.repetition_penalty = 1.5f;
  const std::vector<Case> cases = {
      {"temperature 1", SamplingParams{1.0f}}, {"top-k 5 at 0.9", top_k}, {"top-p 0.8, repetition 1.5", top_p}};
  const std::vector<int32_t> history_tokens = {1, 4};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TokenHistory history{.prompt = history_tokens, .output = {}};
    const std::vector<double> p = SamplingDistribution(target_logits, c.params, history);
    const std::vector<double> q = DraftDistribution(draft_logits, c.params.temperature);
    Rng rng(12345);
    std::vector<int64_t> lossless(p.size()), resample_from_p(p.size()), unverified(p.size());
    int64_t accepted = 0;
    for (int64_t n = 0; n < kDraws; ++n) {
      const int32_t proposal = DrawFrom(q, rng);
      const DraftVerdict verdict = VerifyDraftToken(p, q, proposal, rng);
      ++lossless[verdict.token];
      accepted += verdict.accepted ? 1 : 0;
      // The broken variants, from the same stream.
      const bool keep = rng.UniformOpenZero() * q[proposal] <= p[proposal];
      ++resample_from_p[keep ? proposal : DrawFrom(p, rng)];
      ++unverified[proposal];
    }
    int cells = 0;
    const double chi = ChiSquare(lossless, p, kDraws, &cells);
    EXPECT_LE(cells, 8);
    EXPECT_LT(chi, kBound) << "the speculative sampler's distribution differs from the plain sampler's";
    std::vector<double> q_on_support = q;
    double chi_resample = 0, chi_unverified = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0) continue;
      const double e = p[i] * kDraws;
      chi_resample += (resample_from_p[i] - e) * (resample_from_p[i] - e) / e;
      chi_unverified += (unverified[i] - e) * (unverified[i] - e) / e;
    }
    EXPECT_GT(chi_resample, 10 * kBound) << "the test has no power against resampling from p";
    EXPECT_GT(chi_unverified, 10 * kBound);
    std::printf(
        "[speculative] %-28s chi-square %.2f (bound %.2f, %d cells); resample-from-p variant %.0f; unverified "
        "%.0f; acceptance rate %.3f\n",
        c.name, chi, kBound, cells, chi_resample, chi_unverified, static_cast<double>(accepted) / kDraws);
  }
}

TEST(SpeculativePolicy, VerifyLengthFollowsConfidenceAndBytes) {
  // Bytes dominated by the fixed weights: extra tokens are nearly free, so verify everything
  // while survival is likely; a spent confidence stops the verify early.
  StepBytes cheap{.fixed = 1000, .expert_bytes = 1, .experts = 256, .top_k = 6, .moe_layers = 2, .draft = 10};
  const std::vector<float> confident = {4, 4, 4, 4, 4};
  const std::vector<float> fading = {3, 1, -4, -4, -4};
  EXPECT_EQ(ChooseVerifyLength(confident, 5, cheap), 5);
  EXPECT_EQ(ChooseVerifyLength(fading, 5, cheap), 2);
  EXPECT_EQ(ChooseVerifyLength(confident, 3, cheap), 3);  // never past the room there is
  // Routed experts dominate: each verified token reads about top_k more experts per layer, so
  // only the likeliest drafts pay for themselves; at least one is always verified.
  StepBytes routed{.fixed = 10, .expert_bytes = 100, .experts = 256, .top_k = 6, .moe_layers = 40, .draft = 10};
  EXPECT_EQ(ChooseVerifyLength(std::vector<float>{-5, -5, -5, -5, -5}, 5, routed), 1);
  EXPECT_LT(ChooseVerifyLength(std::vector<float>{2, 2, 2, 2, 2}, 5, routed), 5);
  EXPECT_NEAR(ExpectedTokens(confident, 0), 1.0, 1e-12);
  EXPECT_NEAR(ExpectedTokens(std::vector<float>{0, 0}, 2), 1.75, 1e-12);
}

TEST(SpeculativePolicy, TheGateClosesWhenDraftsDoNotPayAndReopens) {
  StepBytes bytes{.fixed = 100, .expert_bytes = 10, .experts = 16, .top_k = 2, .moe_layers = 4, .draft = 50};
  SpeculationGate gate;
  for (int i = 0; i < SpeculationGate::kWarmup; ++i) gate.RecordVerify(1, bytes.draft + bytes.Step(6), bytes);
  EXPECT_FALSE(gate.open());
  for (int i = 0; i < SpeculationGate::kOffSteps; ++i) gate.RecordPlainStep();
  EXPECT_TRUE(gate.open());
  for (int i = 0; i < SpeculationGate::kWarmup; ++i) gate.RecordVerify(5, bytes.draft + bytes.Step(6), bytes);
  EXPECT_TRUE(gate.open());
}

}  // namespace
}  // namespace deepinfer
