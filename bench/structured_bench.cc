// Structured-output costs on the real 129,280-token DeepSeek-V4.1 vocabulary
// (data/tokenizer/tokenizer.json): building the vocabulary trie, compiling five schemas (flat,
// nested, a long enum, a pattern, a recursive one), filling every mask-cache entry, and the mask
// cost per generated token (FillNextTokenMask + Accept along a fixed token sequence through a
// document), warm (the cache filled by an earlier request) and cold (the first request after
// compiling), and what applying the mask adds to sampling 129,280 logits (Sample with the mask
// minus Sample without). With --decode-model DIR (a real-dims slice:
// `deepinfer make-model --preset v41-flash-slice --layers 4 --experts 16 --out DIR`) the same run
// times a batch-1 decode step of that model and ends with the ratio per schema:
// (mask per token + masking in the sampler) / decode step.
//
//   build/bench/structured_bench [--decode-model DIR] [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "backend/cpu_backend.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/cpu/cpu_context.h"
#include "model/model.h"
#include "structured/constraint.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

const std::shared_ptr<const TokenVocabulary>& Vocabulary() {
  static const std::shared_ptr<const TokenVocabulary> vocabulary = TokenVocabulary::FromTokenizer(
      Tokenizer::FromFile(std::string(DEEPINFER_SOURCE_DIR) + "/data/tokenizer/tokenizer.json"));
  return vocabulary;
}

std::string LongEnum() {
  std::string values;
  std::mt19937 rng(1);
  for (int i = 0; i < 500; ++i) {
    std::string word;
    for (int k = 0, n = 4 + static_cast<int>(rng() % 8); k < n; ++k) word += static_cast<char>('a' + rng() % 26);
    values += (i ? ", \"" : "\"") + word + " " + std::to_string(i) + "\"";
  }
  return R"({"type": "object", "properties": {"country": {"enum": [)" + values +
         R"(]}, "code": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["country", "code"],
            "additionalProperties": false})";
}

const std::map<std::string, std::string>& Schemas() {
  static const std::map<std::string, std::string> schemas = {
      {"1_flat", R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
          "email": {"type": "string"}, "active": {"type": "boolean"}, "score": {"type": "number"}},
          "required": ["name", "age", "email", "active", "score"], "additionalProperties": false})"},
      {"2_nested", R"({"type": "object", "properties": {
          "order": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
            "items": {"type": "array", "items": {"type": "object", "properties": {
              "sku": {"type": "string", "maxLength": 16}, "qty": {"type": "integer", "minimum": 1, "maximum": 100},
              "price": {"type": "number", "exclusiveMinimum": 0}}, "required": ["sku", "qty", "price"],
              "additionalProperties": false}, "minItems": 1, "maxItems": 5},
            "customer": {"type": "object", "properties": {"name": {"type": "string"},
              "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"], "additionalProperties": false}}, "required": ["name", "address"],
              "additionalProperties": false}},
            "required": ["id", "items", "customer"], "additionalProperties": false},
          "note": {"type": ["string", "null"]}}, "required": ["order"], "additionalProperties": false})"},
      {"3_long_enum", LongEnum()},
      {"4_pattern", R"({"type": "object", "properties": {
          "phone": {"type": "string", "pattern": "^\\+?[0-9]{1,3}[ -][0-9]{3}[ -][0-9]{4}$"},
          "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
          "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"}},
          "required": ["phone", "sku", "when", "id"], "additionalProperties": false})"},
      {"5_recursive", R"({"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
          "required": ["name", "children"], "additionalProperties": false}}, "$ref": "#/$defs/node"})"},
  };
  return schemas;
}

