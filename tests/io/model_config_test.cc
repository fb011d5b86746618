#include "io/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

// Mirrors the released repository: config.json (HF form) and inference/config.json (flat form).
const std::string kFlashDir = std::string(DEEPINFER_TEST_DATA_DIR) + "/io/configs/dsv41_flash";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Json HfJson() { return Json::parse(ReadText(kFlashDir + "/config.json")); }
Json FlatJson() { return Json::parse(ReadText(kFlashDir + "/inference/config.json")); }
ModelConfig Parse(const Json& json) { return ParseModelConfig(json.dump(), "config.json"); }

// The message of the Error that parsing `json` throws; fails the test if it parses.
std::string ParseError(const Json& json) {
  try {
    Parse(json);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "config parsed without error";
  return "";
}

// A scratch directory, removed when the test ends.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : path_(fs::path(::testing::TempDir()) / ("model_config_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
#define EXPECT_SAME(field) EXPECT_EQ(a.field, b.field) << #field
  EXPECT_SAME(vocab_size);
  EXPECT_SAME(hidden_size);
  EXPECT_SAME(moe_intermediate_size);
  EXPECT_SAME(num_layers);
  EXPECT_SAME(num_mtp_layers);
  EXPECT_SAME(num_heads);
  EXPECT_SAME(head_dim);
  EXPECT_SAME(rope_head_dim);
  EXPECT_SAME(q_lora_rank);
  EXPECT_SAME(o_groups);
  EXPECT_SAME(o_lora_rank);
  EXPECT_SAME(norm_eps);
  EXPECT_SAME(window_size);
  EXPECT_SAME(max_position_embeddings);
  EXPECT_SAME(rope_theta);
  EXPECT_SAME(compress_rope_theta);
  EXPECT_SAME(rope_factor);
  EXPECT_SAME(original_seq_len);
  EXPECT_SAME(beta_fast);
  EXPECT_SAME(beta_slow);
  EXPECT_SAME(n_routed_experts);
  EXPECT_SAME(n_shared_experts);
  EXPECT_SAME(num_experts_per_tok);
  EXPECT_SAME(scoring_func);
  EXPECT_SAME(norm_topk_prob);
  EXPECT_SAME(routed_scaling_factor);
  EXPECT_SAME(gate_temp);
  EXPECT_SAME(swiglu_limit);
  EXPECT_SAME(compress_ratios);
  EXPECT_SAME(kv_source_layers);
  EXPECT_SAME(index_source_layers);
  EXPECT_SAME(index_n_heads);
  EXPECT_SAME(index_head_dim);
  EXPECT_SAME(index_topk);
  EXPECT_SAME(candidate_source_layer);
  EXPECT_SAME(candidate_topk_blocks);
  EXPECT_SAME(candidate_block_size);
  EXPECT_SAME(hc_mult);
  EXPECT_SAME(hc_sinkhorn_iters);
  EXPECT_SAME(hc_eps);
  EXPECT_SAME(engram_layer_ids);
  EXPECT_SAME(engram_num_embeddings);
  EXPECT_SAME(engram_max_ngram_size);
  EXPECT_SAME(engram_vocab_size);
  EXPECT_SAME(engram_n_heads);
  EXPECT_SAME(engram_head_dim);
  EXPECT_SAME(engram_pad_id);
  EXPECT_SAME(engram_compressed_vocab_size);
  EXPECT_SAME(dspark_block_size);
  EXPECT_SAME(dspark_noise_token_id);
  EXPECT_SAME(dspark_target_layer_ids);
  EXPECT_SAME(dspark_markov_rank);
  EXPECT_SAME(dspark_n_routed_experts);
  EXPECT_SAME(dspark_n_activated_experts);
  EXPECT_SAME(weight_dtype);
  EXPECT_SAME(expert_dtype);
  EXPECT_SAME(weight_block_size);
  EXPECT_SAME(scale_fmt);
  EXPECT_SAME(bos_token_id);
  EXPECT_SAME(eos_token_id);
  EXPECT_SAME(roles.size());
#undef EXPECT_SAME
  for (size_t i = 0; i < std::min(a.roles.size(), b.roles.size()); ++i) {
    const LayerRole& x = a.roles[i];
    const LayerRole& y = b.roles[i];
    EXPECT_EQ(x.compress_ratio, y.compress_ratio) << "layer " << i;
    EXPECT_EQ(x.kv_source, y.kv_source) << "layer " << i;
    EXPECT_EQ(x.index_source, y.index_source) << "layer " << i;
    EXPECT_EQ(x.candidate_source, y.candidate_source) << "layer " << i;
    EXPECT_EQ(x.uses_candidates, y.uses_candidates) << "layer " << i;
    EXPECT_EQ(x.kv_source_layer, y.kv_source_layer) << "layer " << i;
    EXPECT_EQ(x.index_source_layer, y.index_source_layer) << "layer " << i;
    EXPECT_EQ(x.engram_index, y.engram_index) << "layer " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// The released V4.1-Flash config, both forms.

TEST(ModelConfigTest, ReleasedHfConfigHasTheSpecValues) {
  const ModelConfig c = Parse(HfJson());
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.moe_intermediate_size, 2304);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.num_mtp_layers, 3);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.index_rope_dim(), 64);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.norm_eps, 1e-20);
  EXPECT_EQ(c.window_size, 128);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_EQ(c.rope_factor, 16.0);
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_EQ(c.beta_fast, 32.0);
  EXPECT_EQ(c.beta_slow, 1.0);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.gate_temp, 1.0);  // absent from both files: the reference default
  EXPECT_EQ(c.swiglu_limit, 10.0);
  ASSERT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.kv_source_layers, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_source_layers, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.candidate_source_layer, 20);
  EXPECT_EQ(c.candidate_topk_blocks, 2048);
  EXPECT_EQ(c.candidate_block_size, 8);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.engram_max_ngram_size, 4);
  EXPECT_EQ(c.engram_vocab_size, 16000000);
  EXPECT_EQ(c.engram_n_heads, 8);
  EXPECT_EQ(c.engram_head_dim, 256);
  EXPECT_EQ(c.engram_pad_id, 2);
  EXPECT_EQ(c.engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c.dspark_block_size, 5);
  EXPECT_EQ(c.dspark_noise_token_id, 128799);
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{37, 38, 39}));
  EXPECT_EQ(c.dspark_markov_rank, 256);
  EXPECT_EQ(c.dspark_n_routed_experts, 128);
  EXPECT_EQ(c.dspark_n_activated_experts, 3);
  EXPECT_EQ(c.weight_dtype, "fp8");
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.weight_block_size, 32);
  EXPECT_EQ(c.scale_fmt, "ue8m0");
  EXPECT_EQ(c.linear_format(), WeightFormat::kFP8Block);
  EXPECT_EQ(c.expert_format(), WeightFormat::kFP4Row);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.source, "config.json");
}

