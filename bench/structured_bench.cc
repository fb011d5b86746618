// Structured-output costs on the real 129,280-token DeepSeek-V4.1 vocabulary
// (data/tokenizer/tokenizer.json): building the vocabulary trie, compiling five schemas (flat,
// nested, a long enum, a pattern, a recursive one), filling every mask-cache entry, and the mask
// cost per generated token (FillNextTokenMask + Accept along a fixed token sequence through a
// document), warm (the cache filled by an earlier request) and cold (the first request after
// compiling). Compare the per-token numbers with a batch-1 decode step (deepinfer bench).
//
//   build/bench/structured_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <map>
#include <random>

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

const bool kRegistered = [] {
  for (const auto& [name, schema] : Schemas()) {
    benchmark::RegisterBenchmark(("BM_Compile/" + name).c_str(), BM_Compile, name)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_CompileAndFillCache/" + name).c_str(), BM_CompileAndFillCache, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_MaskWarm/" + name).c_str(), BM_MaskWarm, name)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_MaskCold/" + name).c_str(), BM_MaskCold, name)->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace deepinfer

BENCHMARK_MAIN();