// A fixed token sequence through a document of the schema: sampled from the masks with a bias
// towards tokens that close strings and structures, at most 300 tokens.
std::vector<int32_t> TokenPath(const std::shared_ptr<const Constraint>& constraint) {
  const TokenVocabulary& v = constraint->vocabulary();
  ConstraintMatcher m(constraint, {1});
  std::vector<uint64_t> mask(v.words());
  std::mt19937 rng(7);
  std::vector<int32_t> path;
  while (path.size() < 300 && m.FillNextTokenMask(mask)) {
    std::vector<int32_t> allowed, closing;
    for (size_t t = 0; t < v.size(); ++t) {
      if (!((mask[t >> 6] >> (t & 63)) & 1)) continue;
      allowed.push_back(static_cast<int32_t>(t));
      if (t == 1 || v.bytes(static_cast<int32_t>(t)).find_first_of("\"}]") != std::string_view::npos) {
        closing.push_back(static_cast<int32_t>(t));
      }
    }
    const std::vector<int32_t>& pool = !closing.empty() && rng() % 3 == 0 ? closing : allowed;
    const int32_t token = pool[rng() % pool.size()];
    path.push_back(token);
    m.Accept(token);
    if (m.finished()) break;
  }
  return path;
}

void BM_VocabularyTrie(benchmark::State& state) {
  const Tokenizer tokenizer = Tokenizer::FromFile(std::string(DEEPINFER_SOURCE_DIR) + "/data/tokenizer/tokenizer.json");
  for (auto _ : state) benchmark::DoNotOptimize(TokenVocabulary::FromTokenizer(tokenizer));
  state.counters["nodes"] = static_cast<double>(Vocabulary()->nodes().size());
}
BENCHMARK(BM_VocabularyTrie)->Unit(benchmark::kMillisecond);

void BM_Compile(benchmark::State& state, const std::string& name) {
  const auto schema = nlohmann::ordered_json::parse(Schemas().at(name));
  Vocabulary();
  size_t states = 0;
  for (auto _ : state) {
    auto constraint = std::make_shared<Constraint>(CompileJsonSchema(schema), Vocabulary());
    states = constraint->grammar().num_states();
    benchmark::DoNotOptimize(constraint);
  }
  state.counters["states"] = static_cast<double>(states);
}

void BM_CompileAndFillCache(benchmark::State& state, const std::string& name) {
  const auto schema = nlohmann::ordered_json::parse(Schemas().at(name));
  Vocabulary();
  Constraint::CacheStats stats;
  for (auto _ : state) {
    auto constraint = std::make_shared<Constraint>(CompileJsonSchema(schema), Vocabulary());
    constraint->PrecomputeMasks();
    stats = constraint->cache_stats();
  }
  state.counters["cached_states"] = static_cast<double>(stats.cached);
  state.counters["cache_MB"] = static_cast<double>(stats.bytes) / 1e6;
}