TEST(ModelConfigTest, HfAndFlatReleasedConfigsParseToIdenticalFields) {
  const ModelConfig hf = Parse(HfJson());
  const ModelConfig flat = Parse(FlatJson());
  ExpectSameConfig(hf, flat);
}

// Spec section 1.2, row by row.
TEST(ModelConfigTest, ReleasedRoleTableMatchesSpec) {
  struct Row {
    int first, last;  // layers, inclusive
    int ratio;
    bool kv_source, index_source, candidate_source, uses_candidates;
    int kv_source_layer, index_source_layer;
    int engram_index;
  };
  const Row rows[] = {
      {0, 0, 0, false, false, false, false, -1, -1, -1},    // SWA only
      {1, 1, 0, false, false, false, false, -1, -1, 0},     // SWA only + Engram
      {2, 2, 2, true, true, false, false, 2, 2, -1},        // Full
      {3, 7, 2, false, false, false, false, 2, 2, -1},      // Reuse
      {8, 8, 2, true, true, false, false, 8, 8, -1},        // Full
      {9, 13, 2, false, false, false, false, 8, 8, -1},     // Reuse
      {14, 14, 2, true, true, false, false, 14, 14, 1},     // Full + Engram
      {15, 19, 2, false, false, false, false, 14, 14, -1},  // Reuse
      {20, 20, 1, true, true, true, false, 20, 20, -1},     // Full + candidate source
      {21, 23, 1, false, false, false, false, 20, 20, -1},  // Reuse
      {24, 24, 1, false, true, false, true, 20, 24, -1},    // Reindex (uses candidates)
      {25, 27, 1, false, false, false, false, 20, 24, -1},  // Reuse
      {28, 28, 1, false, true, false, true, 20, 28, -1},    // Reindex (uses candidates)
      {29, 31, 1, false, false, false, false, 20, 28, -1},  // Reuse
      {32, 32, 1, false, true, false, true, 20, 32, -1},    // Reindex (uses candidates)
      {33, 35, 1, false, false, false, false, 20, 32, -1},  // Reuse
      {36, 36, 1, false, true, false, true, 20, 36, -1},    // Reindex (uses candidates)
      {37, 39, 1, false, false, false, false, 20, 36, -1},  // Reuse, feeding DSpark
  };
  for (const Json& json : {HfJson(), FlatJson()}) {
    const ModelConfig c = Parse(json);
    ASSERT_EQ(c.roles.size(), 40u);
    int covered = 0;
    for (const Row& row : rows) {
      for (int layer = row.first; layer <= row.last; ++layer, ++covered) {
        const LayerRole& role = c.roles[static_cast<size_t>(layer)];
        EXPECT_EQ(role.compress_ratio, row.ratio) << "layer " << layer;
        EXPECT_EQ(role.kv_source, row.kv_source) << "layer " << layer;
        EXPECT_EQ(role.index_source, row.index_source) << "layer " << layer;
        EXPECT_EQ(role.candidate_source, row.candidate_source) << "layer " << layer;
        EXPECT_EQ(role.uses_candidates, row.uses_candidates) << "layer " << layer;
        EXPECT_EQ(role.kv_source_layer, row.kv_source_layer) << "layer " << layer;
        EXPECT_EQ(role.index_source_layer, row.index_source_layer) << "layer " << layer;
        EXPECT_EQ(role.engram_index, row.engram_index) << "layer " << layer;
      }
    }
    EXPECT_EQ(covered, 40);
    // The three DSpark stages (40..42) run ratio-0 attention.
    EXPECT_EQ(c.compress_ratios[40], 0);
    EXPECT_EQ(c.compress_ratios[41], 0);
    EXPECT_EQ(c.compress_ratios[42], 0);
  }
}

