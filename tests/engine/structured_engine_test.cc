// Structured output through the engine on the tiny V4.1 model (512 ids, the project tokenizer):
// constrained requests sampled at temperature 1 always end in valid documents, also as n
// choices sharing one constraint, under preemption and beside other requests; requests without
// a constraint are unchanged; logprobs follow the documented semantics; dead ends and bad
// combinations are errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "backend/cpu_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

struct Result {
  std::vector<int32_t> tokens;
  std::vector<std::optional<float>> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::string text;
  std::vector<float> logits;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  bool operator==(const Result& o) const {
    if (tokens != o.tokens || logprobs != o.logprobs || text != o.text || finish != o.finish) return false;
    for (size_t i = 0; i < top.size(); ++i) {
      for (size_t k = 0; k < top[i].size(); ++k) {
        if (top[i][k].token != o.top[i][k].token || top[i][k].logprob != o.top[i][k].logprob) return false;
      }
    }
    return top.size() == o.top.size();
  }
};

class StructuredEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(DEEPINFER_TEST_DATA_DIR) + "/models/tiny-a";
    model_ = Model::Load(dir).release();
    tokenizer_ = new Tokenizer(Tokenizer::FromFile(dir + "/tokenizer.json"));
    vocabulary_ = new std::shared_ptr<const TokenVocabulary>(TokenVocabulary::FromTokenizer(*tokenizer_));
    threads_ = new ThreadPool(1);  // results do not depend on it; one thread does not spin on a busy machine
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    delete vocabulary_;
    delete threads_;
  }

  static std::shared_ptr<const Constraint> Schema(const std::string& text) {
    return std::make_shared<Constraint>(CompileJsonSchema(nlohmann::ordered_json::parse(text)), *vocabulary_,
                                        ConstraintOptions{"", "test schema"});
  }
  static RequestParams Request(uint64_t seed, std::shared_ptr<const Constraint> constraint) {
    RequestParams p;
    p.prompt = {0, 17, 42, static_cast<int32_t>(100 + seed % 50), 7};
    p.sampling.temperature = 1.0f;
    p.seed = seed;
    p.stop.max_tokens = 600;
    p.constraint = std::move(constraint);
    return p;
  }

  std::vector<Result> Run(const std::vector<RequestParams>& requests, EngineOptions options = {}) const {
    CpuBackend backend(*threads_, DetectIsa());
    Engine engine(*model_, ComputeContext{backend}, options, tokenizer_);
    std::map<RequestId, size_t> index;
    for (size_t i = 0; i < requests.size(); ++i) index[engine.Add(requests[i])] = i;
    std::vector<Result> results(requests.size());
    while (!engine.idle()) {
      for (const RequestUpdate& u : engine.Step()) {
        Result& r = results[index.at(u.id)];
        for (const GeneratedToken& t : u.tokens) {
          r.tokens.push_back(t.token);
          r.logprobs.push_back(t.logprob);
          r.top.push_back(t.top_logprobs);
        }
        r.text += u.text;
        r.logits.insert(r.logits.end(), u.logits.begin(), u.logits.end());
        if (u.finished()) r.finish = u.finish, r.error = u.error;
      }
    }
    last_stats_ = engine.stats();
    return results;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static std::shared_ptr<const TokenVocabulary>* vocabulary_;
  static ThreadPool* threads_;
  mutable EngineStats last_stats_;
};

Model* StructuredEngineTest::model_ = nullptr;
Tokenizer* StructuredEngineTest::tokenizer_ = nullptr;
std::shared_ptr<const TokenVocabulary>* StructuredEngineTest::vocabulary_ = nullptr;
ThreadPool* StructuredEngineTest::threads_ = nullptr;

const char* kSchema = R"({"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 999},
    "tag": {"enum": ["red", "green", "blue"]},
    "name": {"type": "string", "maxLength": 6},
    "ok": {"type": "boolean"}},
  "required": ["id", "tag", "name"], "additionalProperties": false})";

TEST_F(StructuredEngineTest, ChoicesAreValidAndUnconstrainedRequestsUnchanged) {
  const auto constraint = Schema(kSchema);
  std::vector<RequestParams> constrained, plain, mixed;
  for (uint64_t seed = 1; seed <= 6; ++seed) constrained.push_back(Request(seed, constraint));
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    RequestParams p = Request(seed, nullptr);
    p.stop.max_tokens = 12;
    p.sampling.logprobs = 2;
    plain.push_back(p);
  }
  mixed = plain;
  mixed.insert(mixed.end(), constrained.begin(), constrained.end());
  const std::vector<Result> alone_plain = Run(plain);
  const std::vector<Result> together = Run(mixed);
  std::set<std::string> distinct;
  for (size_t i = 0; i < constrained.size(); ++i) {
    const Result& r = together[plain.size() + i];
    EXPECT_EQ(r.finish, FinishReason::kStopToken) << r.error << " after \"" << r.text << "\"";
    EXPECT_TRUE(constraint->grammar().Accepts(r.text)) << r.text;
    EXPECT_EQ(r.tokens.back(), model_->config().eos_token_id);
    distinct.insert(r.text);
  }
  EXPECT_GE(distinct.size(), 5u) << "the choices should differ";
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(together[i] == alone_plain[i]) << "unconstrained request " << i << " changed";
  }
  // Each constrained choice is what it is alone (its own matcher, its own Rng).
  const std::vector<Result> alone = Run({constrained[3]});
  EXPECT_TRUE(alone[0] == together[plain.size() + 3]);
}