// Per generated token: the mask, then the matcher's advance.
void MaskPath(benchmark::State& state, const std::string& name, bool warm) {
  const auto schema = nlohmann::ordered_json::parse(Schemas().at(name));
  const auto grammar = CompileJsonSchema(schema);
  auto constraint = std::make_shared<Constraint>(grammar, Vocabulary());
  const std::vector<int32_t> path = TokenPath(constraint);
  std::vector<uint64_t> mask(Vocabulary()->words());
  for (auto _ : state) {
    if (!warm) {
      state.PauseTiming();
      constraint = std::make_shared<Constraint>(grammar, Vocabulary());
      state.ResumeTiming();
    }
    ConstraintMatcher m(constraint, {1});
    for (int32_t token : path) {
      m.FillNextTokenMask(mask);
      benchmark::DoNotOptimize(mask.data());
      m.Accept(token);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(path.size()));
  state.counters["tokens"] = static_cast<double>(path.size());
}

void BM_MaskWarm(benchmark::State& state, const std::string& name) { MaskPath(state, name, true); }
void BM_MaskCold(benchmark::State& state, const std::string& name) { MaskPath(state, name, false); }

// Sampling at temperature 1 from fixed random logits, with the mask of a document's first
// string position (most tokens allowed: the costliest case for the mask loop) or without.
void BM_Sample(benchmark::State& state, bool masked) {
  const TokenVocabulary& v = *Vocabulary();
  std::vector<float> logits(v.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : logits) x = normal(rng);
  std::vector<uint64_t> mask(v.words(), ~uint64_t{0});
  if (masked) {
    auto constraint = std::make_shared<Constraint>(
        CompileJsonSchema(nlohmann::ordered_json::parse(R"({"type": "string"})")), Vocabulary());
    ConstraintMatcher m(constraint, {1});
    int32_t quote = 0;
    while (static_cast<size_t>(quote) < v.size() && v.bytes(quote) != "\"") ++quote;
    m.Accept(quote);  // inside the string
    m.FillNextTokenMask(mask);
  }
  SamplingParams params;
  params.temperature = 1.0f;
  Rng sampler(5);
  for (auto _ : state) {
    benchmark::DoNotOptimize(Sample(logits, params, TokenHistory{}, sampler, masked ? TokenMask(mask) : TokenMask()));
  }
}

// One batch-1 decode step of `model` (8-token prompt, 3 untimed steps, then one greedy token per
// iteration).
void BM_DecodeStep(benchmark::State& state, const Model& model) {
  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  CpuBackend backend(pool, ChooseIsa(std::nullopt));
  const ComputeContext ctx{backend};
  const int64_t vocab = model.config().vocab_size;
  SequenceState sequence = model.NewSequence();
  std::vector<int32_t> tokens = {0, 17, 42, 99, 7, 1000 % static_cast<int32_t>(vocab), 5, 6};
  ForwardItem item{&sequence, tokens};
  std::vector<float> logits = model.Forward(std::span<const ForwardItem>(&item, 1), ctx);
  int32_t next = 0;
  auto step = [&] {
    next = static_cast<int32_t>(std::max_element(logits.end() - vocab, logits.end()) - (logits.end() - vocab));
    item = ForwardItem{&sequence, std::span<const int32_t>(&next, 1)};
    logits = model.Forward(std::span<const ForwardItem>(&item, 1), ctx);
  };
  for (int warmup = 0; warmup < 3; ++warmup) step();  // pages the weights in
  for (auto _ : state) step();
}

// Prints the console table and keeps the times the summary needs (seconds per iteration).
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.iterations == 0) continue;
      double seconds = run.real_accumulated_time / static_cast<double>(run.iterations);
      if (const auto it = run.counters.find("tokens"); it != run.counters.end()) seconds /= it->second.value;
      seconds_[run.benchmark_name()] = seconds;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  double Seconds(const std::string& name) const {
    const auto it = seconds_.find(name);
    return it == seconds_.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> seconds_;
};

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  using namespace deepinfer;
  // --decode-model DIR is ours; everything else goes to Google Benchmark.
  std::string decode_model;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--decode-model") == 0 && i + 1 < argc) {
      decode_model = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  for (const auto& [name, schema] : Schemas()) {
    benchmark::RegisterBenchmark(("BM_Compile/" + name).c_str(), BM_Compile, name)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_CompileAndFillCache/" + name).c_str(), BM_CompileAndFillCache, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_MaskWarm/" + name).c_str(), BM_MaskWarm, name)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_MaskCold/" + name).c_str(), BM_MaskCold, name)->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_Sample/unmasked", BM_Sample, false)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_Sample/masked", BM_Sample, true)->Unit(benchmark::kMicrosecond);
  std::unique_ptr<Model> model;
  if (!decode_model.empty()) {
    model = Model::Load(decode_model);
    benchmark::RegisterBenchmark("BM_DecodeStep/batch1", BM_DecodeStep, std::cref(*model))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const double masking = std::max(0.0, reporter.Seconds("BM_Sample/masked") - reporter.Seconds("BM_Sample/unmasked"));
  const double step = reporter.Seconds("BM_DecodeStep/batch1/real_time");
  std::printf("\nper generated token: mask + advance (warm / cold), + %.1f us applying the mask in the sampler\n",
              masking * 1e6);
  if (step > 0) std::printf("batch-1 decode step of %s: %.1f ms\n", decode_model.c_str(), step * 1e3);
  for (const auto& [name, schema] : Schemas()) {
    const double warm = reporter.Seconds("BM_MaskWarm/" + name), cold = reporter.Seconds("BM_MaskCold/" + name);
    if (warm == 0 && cold == 0) continue;
    std::printf("  %-12s compile %8.2f ms   mask %7.1f / %7.1f us", name.c_str(),
                reporter.Seconds("BM_Compile/" + name) * 1e3, warm * 1e6, cold * 1e6);
    if (step > 0) std::printf("   ratio %.3f%% / %.3f%%", 100 * (warm + masking) / step, 100 * (cold + masking) / step);
    std::printf("\n");
  }
  benchmark::Shutdown();
  return 0;
}