// ---------------------------------------------------------------------------------------------
// LoadModelConfig.

TEST(ModelConfigTest, LoadPrefersTopLevelConfigJson) {
  const ModelConfig c = LoadModelConfig(kFlashDir);
  EXPECT_EQ(c.source, kFlashDir + "/config.json");
  EXPECT_EQ(c.num_layers, 40);
}

TEST(ModelConfigTest, LoadFallsBackToInferenceConfigJson) {
  ScratchDir dir("fallback");
  fs::create_directories(dir.path() / "inference");
  fs::copy_file(kFlashDir + "/inference/config.json", dir.path() / "inference" / "config.json");
  const ModelConfig c = LoadModelConfig(dir.path().string());
  EXPECT_EQ(c.source, (dir.path() / "inference" / "config.json").string());
  ExpectSameConfig(c, Parse(HfJson()));
}

TEST(ModelConfigTest, LoadWithoutAnyConfigNamesBothPaths) {
  ScratchDir dir("empty");
  try {
    LoadModelConfig(dir.path().string());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr((dir.path() / "config.json").string()),
                                HasSubstr((dir.path() / "inference" / "config.json").string())));
  }
}

TEST(ModelConfigTest, LoadErrorsNameTheFile) {
  ScratchDir dir("bad_file");
  std::ofstream(dir.path() / "config.json") << "{\"text_config\": {\"hidden_size\": \"5120\"}";
  try {
    LoadModelConfig(dir.path().string());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(StartsWith((dir.path() / "config.json").string() + ": not valid JSON")));
  }
}

// ---------------------------------------------------------------------------------------------
// Defaults and accepted variants.

Json MinimalFlat() {
  return Json{{"vocab_size", 1000},
              {"dim", 64},
              {"moe_inter_dim", 32},
              {"n_layers", 2},
              {"n_heads", 4},
              {"head_dim", 32},
              {"rope_head_dim", 8},
              {"q_lora_rank", 16},
              {"o_groups", 2},
              {"o_lora_rank", 16},
              {"n_routed_experts", 8},
              {"n_activated_experts", 2},
              {"compress_ratios", {0, 0}}};
}

TEST(ModelConfigTest, FlatFormTakesReferenceDefaults) {
  const ModelConfig c = Parse(MinimalFlat());
  EXPECT_EQ(c.norm_eps, 1e-20);
  EXPECT_EQ(c.num_mtp_layers, 0);  // n_mtp_layers defaults to 1, but DSpark is off
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.gate_temp, 1.0);
  EXPECT_EQ(c.swiglu_limit, 0.0);
  EXPECT_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c.window_size, 128);
  EXPECT_EQ(c.candidate_source_layer, -1);
  EXPECT_TRUE(c.engram_layer_ids.empty());
  EXPECT_TRUE(c.engram_num_embeddings.empty());
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.original_seq_len, 0);
  EXPECT_EQ(c.max_position_embeddings, 0);
  EXPECT_EQ(c.weight_dtype, "fp8");
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.weight_block_size, 32);
  EXPECT_EQ(c.scale_fmt, "ue8m0");
  ASSERT_EQ(c.roles.size(), 2u);
  EXPECT_EQ(c.roles[1].kv_source_layer, -1);
  EXPECT_EQ(c.roles[1].engram_index, -1);
}

TEST(ModelConfigTest, FlatNullExpertDtypeFollowsDtype) {
  Json json = MinimalFlat();
  json["dtype"] = "bf16";
  json["expert_dtype"] = nullptr;
  const ModelConfig c = Parse(json);
  EXPECT_EQ(c.expert_dtype, "bf16");
  EXPECT_EQ(c.linear_format(), WeightFormat::kBF16);
  EXPECT_EQ(c.expert_format(), WeightFormat::kBF16);
}

TEST(ModelConfigTest, FlatFp8Experts) {
  Json json = MinimalFlat();
  json["expert_dtype"] = "fp8";
  EXPECT_EQ(Parse(json).expert_format(), WeightFormat::kFP8Block);
}