TEST_F(StructuredEngineTest, PreemptionKeepsTheMatcherInStep) {
  const auto constraint = Schema(kSchema);
  std::vector<RequestParams> requests;
  for (uint64_t seed = 20; seed < 24; ++seed) {
    RequestParams p = Request(seed, constraint);
    p.prompt.resize(70, 9);
    requests.push_back(p);
  }
  std::vector<Result> alone;
  for (const RequestParams& p : requests) alone.push_back(Run({p})[0]);
  const CacheLayout layout = CacheLayout::For(model_->config(), 16);
  const uint64_t per_sequence = 7 * (layout.window_page_bytes + layout.compressed_page_bytes) + layout.state_page_bytes;
  const std::vector<Result> tight =
      Run(requests, EngineOptions{.max_step_tokens = 64, .max_running = 4, .kv_cache_memory = per_sequence});
  EXPECT_GT(last_stats_.preemptions, 0u);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(tight[i] == alone[i]) << "request " << i;
    EXPECT_TRUE(constraint->grammar().Accepts(tight[i].text)) << tight[i].text;
  }
}

TEST_F(StructuredEngineTest, LogprobsAreTheRenormalisedModelDistribution) {
  const auto constraint = Schema(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 3})");
  RequestParams p = Request(5, constraint);
  p.sampling.logprobs = 4;
  p.return_logits = true;
  const Result r = Run({p})[0];
  ASSERT_EQ(r.finish, FinishReason::kStopToken) << r.error;
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  ConstraintMatcher shadow(constraint, {model_->config().eos_token_id});
  std::vector<uint64_t> mask(constraint->vocabulary().words());
  for (size_t k = 0; k < r.tokens.size(); ++k) {
    // The row that token k was sampled from: the last prompt position, then each fed-back token.
    const float* row = r.logits.data() + (p.prompt.size() - 1 + k) * vocab;
    shadow.FillNextTokenMask(mask);
    const auto allowed = [&](size_t t) { return (mask[t >> 6] >> (t & 63)) & 1; };
    double max = -INFINITY, sum = 0;
    size_t count = 0;
    for (size_t t = 0; t < vocab; ++t) {
      if (allowed(t)) max = std::max(max, static_cast<double>(row[t])), ++count;
    }
    for (size_t t = 0; t < vocab; ++t) {
      if (allowed(t)) sum += std::exp(row[t] - max);
    }
    const double log_z = max + std::log(sum);
    ASSERT_TRUE(allowed(r.tokens[k]));
    EXPECT_NEAR(*r.logprobs[k], row[r.tokens[k]] - log_z, 1e-5) << "token " << k;
    EXPECT_EQ(r.top[k].size(), std::min<size_t>(4, count));
    for (const TokenLogprob& t : r.top[k]) {
      EXPECT_TRUE(allowed(t.token)) << "a forbidden token among the top logprobs";
      EXPECT_NEAR(t.logprob, row[t.token] - log_z, 1e-5);
    }
    ASSERT_TRUE(shadow.Accept(r.tokens[k]));
  }
}

TEST_F(StructuredEngineTest, GreedyAndStopStrings) {
  const auto constraint = Schema(kSchema);
  RequestParams greedy = Request(1, constraint);
  greedy.sampling.temperature = 0.0f;
  const Result g = Run({greedy})[0];
  EXPECT_EQ(g.finish, FinishReason::kStopToken) << g.error;
  EXPECT_TRUE(constraint->grammar().Accepts(g.text)) << g.text;
  // A stop string still stops: the text is then a prefix of a valid document.
  RequestParams stopped = Request(2, constraint);
  stopped.stop.stop = {":"};
  const Result s = Run({stopped})[0];
  EXPECT_EQ(s.finish, FinishReason::kStopString);
  StackArena arena;
  StackMachine machine(constraint->grammar(), arena);
  MatchState state;
  machine.Initial(state);
  EXPECT_TRUE(machine.Feed(state, s.text)) << s.text;
}

TEST_F(StructuredEngineTest, DeadEndsAndBadCombinationsAreErrors) {
  RequestParams bad = Request(1, Schema(kSchema));
  bad.stop.ignore_eos = true;
  CpuBackend backend(*threads_, DetectIsa());
  Engine engine(*model_, ComputeContext{backend}, EngineOptions{}, tokenizer_);
  try {
    engine.Add(bad);
    FAIL() << "ignore_eos with a constraint was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ignore_eos cannot be combined with structured output"));
  }
  // A vocabulary that spells "a" (id 68) but nothing else: after "a" the grammar "ab" is stuck.
  std::vector<std::string> bytes(512);
  std::vector<bool> text(512, false);
  bytes[68] = "a";
  text[68] = true;
  GrammarBuilder b;
  const auto grammar = b.Build(b.MakeRule("ab", b.Literal("ab")));
  RequestParams stuck = Request(
      1, std::make_shared<Constraint>(grammar, TokenVocabulary::FromTokens(bytes, text), ConstraintOptions{"", "ab"}));
  const Result r = Run({stuck})[0];
  EXPECT_EQ(r.finish, FinishReason::kError);
  EXPECT_EQ(r.tokens, std::vector<int32_t>{68});
  EXPECT_THAT(r.error, HasSubstr("structured output (ab): no token of the model's 512-token vocabulary can continue "
                                 "the output after 1 tokens; the constraint expects one of 'b'"));
}

}  // namespace
}  // namespace deepinfer