TEST(ModelConfigTest, HfWithoutQuantizationOrEpsIsBf16WithSafeEps) {
  Json json = HfJson();
  json.erase("quantization_config");
  json["text_config"].erase("rms_norm_eps");
  const ModelConfig c = Parse(json);
  EXPECT_EQ(c.weight_dtype, "bf16");
  EXPECT_EQ(c.expert_dtype, "bf16");
  EXPECT_EQ(c.linear_format(), WeightFormat::kBF16);
  EXPECT_EQ(c.norm_eps, 1e-6);  // not the reference's 1e-20
}

TEST(ModelConfigTest, HfIgnoresTopLevelTorchDtype) {
  Json json = HfJson();
  json["dtype"] = "bfloat16";
  json["torch_dtype"] = "bfloat16";
  EXPECT_EQ(Parse(json).weight_dtype, "fp8");
}

TEST(ModelConfigTest, HfTokenIdsFromTextConfigWinAndSingleEosListIsAccepted) {
  Json json = HfJson();
  json["text_config"]["bos_token_id"] = 5;
  json["eos_token_id"] = Json::array({7});
  const ModelConfig c = Parse(json);
  EXPECT_EQ(c.bos_token_id, 5);
  EXPECT_EQ(c.eos_token_id, 7);

  json["eos_token_id"] = Json::array({1, 2});
  EXPECT_THAT(ParseError(json), HasSubstr("eos_token_id: [1,2] lists several ids"));
}

TEST(ModelConfigTest, HfAcceptsFlatRopeParameters) {
  Json json = HfJson();
  Json& text = json["text_config"];
  text.erase("rope_scaling");
  text.erase("rope_theta");
  text["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000}, {"factor", 16},
                             {"beta_fast", 32},     {"beta_slow", 1},      {"original_max_position_embeddings", 65536}};
  ExpectSameConfig(Parse(json), Parse(HfJson()));
}

TEST(ModelConfigTest, HfAcceptsRopeParametersNestedByAttentionType) {
  Json json = HfJson();
  Json& text = json["text_config"];
  text.erase("rope_scaling");
  text.erase("rope_theta");
  text.erase("compress_rope_theta");
  text["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000}}},
                             {"compressed_attention",
                              {{"rope_type", "yarn"},
                               {"rope_theta", 160000},
                               {"factor", 16},
                               {"beta_fast", 32},
                               {"beta_slow", 1},
                               {"original_max_position_embeddings", 65536}}}};
  ExpectSameConfig(Parse(json), Parse(HfJson()));
}

TEST(ModelConfigTest, DSparkZeroExpertCountsFallBackToTheBackbone) {
  Json json = FlatJson();
  json.erase("dspark_n_routed_experts");
  json.erase("dspark_n_activated_experts");
  const ModelConfig c = Parse(json);
  EXPECT_EQ(c.dspark_n_routed_experts, 384);
  EXPECT_EQ(c.dspark_n_activated_experts, 6);
}

TEST(ModelConfigTest, DSparkOffZeroesMtpLayers) {
  Json json = HfJson();
  json["text_config"]["dspark_block_size"] = 0;
  Json& ratios = json["text_config"]["compress_ratios"];
  ratios.erase(ratios.begin() + 40, ratios.end());  // 40 entries suffice without the draft layers
  const ModelConfig c = Parse(json);
  EXPECT_EQ(c.num_mtp_layers, 0);
  EXPECT_EQ(c.compress_ratios.size(), 40u);
}

// ---------------------------------------------------------------------------------------------
// Read errors: bad types, missing fields, malformed files.

TEST(ModelConfigTest, TypeErrorNamesKeyAndExpectedType) {
  Json json = HfJson();
  json["text_config"]["hidden_size"] = "5120";
  EXPECT_EQ(ParseError(json), "config.json: text_config.hidden_size: expected an integer, got string");

  Json flat = FlatJson();
  flat["dim"] = "5120";
  EXPECT_EQ(ParseError(flat), "config.json: dim: expected an integer, got string");
}

TEST(ModelConfigTest, TypeErrorsOfEveryKind) {
  struct Case {
    const char* key;
    Json value;
    const char* expected;
  };
  const Case cases[] = {
      {"num_attention_heads", 64.5, "text_config.num_attention_heads: expected an integer, got number 64.5"},
      {"rms_norm_eps", "1e-20", "text_config.rms_norm_eps: expected a number, got string"},
      {"norm_topk_prob", "true", "text_config.norm_topk_prob: expected a boolean, got string"},
      {"scoring_func", 1, "text_config.scoring_func: expected a string, got number"},
      {"kv_source_layer_ids", "2,8", "text_config.kv_source_layer_ids: expected an array of integers, got string"},
      {"rope_scaling", 16, "text_config.rope_scaling: expected an object, got number"},
      {"num_hidden_layers", 5000000000LL,
       "text_config.num_hidden_layers: 5000000000 exceeds the supported maximum of 1024"},
  };
  for (const Case& c : cases) {
    Json json = HfJson();
    json["text_config"][c.key] = c.value;
    EXPECT_EQ(ParseError(json), std::string("config.json: ") + c.expected) << c.key;
  }
  Json json = HfJson();
  json["text_config"]["compress_ratios"][3] = "2";
  EXPECT_EQ(ParseError(json), "config.json: text_config.compress_ratios[3]: expected an integer, got string");
}

TEST(ModelConfigTest, IntegralFloatIsAcceptedAsInteger) {
  Json json = HfJson();
  json["text_config"]["hidden_size"] = 5120.0;
  EXPECT_EQ(Parse(json).hidden_size, 5120);
}

TEST(ModelConfigTest, MissingRequiredField) {
  Json json = HfJson();
  json["text_config"].erase("num_hidden_layers");
  EXPECT_EQ(ParseError(json), "config.json: text_config.num_hidden_layers: required field is missing");

  Json flat = FlatJson();
  flat.erase("dim");
  EXPECT_EQ(ParseError(flat), "config.json: dim: required field is missing");

  Json quant = HfJson();
  quant["quantization_config"].erase("weight_block_size");
  EXPECT_EQ(ParseError(quant), "config.json: quantization_config.weight_block_size: required field is missing");

  Json yarn = HfJson();
  yarn["text_config"]["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_EQ(ParseError(yarn),
            "config.json: text_config.rope_scaling.original_max_position_embeddings: required field is missing");
}

TEST(ModelConfigTest, FeatureShapesAreRequiredWhenTheFeatureIsOn) {
  Json json = HfJson();
  json["text_config"].erase("index_topk");
  EXPECT_THAT(ParseError(json), HasSubstr("text_config.index_topk: required field is missing (needed when "
                                          "text_config.index_source_layer_ids is not empty)"));
}

TEST(ModelConfigTest, MalformedDocuments) {
  EXPECT_THAT([] { ParseModelConfig("{\"dim\": ", "config.json"); },
              ::testing::ThrowsMessage<Error>(StartsWith("config.json: not valid JSON")));
  EXPECT_THAT([] { ParseModelConfig("[1, 2]", "config.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("expected a JSON object at the top level, got array")));
  Json json = HfJson();
  json["text_config"] = "oops";
  EXPECT_EQ(ParseError(json), "config.json: text_config: expected an object, got string");

  Json folded = HfJson()["text_config"];  // an HF text config without its wrapper
  EXPECT_THAT(ParseError(folded), HasSubstr("has hidden_size but neither text_config nor dim"));

  Json other = HfJson();
  other["model_type"] = "deepseek_v4";
  EXPECT_EQ(ParseError(other), "config.json: model_type: expected \"deepseek_v41\", got \"deepseek_v4\"");
}

// ---------------------------------------------------------------------------------------------
// Validation failures.

TEST(ModelConfigTest, ReuseLayerBeforeAnyKvSource) {
  Json json = HfJson();
  json["text_config"]["compress_ratios"][1] = 2;  // layer 1 compresses, but the first source is layer 2
  EXPECT_EQ(ParseError(json),
            "config.json: 2 problems: (1) layer 1 (compress ratio 2) reads compressed KV but no KV-source layer "
            "precedes it; (2) layer 1 (compress ratio 2) reads top-k indices but no index-source layer precedes it "
            "(a reuse layer before any index source)");

  Json no_source = HfJson();
  no_source["text_config"]["kv_source_layer_ids"] = {8, 14, 20};
  EXPECT_THAT(ParseError(no_source),
              HasSubstr("layer 3 (compress ratio 2) reads compressed KV but no KV-source layer precedes it"));
}

TEST(ModelConfigTest, ReuseLayerRatioDiffersFromItsKvSource) {
  Json json = HfJson();
  json["text_config"]["compress_ratios"][21] = 2;
  EXPECT_EQ(ParseError(json),
            "config.json: layer 21 (compress ratio 2) reads the compressed KV of layer 20, whose compress ratio is 1");
}

TEST(ModelConfigTest, KvSourceNeedsARatioAndAnIndexer) {
  Json ratio = HfJson();
  ratio["text_config"]["kv_source_layer_ids"] = {1, 2, 8, 14, 20};
  EXPECT_THAT(ParseError(ratio),
              HasSubstr("text_config.kv_source_layer_ids: layer 1 has compress ratio 0, so it has no compressed KV"));

  Json indexer = HfJson();
  indexer["text_config"]["index_source_layer_ids"] = {2, 14, 20, 24, 28, 32, 36};
  EXPECT_EQ(ParseError(indexer),
            "config.json: text_config.kv_source_layer_ids: layer 8 is not listed in "
            "text_config.index_source_layer_ids, but a KV source's indexer is what computes the shared index keys");
}

TEST(ModelConfigTest, IndexSourceNeedsARatioAndWideEnoughHeads) {
  Json json = HfJson();
  json["text_config"]["index_source_layer_ids"] = {0, 2, 8, 14, 20, 24, 28, 32, 36};
  EXPECT_EQ(ParseError(json),
            "config.json: text_config.index_source_layer_ids: layer 0 has compress ratio 0, so it has no compressed "
            "positions to index");

  Json narrow = HfJson();
  narrow["text_config"]["index_head_dim"] = 32;
  EXPECT_THAT(ParseError(narrow), HasSubstr("text_config.index_head_dim (32) is smaller than "
                                            "text_config.qk_rope_head_dim (64)"));
}

TEST(ModelConfigTest, CandidateSourceMustBeAnIndexSourceWithBlocks) {
  Json json = HfJson();
  json["text_config"]["candidate_source_layer_id"] = 21;
  EXPECT_EQ(ParseError(json),
            "config.json: text_config.candidate_source_layer_id: layer 21 is not an index source, so it publishes no "
            "candidate blocks");

  Json blocks = HfJson();
  blocks["text_config"]["candidate_block_size"] = 0;
  EXPECT_EQ(ParseError(blocks),
            "config.json: text_config.candidate_block_size: must be positive when "
            "text_config.candidate_source_layer_id is set, got 0");
}

TEST(ModelConfigTest, OutOfRangeLayerIds) {
  Json json = HfJson();
  Json& text = json["text_config"];
  text["kv_source_layer_ids"] = {2, 8, 14, 20, 40};
  text["index_source_layer_ids"] = {-1, 2, 8, 14, 20, 24, 28, 32, 36};
  text["engram_layer_ids"] = {1, 57};
  text["dspark_target_layer_ids"] = {37, 38, 40};
  text["candidate_source_layer_id"] = 45;
  const std::string message = ParseError(json);
  EXPECT_THAT(message, StartsWith("config.json: 5 problems: (1) "));
  EXPECT_THAT(message, HasSubstr("text_config.kv_source_layer_ids: layer 40 is out of range [0, 40)"));
  EXPECT_THAT(message, HasSubstr("text_config.index_source_layer_ids: layer -1 is out of range [0, 40)"));
  EXPECT_THAT(message, HasSubstr("text_config.engram_layer_ids: layer 57 is out of range [0, 40)"));
  EXPECT_THAT(message, HasSubstr("text_config.dspark_target_layer_ids: layer 40 is out of range [0, 40)"));
  EXPECT_THAT(message, HasSubstr("text_config.candidate_source_layer_id: layer 45 is out of range [0, 40)"));
}

TEST(ModelConfigTest, DuplicateLayerIds) {
  Json json = HfJson();
  json["text_config"]["engram_layer_ids"] = {1, 1};
  EXPECT_EQ(ParseError(json), "config.json: text_config.engram_layer_ids: lists layer 1 twice");
}

TEST(ModelConfigTest, CompressRatiosLengthAndSign) {
  Json short_list = HfJson();
  short_list["text_config"]["compress_ratios"].erase(42);
  EXPECT_EQ(ParseError(short_list),
            "config.json: text_config.compress_ratios: has 42 entries, needs at least 43 (40 backbone layers + 3 "
            "DSpark layers)");

  Json negative = HfJson();
  negative["text_config"]["compress_ratios"][41] = -1;
  EXPECT_EQ(ParseError(negative), "config.json: text_config.compress_ratios[41]: must not be negative, got -1");
}

TEST(ModelConfigTest, ShapeChecks) {
  struct Case {
    const char* key;
    int value;
    const char* expected;
  };
  const Case cases[] = {
      {"head_dim", 64,
       "text_config.head_dim (64) must be greater than text_config.qk_rope_head_dim (64): the non-RoPE part of a "
       "head would be empty"},
      {"qk_rope_head_dim", 63, "text_config.qk_rope_head_dim: must be even (RoPE rotates pairs), got 63"},
      {"o_groups", 7, "text_config.num_attention_heads (64) is not divisible by text_config.o_groups (7)"},
      {"hc_mult", 0, "text_config.hc_mult: must be positive, got 0"},
      {"sliding_window", 0, "text_config.sliding_window: must be positive, got 0"},
      {"vocab_size", 0, "text_config.vocab_size: must be positive, got 0"},
      {"num_experts_per_tok", 400, "text_config.num_experts_per_tok (400) exceeds text_config.n_routed_experts (384)"},
      {"n_shared_experts", 2,
       "text_config.n_shared_experts: must be 1 (the reference MoE has exactly one shared expert), got 2"},
  };
  for (const Case& c : cases) {
    Json json = HfJson();
    json["text_config"][c.key] = c.value;
    EXPECT_EQ(ParseError(json), std::string("config.json: ") + c.expected) << c.key;
  }
}

// Only sqrtsoftplus routing is computed: the reference's other scoring functions are refused at
// load, not silently run as sqrtsoftplus.
TEST(ModelConfigTest, ScoringFunctionsOtherThanSqrtSoftplusAreRejected) {
  for (const char* func : {"softmax", "sigmoid"}) {
    Json json = HfJson();
    json["text_config"]["scoring_func"] = func;
    EXPECT_EQ(ParseError(json), std::string("config.json: text_config.scoring_func: \"") + func +
                                    "\" routing is not implemented; deepinfer supports only \"sqrtsoftplus\" "
                                    "(DeepSeek-V4.1's)");
  }
  Json json = HfJson();
  json["text_config"]["scoring_func"] = "relu";
  EXPECT_EQ(ParseError(json),
            "config.json: text_config.scoring_func: \"relu\" is not a scoring function; deepinfer supports only "
            "\"sqrtsoftplus\" (DeepSeek-V4.1's) (the reference also defines \"softmax\" and \"sigmoid\")");
  Json flat = FlatJson();
  flat["score_func"] = "softmax";
  EXPECT_EQ(ParseError(flat),
            "config.json: score_func: \"softmax\" routing is not implemented; deepinfer supports only "
            "\"sqrtsoftplus\" (DeepSeek-V4.1's)");
}

TEST(ModelConfigTest, EngramListsMustAgree) {
  Json json = HfJson();
  json["text_config"]["engram_num_embeddings"] = {384006168};
  EXPECT_EQ(ParseError(json),
            "config.json: text_config.engram_num_embeddings: has 1 entries but text_config.engram_layer_ids lists 2 "
            "layers (one table per engram layer)");
}

TEST(ModelConfigTest, QuantizationChecks) {
  struct Case {
    const char* key;
    Json value;
    const char* expected;
  };
  const Case cases[] = {
      {"weight_block_size",
       {128, 128},
       "quantization_config.weight_block_size: V4.1 fp8 weights use 32x32 blocks, got 128x128"},
      {"weight_block_size", {32, 64}, "quantization_config.weight_block_size: [32, 64] is not square"},
      {"scale_fmt", "fp32", "quantization_config.scale_fmt: V4.1 quantized weights use \"ue8m0\" scales, got \"fp32\""},
      {"expert_dtype", "int4", "quantization_config.expert_dtype: expected \"fp4\" or \"fp8\", got \"int4\""},
      {"quant_method", "awq", "quantization_config.quant_method: expected \"fp8\", got \"awq\""},
  };
  for (const Case& c : cases) {
    Json json = HfJson();
    json["quantization_config"][c.key] = c.value;
    EXPECT_EQ(ParseError(json), std::string("config.json: ") + c.expected) << c.key;
  }
  Json flat = FlatJson();
  flat["dtype"] = "fp16";
  EXPECT_EQ(ParseError(flat), "config.json: dtype: expected \"fp8\" or \"bf16\", got \"fp16\"");
}

TEST(ModelConfigTest, SeveralProblemsAreReportedInOneMessage) {
  Json json = HfJson();
  json["text_config"]["hidden_size"] = "5120";
  json["text_config"]["o_groups"] = 7;
  json["text_config"]["compress_ratios"][21] = 2;
  EXPECT_EQ(ParseError(json),
            "config.json: 3 problems: (1) text_config.hidden_size: expected an integer, got string; "
            "(2) text_config.num_attention_heads (64) is not divisible by text_config.o_groups (7); "
            "(3) layer 21 (compress ratio 2) reads the compressed KV of layer 20, whose compress ratio is 1");
}

TEST(ModelConfigTest, FlatFormMessagesUseReferenceKeyNames) {
  Json json = FlatJson();
  json["n_activated_experts"] = 400;
  json["window_size"] = 0;
  EXPECT_EQ(ParseError(json),
            "config.json: 2 problems: (1) window_size: must be positive, got 0; (2) n_activated_experts (400) exceeds "
            "n_routed_experts (384)");
}

// ---------------------------------------------------------------------------------------------
// Hostile values: bounded before any arithmetic, one clear problem each, never a hang.

TEST(ModelConfigTest, ImplausibleValuesAreRejectedByTheBoundsTable) {
  struct Case {
    const char* key;
    Json value;
    const char* expected;
  };
  const Case cases[] = {
      {"hc_mult", 2147483647, "text_config.hc_mult: 2147483647 exceeds the supported maximum of 16"},
      {"hidden_size", int64_t{1} << 62,
       "text_config.hidden_size: 4611686018427387904 exceeds the supported maximum of 65536"},
      {"engram_max_ngram_size", 2147483647,
       "text_config.engram_max_ngram_size: 2147483647 exceeds the supported maximum of 16"},
      {"engram_vocab_size", int64_t{1} << 62,
       "text_config.engram_vocab_size: 4611686018427387904 exceeds the supported maximum of 4294967296"},
      {"n_routed_experts", 1000000, "text_config.n_routed_experts: 1000000 exceeds the supported maximum of 4096"},
      {"n_routed_experts", 2000000000,
       "text_config.n_routed_experts: 2000000000 exceeds the supported maximum of 4096"},
      {"hc_sinkhorn_iters", 1000000000,
       "text_config.hc_sinkhorn_iters: 1000000000 exceeds the supported maximum of 1000"},
      {"sliding_window", 2147483647, "text_config.sliding_window: 2147483647 exceeds the supported maximum of 1048576"},
      {"vocab_size", 2147483646, "text_config.vocab_size: 2147483646 exceeds the supported maximum of 16777216"},
      {"rms_norm_eps", 2.0, "text_config.rms_norm_eps: 2 exceeds the supported maximum of 1"},
      {"rms_norm_eps", 0.0, "text_config.rms_norm_eps: must be positive, got 0"},
      {"max_position_embeddings", -1, "text_config.max_position_embeddings: must not be negative, got -1"},
  };
  for (const Case& c : cases) {
    Json json = HfJson();
    json["text_config"][c.key] = c.value;
    EXPECT_EQ(ParseError(json), std::string("config.json: ") + c.expected) << c.key;
  }
}

TEST(ModelConfigTest, HugeListsAreOneProblemNotMillions) {
  Json json = HfJson();
  json["text_config"]["compress_ratios"] = std::vector<int>(100'000, 1);
  EXPECT_EQ(ParseError(json),
            "config.json: text_config.compress_ratios: has 100000 entries, at most 1040 are supported");
  // 10 million entries (20 MB) are over the config size limit before anything is parsed.
  std::string list = "[";
  for (int i = 0; i < 10'000'000; ++i) list += "0,";
  list.back() = ']';
  std::string text = HfJson().dump();
  text.insert(text.size() - 1, ", \"x\": " + list);
  EXPECT_THAT([&] { ParseModelConfig(text, "config.json"); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(StartsWith("config.json: "), HasSubstr(" bytes exceed the 1048576-byte limit for this file"))));
}

TEST(ModelConfigTest, DeepNestingAndHugeNumbersAreErrors) {
  Json without_eos = HfJson();
  without_eos.erase("eos_token_id");
  std::string deep = without_eos.dump();
  deep.insert(deep.size() - 1, ", \"eos_token_id\": " + std::string(200'000, '[') + std::string(200'000, ']'));
  // 400 kB: within the size limit; the depth check stops it before anything recurses.
  EXPECT_THAT([&] { ParseModelConfig(deep, "config.json"); },
              ::testing::ThrowsMessage<Error>(
                  StartsWith("config.json: JSON nested deeper than 68 levels (at /eos_token_id/0/0")));
  std::string huge = HfJson().dump();
  huge.insert(huge.size() - 1, ", \"unused\": 1e400");
  EXPECT_THAT(
      [&] { ParseModelConfig(huge, "config.json"); },
      ::testing::ThrowsMessage<Error>(StartsWith("config.json: not valid JSON: number overflow parsing '1e400'")));
}

TEST(ModelConfigTest, LongProblemListsAreTruncated) {
  Json json = HfJson();
  json["text_config"]["kv_source_layer_ids"] = std::vector<int>(500, 99);
  const std::string message = ParseError(json);
  EXPECT_THAT(message, HasSubstr("(20) text_config.kv_source_layer_ids: layer 99 is out of range"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("(21)")));
  EXPECT_THAT(message, ::testing::MatchesRegex(".*; \\.\\.\\. and [0-9]+ more$"));
  EXPECT_LT(message.size(), 4000u);
}

TEST(ModelConfigTest, ConfigFilesThatAreNotRegularFilesAreNamed) {
  {
    ScratchDir dir("fifo");
    ASSERT_EQ(::mkfifo((dir.path() / "config.json").c_str(), 0600), 0);
    EXPECT_THAT([&] { LoadModelConfig(dir.path().string()); },
                ::testing::ThrowsMessage<Error>(
                    StartsWith((dir.path() / "config.json").string() + ": not a regular file (a FIFO)")));
  }
  {
    ScratchDir dir("directory");
    std::filesystem::create_directories(dir.path() / "config.json");
    EXPECT_THAT([&] { LoadModelConfig(dir.path().string()); },
                ::testing::ThrowsMessage<Error>(
                    StartsWith((dir.path() / "config.json").string() + ": not a regular file (a directory)")));
  }
  {
    ScratchDir dir("loop");
    std::filesystem::create_symlink("config.json", dir.path() / "config.json");
    EXPECT_THAT(
        [&] { LoadModelConfig(dir.path().string()); },
        ::testing::ThrowsMessage<Error>(StartsWith((dir.path() / "config.json").string() + ": a symlink loop")));
  }
  {
    ScratchDir dir("outside");
    std::filesystem::create_symlink("/etc/passwd", dir.path() / "config.json");
    EXPECT_THAT([&] { LoadModelConfig(dir.path().string()); },
                ::testing::ThrowsMessage<Error>(HasSubstr("outside the model directory")));
  }
}

}  // namespace
}  // namespace deepinfer
