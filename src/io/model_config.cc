#include "io/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/bounded_json.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "core/model_limits.h"

namespace deepinfer {

WeightFormat ModelConfig::expert_format() const {
  if (expert_dtype == "fp4") return WeightFormat::kFP4Row;
  if (expert_dtype == "fp8") return WeightFormat::kFP8Block;
  return WeightFormat::kBF16;  // validation admits only fp4, fp8 and bf16
}

namespace {

using Json = nlohmann::json;

// V4.1 fixes the fp8 block at 32x32 (reference `fp8_block_size`); the flat form has no key for it.
constexpr int kFp8BlockSize = 32;
// config.json is a few kB; it nests four levels (root, text_config, rope_parameters, an entry).
constexpr JsonLimits kConfigLimits{1 << 20, 4 + 64};
// The longest problem list one message spells out.
constexpr size_t kMaxListedProblems = 20;

enum class Form { kHf, kReference };
enum class Presence { kRequired, kOptional };
constexpr Presence kRequired = Presence::kRequired;
constexpr Presence kOptional = Presence::kOptional;

// Every problem found in one config, reported together so that one edit pass fixes them all.
// Only the first kMaxListedProblems are kept and spelled out; the rest are counted.
class Problems {
 public:
  template <typename... Args>
  void Add(const Args&... args) {
    if (list_.size() < kMaxListedProblems) list_.push_back(detail::Concat(args...));
    ++count_;
  }
  bool empty() const { return count_ == 0; }

  Error ToError(const std::string& origin) const {
    if (count_ == 1) return MakeError(origin, ": ", list_[0]);
    std::ostringstream out;
    out << origin << ": " << count_ << " problems: ";
    for (size_t i = 0; i < list_.size(); ++i) out << (i == 0 ? "" : "; ") << "(" << i + 1 << ") " << list_[i];
    if (count_ > list_.size()) out << "; ... and " << count_ - list_.size() << " more";
    return Error(out.str());
  }

 private:
  std::vector<std::string> list_;
  size_t count_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Typed conversion of one JSON value. Each returns false after recording why the value does not
// fit; `key` is the key as written in the file ("text_config.hidden_size", "dim", "x[3]").

bool Convert(const Json& value, const std::string& key, int64_t* out, Problems* problems) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
      problems->Add(key, ": ", value.dump(), " is out of range");
      return false;
    }
    *out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_float()) {
    // 5120.0 is an integer written by a float-minded tool; 2.5 is a mistake.
    const double d = value.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
    problems->Add(key, ": expected an integer, got number ", value.dump());
    return false;
  }
  problems->Add(key, ": expected an integer, got ", value.type_name());
  return false;
}

bool Convert(const Json& value, const std::string& key, int* out, Problems* problems) {
  int64_t wide = 0;
  if (!Convert(value, key, &wide, problems)) return false;
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
    problems->Add(key, ": ", wide, " does not fit a 32-bit integer");
    return false;
  }
  *out = static_cast<int>(wide);
  return true;
}

bool Convert(const Json& value, const std::string& key, double* out, Problems* problems) {
  if (!value.is_number()) {
    problems->Add(key, ": expected a number, got ", value.type_name());
    return false;
  }
  *out = value.get<double>();
  return true;
}

bool Convert(const Json& value, const std::string& key, bool* out, Problems* problems) {
  if (!value.is_boolean()) {
    problems->Add(key, ": expected a boolean, got ", value.type_name());
    return false;
  }
  *out = value.get<bool>();
  return true;
}

bool Convert(const Json& value, const std::string& key, std::string* out, Problems* problems) {
  if (!value.is_string()) {
    problems->Add(key, ": expected a string, got ", value.type_name());
    return false;
  }
  *out = value.get<std::string>();
  return true;
}

template <typename T>
bool Convert(const Json& value, const std::string& key, std::vector<T>* out, Problems* problems) {
  if (!value.is_array()) {
    problems->Add(key, ": expected an array of integers, got ", value.type_name());
    return false;
  }
  std::vector<T> values(value.size());
  bool ok = true;
  for (size_t i = 0; i < value.size(); ++i) {
    ok = Convert(value[i], detail::Concat(key, "[", i, "]"), &values[i], problems) && ok;
  }
  if (ok) *out = std::move(values);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Plausibility bounds: the values this engine supports, one Range per field in the table below.
// A value is checked against its range as soon as it is read, before any arithmetic uses it, so
// every later computation on config values (tensor shapes, tables, loops) stays far from
// overflow, and a hostile value (hc_sinkhorn_iters 1e9, n_routed_experts 2e9, a 10M-entry list)
// is an error instead of a hang or gigabytes of memory. Dependent bounds (ids below vocab_size,
// layer ids below num_layers, top-k within the expert count) are checked in validation.

constexpr double kAny = std::numeric_limits<double>::infinity();

struct Range {
  double min = -kAny;
  double max = kAny;
  bool min_exclusive = false;  // (min, max]: the positive reals
  size_t max_entries = 0;      // lists: the most entries (the bounds apply to each); 0 for scalars
};

// Integral bounds print as integers (16777216, not 1.67772e+07).
std::string Number(double value) {
  if (std::floor(value) == value && std::fabs(value) < 1e15) return std::to_string(static_cast<int64_t>(value));
  return detail::Concat(value);
}

template <typename T>
bool InRange(T value, const Range& range, const std::string& key, Problems* problems) {
  const double v = static_cast<double>(value);  // exact for every bound in the table
  const std::string shown = std::is_integral_v<T> ? detail::Concat(value) : Number(v);
  const bool too_low = range.min_exclusive ? !(v > range.min) : !(v >= range.min);
  if (too_low) {
    if ((range.min == 0 && range.min_exclusive) || (range.min == 1 && !range.min_exclusive)) {
      problems->Add(key, ": must be positive, got ", shown);
    } else if (range.min == 0) {
      problems->Add(key, ": must not be negative, got ", shown);
    } else {
      problems->Add(key, ": must be at least ", Number(range.min), ", got ", shown);
    }
    return false;
  }
  if (!(v <= range.max)) {
    problems->Add(key, ": ", shown, " exceeds the supported maximum of ", Number(range.max));
    return false;
  }
  return true;
}

// Convert, then the range check; integers are judged before they are narrowed.
bool ConvertInRange(const Json& value, const std::string& key, const Range& range, int64_t* out, Problems* problems) {
  int64_t wide = 0;
  if (!Convert(value, key, &wide, problems) || !InRange(wide, range, key, problems)) return false;
  *out = wide;
  return true;
}
bool ConvertInRange(const Json& value, const std::string& key, const Range& range, int* out, Problems* problems) {
  int64_t wide = 0;
  if (!ConvertInRange(value, key, range, &wide, problems)) return false;
  return Convert(Json(wide), key, out, problems);
}
bool ConvertInRange(const Json& value, const std::string& key, const Range& range, double* out, Problems* problems) {
  return Convert(value, key, out, problems) && InRange(*out, range, key, problems);
}
template <typename T>
bool ConvertInRange(const Json& value, const std::string& key, const Range&, T* out, Problems* problems) {
  return Convert(value, key, out, problems);  // bool, string: no numeric range
}
template <typename T>
bool ConvertInRange(const Json& value, const std::string& key, const Range& range, std::vector<T>* out,
                    Problems* problems) {
  if (!value.is_array()) {
    problems->Add(key, ": expected an array of integers, got ", value.type_name());
    return false;
  }
  // The length first: a 10-million-entry list must not turn into 10 million problems.
  if (range.max_entries > 0 && value.size() > range.max_entries) {
    problems->Add(key, ": has ", value.size(), " entries, at most ", range.max_entries, " are supported");
    return false;
  }
  std::vector<T> values(value.size());
  bool ok = true;
  for (size_t i = 0; i < value.size(); ++i) {
    ok = ConvertInRange(value[i], detail::Concat(key, "[", i, "]"), range, &values[i], problems) && ok;
  }
  if (ok) *out = std::move(values);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// The field table: one row per plain config field, walked by both forms' readers and used by
// validation to name a field the way the file spells it. Fields that need more than a key
// look-up (rope_scaling, quantization_config, token ids) are read by hand further down.

using Member =
    std::variant<int ModelConfig::*, int64_t ModelConfig::*, double ModelConfig::*, bool ModelConfig::*,
                 std::string ModelConfig::*, std::vector<int> ModelConfig::*, std::vector<int64_t> ModelConfig::*>;

struct Field {
  std::string_view name;     // the ModelConfig member: the field's id in validation
  std::string_view hf_key;   // key under text_config; empty: not a plain text_config key
  std::string_view ref_key;  // key in the flat reference file; empty: not in that form
  Member member;
  Presence presence;
  Range range;  // the values the engine supports (see "Plausibility bounds" above)
};

// Bounds, generous multiples of the released V4.1 configs (V4.1-Flash: vocab 129280, hidden 5120,
// 43 layers, 64 heads x 512, 256 experts of 2048, window 128, hc_mult 4, 20 Sinkhorn iterations).
constexpr int kMaxLayers = 1024;     // backbone layers; lists of layer ids hold at most this many
constexpr int kMaxMtpLayers = 16;    // DSpark draft stages
constexpr double kMaxWidth = 65536;  // hidden, LoRA ranks, expert width
constexpr double kMaxHeadDim = 4096;
constexpr double kMaxHeads = 1024;
constexpr double kMaxExperts = 4096;
constexpr double kMaxContext = 1 << 24;  // positions
constexpr double kMaxReal = 1e6;         // scaling factors and temperatures
constexpr Range CountUpTo(double max) { return Range{1, max}; }
constexpr Range NonNegativeUpTo(double max) { return Range{0, max}; }
constexpr Range PositiveRealUpTo(double max) { return Range{0, max, true}; }
constexpr Range kLayerIds{-kAny, kAny, false, kMaxLayers};  // each < num_layers: checked in validation
constexpr Range kNoRange{};

// Shapes (anything that sizes a tensor) are required; behaviour knobs take the reference
// `ModelArgs` defaults (see ReferenceDefaults). Shapes that only exist for an optional feature
// (indexer, engram, DSpark) are checked by validation when that feature is on (0: unset).
// The last column is the field's supported range; README "Limits" summarises it.
constexpr Field kFields[] = {
    // Shapes.
    {"vocab_size", "vocab_size", "vocab_size", &ModelConfig::vocab_size, kRequired, CountUpTo(kMaxVocabSize)},
    {"hidden_size", "hidden_size", "dim", &ModelConfig::hidden_size, kRequired, CountUpTo(kMaxWidth)},
    {"moe_intermediate_size", "moe_intermediate_size", "moe_inter_dim", &ModelConfig::moe_intermediate_size, kRequired,
     CountUpTo(kMaxWidth)},
    {"num_layers", "num_hidden_layers", "n_layers", &ModelConfig::num_layers, kRequired, CountUpTo(kMaxLayers)},
    {"num_mtp_layers", "num_nextn_predict_layers", "n_mtp_layers", &ModelConfig::num_mtp_layers, kOptional,
     NonNegativeUpTo(kMaxMtpLayers)},
    {"num_heads", "num_attention_heads", "n_heads", &ModelConfig::num_heads, kRequired, CountUpTo(kMaxHeads)},
    {"head_dim", "head_dim", "head_dim", &ModelConfig::head_dim, kRequired, CountUpTo(kMaxHeadDim)},
    {"rope_head_dim", "qk_rope_head_dim", "rope_head_dim", &ModelConfig::rope_head_dim, kRequired,
     CountUpTo(kMaxHeadDim)},
    {"q_lora_rank", "q_lora_rank", "q_lora_rank", &ModelConfig::q_lora_rank, kRequired, CountUpTo(kMaxWidth)},
    {"o_groups", "o_groups", "o_groups", &ModelConfig::o_groups, kRequired, CountUpTo(kMaxHeads)},
    {"o_lora_rank", "o_lora_rank", "o_lora_rank", &ModelConfig::o_lora_rank, kRequired, CountUpTo(kMaxWidth)},
    {"norm_eps", "rms_norm_eps", "norm_eps", &ModelConfig::norm_eps, kOptional, PositiveRealUpTo(1)},
    {"window_size", "sliding_window", "window_size", &ModelConfig::window_size, kOptional, CountUpTo(1 << 20)},
    // The flat form has no max_position_embeddings (max_seq_len is a runtime value); see Finish().
    {"max_position_embeddings", "max_position_embeddings", "", &ModelConfig::max_position_embeddings, kOptional,
     NonNegativeUpTo(kMaxContext)},
    // RoPE. The HF form nests the YaRN fields under rope_scaling / rope_parameters (ReadHfRope).
    {"rope_theta", "rope_theta", "rope_theta", &ModelConfig::rope_theta, kOptional, PositiveRealUpTo(1e12)},
    {"compress_rope_theta", "compress_rope_theta", "compress_rope_theta", &ModelConfig::compress_rope_theta, kOptional,
     PositiveRealUpTo(1e12)},
    {"rope_factor", "", "rope_factor", &ModelConfig::rope_factor, kOptional, PositiveRealUpTo(kMaxReal)},
    {"original_seq_len", "", "original_seq_len", &ModelConfig::original_seq_len, kOptional,
     NonNegativeUpTo(kMaxContext)},
    {"beta_fast", "", "beta_fast", &ModelConfig::beta_fast, kOptional, PositiveRealUpTo(kMaxReal)},
    {"beta_slow", "", "beta_slow", &ModelConfig::beta_slow, kOptional, PositiveRealUpTo(kMaxReal)},
    // MoE.
    {"n_routed_experts", "n_routed_experts", "n_routed_experts", &ModelConfig::n_routed_experts, kRequired,
     CountUpTo(kMaxExperts)},
    {"n_shared_experts", "n_shared_experts", "n_shared_experts", &ModelConfig::n_shared_experts, kOptional,
     NonNegativeUpTo(kMaxExperts)},
    {"num_experts_per_tok", "num_experts_per_tok", "n_activated_experts", &ModelConfig::num_experts_per_tok, kRequired,
     CountUpTo(kMaxExperts)},
    {"scoring_func", "scoring_func", "score_func", &ModelConfig::scoring_func, kOptional, kNoRange},
    {"norm_topk_prob", "norm_topk_prob", "norm_topk_prob", &ModelConfig::norm_topk_prob, kOptional, kNoRange},
    {"routed_scaling_factor", "routed_scaling_factor", "route_scale", &ModelConfig::routed_scaling_factor, kOptional,
     PositiveRealUpTo(kMaxReal)},
    {"gate_temp", "gate_temp", "gate_temp", &ModelConfig::gate_temp, kOptional, PositiveRealUpTo(kMaxReal)},
    {"swiglu_limit", "swiglu_limit", "swiglu_limit", &ModelConfig::swiglu_limit, kOptional, NonNegativeUpTo(kMaxReal)},
    // Compressed / sparse attention schedule.
    {"compress_ratios", "compress_ratios", "compress_ratios", &ModelConfig::compress_ratios, kRequired,
     Range{0, 1024, false, kMaxLayers + kMaxMtpLayers}},
    {"kv_source_layers", "kv_source_layer_ids", "kv_source_layers", &ModelConfig::kv_source_layers, kOptional,
     kLayerIds},
    {"index_source_layers", "index_source_layer_ids", "index_source_layers", &ModelConfig::index_source_layers,
     kOptional, kLayerIds},
    {"index_n_heads", "index_n_heads", "index_n_heads", &ModelConfig::index_n_heads, kOptional,
     NonNegativeUpTo(kMaxHeads)},
    {"index_head_dim", "index_head_dim", "index_head_dim", &ModelConfig::index_head_dim, kOptional,
     NonNegativeUpTo(kMaxHeadDim)},
    {"index_topk", "index_topk", "index_topk", &ModelConfig::index_topk, kOptional, NonNegativeUpTo(1 << 20)},
    {"candidate_source_layer", "candidate_source_layer_id", "candidate_source_layer",
     &ModelConfig::candidate_source_layer, kOptional, kNoRange},  // -1 or a layer id: checked in validation
    {"candidate_topk_blocks", "candidate_topk_blocks", "candidate_topk_blocks", &ModelConfig::candidate_topk_blocks,
     kOptional, NonNegativeUpTo(1 << 20)},
    {"candidate_block_size", "candidate_block_size", "candidate_block_size", &ModelConfig::candidate_block_size,
     kOptional, NonNegativeUpTo(1 << 20)},
    // Hyper-connections.
    {"hc_mult", "hc_mult", "hc_mult", &ModelConfig::hc_mult, kOptional, CountUpTo(16)},
    {"hc_sinkhorn_iters", "hc_sinkhorn_iters", "hc_sinkhorn_iters", &ModelConfig::hc_sinkhorn_iters, kOptional,
     CountUpTo(1000)},
    {"hc_eps", "hc_eps", "hc_eps", &ModelConfig::hc_eps, kOptional, PositiveRealUpTo(1)},
    // Engram.
    {"engram_layer_ids", "engram_layer_ids", "engram_layer_ids", &ModelConfig::engram_layer_ids, kOptional, kLayerIds},
    {"engram_num_embeddings", "engram_num_embeddings", "engram_num_embeddings", &ModelConfig::engram_num_embeddings,
     kOptional, Range{1, 1LL << 32, false, kMaxLayers}},
    {"engram_max_ngram_size", "engram_max_ngram_size", "engram_max_ngram_size", &ModelConfig::engram_max_ngram_size,
     kOptional, CountUpTo(16)},
    {"engram_vocab_size", "engram_vocab_size", "engram_vocab_size", &ModelConfig::engram_vocab_size, kOptional,
     NonNegativeUpTo(1LL << 32)},
    {"engram_n_heads", "engram_n_heads", "engram_n_heads", &ModelConfig::engram_n_heads, kOptional,
     NonNegativeUpTo(64)},
    {"engram_head_dim", "engram_head_dim", "engram_head_dim", &ModelConfig::engram_head_dim, kOptional,
     NonNegativeUpTo(kMaxHeadDim)},
    {"engram_pad_id", "engram_pad_token_id", "engram_pad_id", &ModelConfig::engram_pad_id, kOptional,
     NonNegativeUpTo(kMaxVocabSize - 1)},
    {"engram_compressed_vocab_size", "engram_compressed_vocab_size", "engram_compressed_vocab_size",
     &ModelConfig::engram_compressed_vocab_size, kOptional, NonNegativeUpTo(kMaxVocabSize)},
    // DSpark.
    {"dspark_block_size", "dspark_block_size", "dspark_block_size", &ModelConfig::dspark_block_size, kOptional,
     NonNegativeUpTo(256)},
    {"dspark_noise_token_id", "dspark_noise_token_id", "dspark_noise_token_id", &ModelConfig::dspark_noise_token_id,
     kOptional, NonNegativeUpTo(kMaxVocabSize - 1)},
    {"dspark_target_layer_ids", "dspark_target_layer_ids", "dspark_target_layer_ids",
     &ModelConfig::dspark_target_layer_ids, kOptional, kLayerIds},
    {"dspark_markov_rank", "dspark_markov_rank", "dspark_markov_rank", &ModelConfig::dspark_markov_rank, kOptional,
     CountUpTo(kMaxWidth)},
    {"dspark_n_routed_experts", "dspark_n_routed_experts", "dspark_n_routed_experts",
     &ModelConfig::dspark_n_routed_experts, kOptional, NonNegativeUpTo(kMaxExperts)},  // 0: the backbone's
    {"dspark_n_activated_experts", "dspark_num_experts_per_tok", "dspark_n_activated_experts",
     &ModelConfig::dspark_n_activated_experts, kOptional, NonNegativeUpTo(kMaxExperts)},
    // Quantization, flat form only (the HF form uses quantization_config, see ReadHfQuantization).
    {"weight_dtype", "", "dtype", &ModelConfig::weight_dtype, kOptional, kNoRange},
    {"expert_dtype", "", "expert_dtype", &ModelConfig::expert_dtype, kOptional, kNoRange},
    {"scale_fmt", "", "scale_fmt", &ModelConfig::scale_fmt, kOptional, kNoRange},
};

// The range of a table field; fields read by hand outside the table have none here.
const Range& RangeOf(std::string_view name) {
  for (const Field& field : kFields) {
    if (field.name == name) return field.range;
  }
  return kNoRange;
}

// The reference `ModelArgs` defaults for the fields that may be absent, where they differ from
// the struct's in-class defaults. Both forms share them except for two HF-specific choices.
ModelConfig ReferenceDefaults(Form form) {
  ModelConfig config;
  config.num_mtp_layers = 1;  // only counts when dspark_block_size > 0; zeroed otherwise in Finish()
  // The reference default 1e-20 is a training-time choice the released files state explicitly.
  // An HF file that omits rms_norm_eps follows the HF convention instead, 1e-6: far safer for
  // any model that was not trained with 1e-20.
  config.norm_eps = form == Form::kHf ? 1e-6 : 1e-20;
  config.window_size = 128;
  config.compress_rope_theta = 40000.0;
  config.rope_factor = 40.0;  // unused while original_seq_len is 0 (YaRN off)
  config.original_seq_len = 0;
  config.engram_max_ngram_size = 1;
  config.dspark_markov_rank = 256;
  // The flat form defaults to the reference's fp8 + fp4 experts; an HF file without
  // quantization_config is an unquantized (bf16) checkpoint.
  config.weight_dtype = form == Form::kHf ? "bf16" : "fp8";
  config.expert_dtype = form == Form::kHf ? "bf16" : "fp4";
  config.weight_block_size = kFp8BlockSize;
  config.scale_fmt = "ue8m0";
  return config;
}

const Json* FindValue(const Json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;  // HF writes null for "not set"
  return &*it;
}

// Reads fields into a ModelConfig, remembering for each field id the key the file uses, whether
// it was present, and whether it failed to read, so that validation neither repeats a type error
// nor judges a value that was never read.
class Reader {
 public:
  Reader(Form form, Problems* problems) : form_(form), problems_(problems) {}

  Form form() const { return form_; }
  Problems* problems() const { return problems_; }

  template <typename T>
  void Read(std::string_view name, const Json& object, const std::string& key, const std::string& full_key,
            Presence presence, T* out) {
    keys_[std::string(name)] = full_key;
    const Json* value = FindValue(object, key);
    if (value == nullptr) {
      if (presence == kRequired) {
        problems_->Add(full_key, ": required field is missing");
        MarkBad(name);
      }
      return;
    }
    present_.insert(std::string(name));
    if (!ConvertInRange(*value, full_key, RangeOf(name), out, problems_)) MarkBad(name);
  }

  // Reads every table field this form has from `object`; `prefix` is how the file reaches it.
  void ReadTable(const Json& object, const std::string& prefix, ModelConfig* config) {
    for (const Field& field : kFields) {
      const std::string_view key = form_ == Form::kHf ? field.hf_key : field.ref_key;
      if (key.empty()) continue;
      std::visit(
          [&](auto member) {
            Read(field.name, object, std::string(key), prefix + std::string(key), field.presence, &(config->*member));
          },
          field.member);
    }
  }

  void SetKey(std::string_view name, std::string key) { keys_[std::string(name)] = std::move(key); }
  void MarkBad(std::string_view name) { bad_.insert(std::string(name)); }
  void MarkPresent(std::string_view name) { present_.insert(std::string(name)); }

  // The key as this file spells it, for messages; a field the file cannot have keeps its id.
  std::string Key(std::string_view name) const {
    const auto it = keys_.find(std::string(name));
    return it != keys_.end() ? it->second : std::string(name);
  }
  bool Present(std::string_view name) const { return present_.count(std::string(name)) != 0; }
  // True when none of the named fields failed to read (their values can be judged).
  template <typename... Names>
  bool Usable(const Names&... names) const {
    return (... && (bad_.count(std::string(names)) == 0));
  }

 private:
  Form form_;
  Problems* problems_;
  std::map<std::string, std::string> keys_;
  std::set<std::string> present_;
  std::set<std::string> bad_;
};

// bos/eos: HF files carry them at the top level, in text_config, or both (text_config wins).
// An eos list is accepted when it holds exactly one id.
void ReadTokenId(std::string_view name, const std::vector<std::pair<const Json*, std::string>>& places, Reader* reader,
                 int* out) {
  for (const auto& [object, prefix] : places) {
    if (object == nullptr) continue;
    const std::string key(name);
    const Json* value = FindValue(*object, key);
    if (value == nullptr) continue;
    const std::string full_key = prefix + key;
    reader->SetKey(name, full_key);
    reader->MarkPresent(name);
    if (value->is_array() && value->size() == 1) value = &(*value)[0];
    if (value->is_array()) {
      reader->problems()->Add(full_key, ": ", BoundedDump(*value, 100), " lists several ids; expected one integer");
      reader->MarkBad(name);
    } else if (!Convert(*value, full_key, out, reader->problems())) {
      reader->MarkBad(name);
    }
    return;
  }
}

// RoPE in the HF form. YaRN comes from `rope_scaling` {rope_type "yarn", factor,
// original_max_position_embeddings, beta_fast, beta_slow}; without it, from transformers'
// newer `rope_parameters`, either flat (the same keys plus rope_theta) or nested by attention
// type, where the "yarn" entry describes the compressed layers (its rope_theta is the
// compress_rope_theta) and the other entry the sliding-window ones. Explicit text_config
// rope_theta / compress_rope_theta always win.
void ReadHfRope(const Json& text, Reader* reader, ModelConfig* config) {
  Problems* problems = reader->problems();
  std::string key = "rope_scaling";
  const Json* block = FindValue(text, key);
  if (block == nullptr) {
    key = "rope_parameters";
    block = FindValue(text, key);
  }
  if (block == nullptr) return;  // no YaRN: original_seq_len stays 0
  const std::string block_key = "text_config." + key;
  if (!block->is_object()) {
    problems->Add(block_key, ": expected an object, got ", block->type_name());
    for (const char* name : {"rope_factor", "original_seq_len", "beta_fast", "beta_slow"}) reader->MarkBad(name);
    return;
  }

  const Json* yarn = block;
  std::string yarn_key = block_key;
  if (key == "rope_parameters") {
    const bool nested = std::any_of(block->begin(), block->end(), [](const Json& v) { return v.is_object(); });
    if (nested) {
      yarn = nullptr;
      for (const auto& [name, entry] : block->items()) {
        if (!entry.is_object()) continue;
        const Json* type = FindValue(entry, "rope_type");
        const bool is_yarn = type != nullptr && type->is_string() && type->get<std::string>() == "yarn";
        const std::string entry_key = block_key + "." + name;
        const char* theta_field = is_yarn ? "compress_rope_theta" : "rope_theta";
        double* theta = is_yarn ? &config->compress_rope_theta : &config->rope_theta;
        if (!reader->Present(theta_field)) {
          reader->Read(theta_field, entry, "rope_theta", entry_key + ".rope_theta", kOptional, theta);
        }
        if (is_yarn) {
          yarn = &entry;
          yarn_key = entry_key;
        }
      }
      if (yarn == nullptr) return;
    } else if (!reader->Present("rope_theta")) {
      reader->Read("rope_theta", *block, "rope_theta", block_key + ".rope_theta", kOptional, &config->rope_theta);
    }
  }

  std::string type = "yarn";
  const char* type_name = yarn->contains("rope_type") ? "rope_type" : "type";
  reader->Read("rope_type", *yarn, type_name, yarn_key + "." + type_name, kOptional, &type);
  if (type == "default") return;  // plain RoPE: no YaRN
  if (type != "yarn") {
    problems->Add(yarn_key, ".", type_name, ": expected \"yarn\", got \"", type, "\"");
    return;
  }
  reader->Read("rope_factor", *yarn, "factor", yarn_key + ".factor", kRequired, &config->rope_factor);
  reader->Read("original_seq_len", *yarn, "original_max_position_embeddings",
               yarn_key + ".original_max_position_embeddings", kRequired, &config->original_seq_len);
  reader->Read("beta_fast", *yarn, "beta_fast", yarn_key + ".beta_fast", kOptional, &config->beta_fast);
  reader->Read("beta_slow", *yarn, "beta_slow", yarn_key + ".beta_slow", kOptional, &config->beta_slow);
}

// HF quantization: {"quant_method": "fp8", "weight_block_size": [32, 32], "scale_fmt": "ue8m0",
// "expert_dtype": "fp4"}. Absent means an unquantized bf16 checkpoint.
void ReadHfQuantization(const Json& root, Reader* reader, ModelConfig* config) {
  Problems* problems = reader->problems();
  const std::string prefix = "quantization_config.";
  reader->SetKey("weight_dtype", prefix + "quant_method");
  reader->SetKey("weight_block_size", prefix + "weight_block_size");
  reader->SetKey("scale_fmt", prefix + "scale_fmt");
  reader->SetKey("expert_dtype", prefix + "expert_dtype");
  const Json* quant = FindValue(root, "quantization_config");
  if (quant == nullptr) return;  // the bf16 defaults stand
  if (!quant->is_object()) {
    problems->Add("quantization_config: expected an object, got ", quant->type_name());
    for (const char* name : {"weight_dtype", "weight_block_size", "scale_fmt", "expert_dtype"}) reader->MarkBad(name);
    return;
  }
  config->expert_dtype = "fp4";  // quantized checkpoints default to fp4 experts, as the reference
  reader->Read("weight_dtype", *quant, "quant_method", prefix + "quant_method", kRequired, &config->weight_dtype);
  if (reader->Usable("weight_dtype") && config->weight_dtype != "fp8") {
    problems->Add(prefix, "quant_method: expected \"fp8\", got \"", config->weight_dtype, "\"");
    reader->MarkBad("weight_dtype");
  }
  std::vector<int64_t> block;
  reader->Read("weight_block_size", *quant, "weight_block_size", prefix + "weight_block_size", kRequired, &block);
  if (reader->Usable("weight_block_size")) {
    if (block.size() != 2) {
      problems->Add(prefix, "weight_block_size: expected 2 entries, got ", block.size());
      reader->MarkBad("weight_block_size");
    } else if (block[0] != block[1]) {
      problems->Add(prefix, "weight_block_size: [", block[0], ", ", block[1], "] is not square");
      reader->MarkBad("weight_block_size");
    } else if (block[0] <= 0 || block[0] > std::numeric_limits<int>::max()) {
      problems->Add(prefix, "weight_block_size: must be positive, got ", block[0]);
      reader->MarkBad("weight_block_size");
    } else {
      config->weight_block_size = static_cast<int>(block[0]);
    }
  }
  reader->Read("scale_fmt", *quant, "scale_fmt", prefix + "scale_fmt", kOptional, &config->scale_fmt);
  reader->Read("expert_dtype", *quant, "expert_dtype", prefix + "expert_dtype", kOptional, &config->expert_dtype);
}

void ReadHfForm(const Json& root, Reader* reader, ModelConfig* config) {
  Problems* problems = reader->problems();
  const Json& text = root["text_config"];
  if (const Json* type = FindValue(root, "model_type"); type != nullptr && type->is_string()) {
    if (type->get<std::string>() != "deepseek_v41") {
      problems->Add("model_type: expected \"deepseek_v41\", got \"", type->get<std::string>(), "\"");
    }
  }
  if (const Json* type = FindValue(text, "model_type"); type != nullptr && type->is_string()) {
    if (type->get<std::string>() != "deepseek_v41_text") {
      problems->Add("text_config.model_type: expected \"deepseek_v41_text\", got \"", type->get<std::string>(), "\"");
    }
  }
  reader->ReadTable(text, "text_config.", config);
  ReadHfRope(text, reader, config);
  ReadHfQuantization(root, reader, config);
  ReadTokenId("bos_token_id", {{&text, "text_config."}, {&root, ""}}, reader, &config->bos_token_id);
  ReadTokenId("eos_token_id", {{&text, "text_config."}, {&root, ""}}, reader, &config->eos_token_id);
}

void ReadReferenceForm(const Json& root, Reader* reader, ModelConfig* config) {
  reader->ReadTable(root, "", config);
  // `expert_dtype: null` is the reference's "experts use the default dtype" (ModelArgs
  // `expert_dtype: Literal["fp4"] | None`), unlike an absent key, which means fp4.
  if (const auto it = root.find("expert_dtype"); it != root.end() && it->is_null()) {
    config->expert_dtype = config->weight_dtype;
  }
  reader->SetKey("weight_block_size", "the fp8 block size");
  ReadTokenId("bos_token_id", {{&root, ""}}, reader, &config->bos_token_id);
  ReadTokenId("eos_token_id", {{&root, ""}}, reader, &config->eos_token_id);
}

// Values derived from others once everything is read.
void Finish(const Reader& reader, ModelConfig* config) {
  // max_position_embeddings, when the file does not say (always so in the flat form): the YaRN
  // extended context, original_seq_len x rope_factor (65536 x 16 = 1048576 for V4.1-Flash);
  // without YaRN, 0 = no model limit beyond the runtime max_seq_len.
  if (!reader.Present("max_position_embeddings") && reader.Usable("original_seq_len", "rope_factor") &&
      config->original_seq_len > 0 && config->rope_factor > 0 && config->rope_factor < 1e6) {
    config->max_position_embeddings =
        static_cast<int64_t>(std::llround(static_cast<double>(config->original_seq_len) * config->rope_factor));
  }
  if (reader.Usable("dspark_block_size") && config->dspark_block_size == 0) {
    config->num_mtp_layers = 0;  // draft layers exist in the file but nothing runs them
  } else if (config->dspark_block_size > 0) {
    // The reference falls back to the backbone's MoE for a draft stage with 0 (`get_moe_config`);
    // resolve it here so downstream reads plain numbers.
    if (config->dspark_n_routed_experts == 0) config->dspark_n_routed_experts = config->n_routed_experts;
    if (config->dspark_n_activated_experts == 0) config->dspark_n_activated_experts = config->num_experts_per_tok;
  }
}

bool Contains(const std::vector<int>& ids, int id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// One LayerRole per backbone layer (spec 1.2). A layer with ratio > 0 reads the compressed KV /
// index keys and the top-k of the most recent KV source / index source at or before it, in layer
// order: the reference keeps one shared slot of each that sources overwrite as the layers run.
void FillRoles(ModelConfig* config) {
  config->roles.assign(static_cast<size_t>(config->num_layers), LayerRole{});
  int last_kv_source = -1;
  int last_index_source = -1;
  for (int layer = 0; layer < config->num_layers; ++layer) {
    LayerRole& role = config->roles[static_cast<size_t>(layer)];
    const size_t index = static_cast<size_t>(layer);
    role.compress_ratio = index < config->compress_ratios.size() ? config->compress_ratios[index] : 0;
    role.kv_source = Contains(config->kv_source_layers, layer);
    role.index_source = Contains(config->index_source_layers, layer);
    role.candidate_source = layer == config->candidate_source_layer;
    role.uses_candidates =
        role.index_source && config->candidate_source_layer >= 0 && config->candidate_source_layer < layer;
    if (role.kv_source) last_kv_source = layer;
    if (role.index_source) last_index_source = layer;
    if (role.compress_ratio > 0) {
      role.kv_source_layer = last_kv_source;
      role.index_source_layer = last_index_source;
    }
    const auto engram = std::find(config->engram_layer_ids.begin(), config->engram_layer_ids.end(), layer);
    if (engram != config->engram_layer_ids.end()) {
      role.engram_index = static_cast<int>(engram - config->engram_layer_ids.begin());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Validation: every check that can be judged is run, and each problem names the field the way
// the file spells it. Checks on a field that failed to read are skipped (already reported).

class Validator {
 public:
  Validator(const ModelConfig& config, const Reader& reader, Problems* problems)
      : c_(config), r_(reader), p_(problems) {}

  void Run() {
    CheckShapes();
    CheckMoe();
    if (r_.Usable("num_layers")) {
      CheckScheduleLists();
      CheckSchedule();
      CheckEngram();
      CheckDSpark();
    }
    CheckTokens();
    CheckQuantization();
  }

 private:
  std::string K(std::string_view name) const { return r_.Key(name); }

  void Positive(std::string_view name, int64_t value) {
    if (r_.Usable(name) && value <= 0) p_->Add(K(name), ": must be positive, got ", value);
  }
  // A shape that only exists when a feature is on: required then, and positive.
  void NeededFor(std::string_view name, int64_t value, const std::string& feature) {
    if (!r_.Usable(name)) return;
    if (!r_.Present(name)) {
      p_->Add(K(name), ": required field is missing (needed when ", feature, ")");
    } else if (value <= 0) {
      p_->Add(K(name), ": must be positive when ", feature, ", got ", value);
    }
  }

  // Ranges (non-negative, positive, maxima) were checked as each field was read; these are the
  // relations between fields.
  void CheckShapes() {
    if (r_.Usable("head_dim", "rope_head_dim")) {
      if (c_.head_dim <= c_.rope_head_dim) {
        p_->Add(K("head_dim"), " (", c_.head_dim, ") must be greater than ", K("rope_head_dim"), " (", c_.rope_head_dim,
                "): the non-RoPE part of a head would be empty");
      }
      if (c_.rope_head_dim % 2 != 0) {
        p_->Add(K("rope_head_dim"), ": must be even (RoPE rotates pairs), got ", c_.rope_head_dim);
      }
    }
    if (r_.Usable("num_heads", "o_groups") && c_.num_heads % c_.o_groups != 0) {
      p_->Add(K("num_heads"), " (", c_.num_heads, ") is not divisible by ", K("o_groups"), " (", c_.o_groups, ")");
    }
  }

  void CheckMoe() {
    if (r_.Usable("n_routed_experts", "num_experts_per_tok") && c_.num_experts_per_tok > c_.n_routed_experts) {
      p_->Add(K("num_experts_per_tok"), " (", c_.num_experts_per_tok, ") exceeds ", K("n_routed_experts"), " (",
              c_.n_routed_experts, ")");
    }
    if (r_.Usable("n_shared_experts") && c_.n_shared_experts != 1) {
      p_->Add(K("n_shared_experts"), ": must be 1 (the reference MoE has exactly one shared expert), got ",
              c_.n_shared_experts);
    }
    // The reference also defines softmax and sigmoid routing; the MoE computes sqrtsoftplus only
    // (V4.1's), so a config asking for another would run a silently different model.
    if (r_.Usable("scoring_func") && c_.scoring_func != "sqrtsoftplus") {
      const bool reference = c_.scoring_func == "softmax" || c_.scoring_func == "sigmoid";
      p_->Add(K("scoring_func"), ": \"", c_.scoring_func, "\" ",
              reference ? "routing is not implemented" : "is not a scoring function",
              "; deepinfer supports only \"sqrtsoftplus\" (DeepSeek-V4.1's)",
              reference ? "" : " (the reference also defines \"softmax\" and \"sigmoid\")");
    }
  }

  // Every id in range and listed once.
  void CheckLayerIds(std::string_view name, const std::vector<int>& ids) {
    if (!r_.Usable(name)) return;
    std::set<int> seen;
    for (const int id : ids) {
      if (id < 0 || id >= c_.num_layers) {
        p_->Add(K(name), ": layer ", id, " is out of range [0, ", c_.num_layers, ")");
      } else if (!seen.insert(id).second) {
        p_->Add(K(name), ": lists layer ", id, " twice");
      }
    }
  }

  int Ratio(int layer) const {
    const size_t index = static_cast<size_t>(layer);
    return index < c_.compress_ratios.size() ? c_.compress_ratios[index] : 0;
  }

  void CheckScheduleLists() {
    const bool dspark_on = r_.Usable("dspark_block_size") && c_.dspark_block_size > 0;
    const bool mtp_ok = r_.Usable("num_mtp_layers") && c_.num_mtp_layers >= 0;
    if (r_.Usable("compress_ratios")) {
      const int64_t needed = c_.num_layers + (dspark_on && mtp_ok ? c_.num_mtp_layers : 0);
      if (static_cast<int64_t>(c_.compress_ratios.size()) < needed) {
        p_->Add(K("compress_ratios"), ": has ", c_.compress_ratios.size(), " entries, needs at least ", needed, " (",
                c_.num_layers, " backbone layers",
                dspark_on && mtp_ok ? detail::Concat(" + ", c_.num_mtp_layers, " DSpark layers") : std::string(), ")");
      }
    }
    CheckLayerIds("kv_source_layers", c_.kv_source_layers);
    CheckLayerIds("index_source_layers", c_.index_source_layers);
    CheckLayerIds("engram_layer_ids", c_.engram_layer_ids);
    CheckLayerIds("dspark_target_layer_ids", c_.dspark_target_layer_ids);
    if (r_.Usable("candidate_source_layer") &&
        (c_.candidate_source_layer < -1 || c_.candidate_source_layer >= c_.num_layers)) {
      p_->Add(K("candidate_source_layer"), ": layer ", c_.candidate_source_layer, " is out of range [0, ",
              c_.num_layers, ") (-1 turns the candidate filter off)");
    }
  }

  void CheckSchedule() {
    if (!r_.Usable("compress_ratios", "kv_source_layers", "index_source_layers")) return;
    for (const int layer : c_.kv_source_layers) {
      if (layer < 0 || layer >= c_.num_layers) continue;
      if (Ratio(layer) <= 0) {
        p_->Add(K("kv_source_layers"), ": layer ", layer, " has compress ratio ", Ratio(layer),
                ", so it has no compressed KV to publish");
      }
      // The index keys its readers score are computed by the KV source's own indexer.
      if (!Contains(c_.index_source_layers, layer)) {
        p_->Add(K("kv_source_layers"), ": layer ", layer, " is not listed in ", K("index_source_layers"),
                ", but a KV source's indexer is what computes the shared index keys");
      }
    }
    for (const int layer : c_.index_source_layers) {
      if (layer < 0 || layer >= c_.num_layers) continue;
      if (Ratio(layer) <= 0) {
        p_->Add(K("index_source_layers"), ": layer ", layer, " has compress ratio ", Ratio(layer),
                ", so it has no compressed positions to index");
      }
    }
    if (!c_.index_source_layers.empty()) {
      const std::string feature = K("index_source_layers") + " is not empty";
      NeededFor("index_n_heads", c_.index_n_heads, feature);
      NeededFor("index_head_dim", c_.index_head_dim, feature);
      NeededFor("index_topk", c_.index_topk, feature);
      if (r_.Usable("index_head_dim", "rope_head_dim") && c_.index_head_dim > 0 &&
          c_.index_head_dim < c_.rope_head_dim) {
        p_->Add(K("index_head_dim"), " (", c_.index_head_dim, ") is smaller than ", K("rope_head_dim"), " (",
                c_.rope_head_dim, "): the indexer rotates its trailing rope_head_dim dims");
      }
    }
    for (int layer = 0; layer < c_.num_layers; ++layer) {
      const LayerRole& role = c_.roles[static_cast<size_t>(layer)];
      if (role.compress_ratio <= 0) continue;
      if (role.kv_source_layer < 0) {
        p_->Add("layer ", layer, " (compress ratio ", role.compress_ratio,
                ") reads compressed KV but no KV-source layer precedes it");
      } else if (Ratio(role.kv_source_layer) != role.compress_ratio) {
        p_->Add("layer ", layer, " (compress ratio ", role.compress_ratio, ") reads the compressed KV of layer ",
                role.kv_source_layer, ", whose compress ratio is ", Ratio(role.kv_source_layer));
      }
      if (role.index_source_layer < 0) {
        p_->Add("layer ", layer, " (compress ratio ", role.compress_ratio,
                ") reads top-k indices but no index-source layer precedes it (a reuse layer before any index source)");
      }
    }
    if (r_.Usable("candidate_source_layer") && c_.candidate_source_layer >= 0 &&
        c_.candidate_source_layer < c_.num_layers) {
      if (!Contains(c_.index_source_layers, c_.candidate_source_layer)) {
        p_->Add(K("candidate_source_layer"), ": layer ", c_.candidate_source_layer,
                " is not an index source, so it publishes no candidate blocks");
      }
      const std::string feature = K("candidate_source_layer") + " is set";
      NeededFor("candidate_topk_blocks", c_.candidate_topk_blocks, feature);
      NeededFor("candidate_block_size", c_.candidate_block_size, feature);
    }
  }

  void CheckEngram() {
    if (!r_.Usable("engram_layer_ids", "engram_num_embeddings")) return;
    if (c_.engram_num_embeddings.size() != c_.engram_layer_ids.size()) {
      p_->Add(K("engram_num_embeddings"), ": has ", c_.engram_num_embeddings.size(), " entries but ",
              K("engram_layer_ids"), " lists ", c_.engram_layer_ids.size(), " layers (one table per engram layer)");
    }
    for (size_t i = 0; i < c_.engram_num_embeddings.size(); ++i) {
      if (c_.engram_num_embeddings[i] <= 0) {
        p_->Add(K("engram_num_embeddings"), "[", i, "]: must be positive, got ", c_.engram_num_embeddings[i]);
      }
    }
    if (c_.engram_layer_ids.empty()) return;
    const std::string feature = K("engram_layer_ids") + " is not empty";
    NeededFor("engram_n_heads", c_.engram_n_heads, feature);
    NeededFor("engram_head_dim", c_.engram_head_dim, feature);
    NeededFor("engram_vocab_size", c_.engram_vocab_size, feature);
    NeededFor("engram_compressed_vocab_size", c_.engram_compressed_vocab_size, feature);
    if (r_.Usable("engram_max_ngram_size") && c_.engram_max_ngram_size < 2) {
      p_->Add(K("engram_max_ngram_size"), ": must be at least 2 (n-grams of size 2..max) when ", feature, ", got ",
              c_.engram_max_ngram_size);
    }
    if (r_.Usable("engram_head_dim") && c_.engram_head_dim > 0 && c_.engram_head_dim % 32 != 0) {
      p_->Add(K("engram_head_dim"), ": must be a multiple of 32 (one ue8m0 scale per 32 columns), got ",
              c_.engram_head_dim);
    }
    if (r_.Usable("engram_pad_id", "vocab_size") && c_.vocab_size > 0 &&
        (c_.engram_pad_id < 0 || c_.engram_pad_id >= c_.vocab_size)) {
      p_->Add(K("engram_pad_id"), ": token ", c_.engram_pad_id, " is outside the vocabulary [0, ", c_.vocab_size, ")");
    }
  }

  void CheckDSpark() {
    if (!r_.Usable("dspark_block_size") || c_.dspark_block_size == 0) return;
    const std::string feature = K("dspark_block_size") + " > 0";
    if (r_.Usable("num_mtp_layers") && c_.num_mtp_layers < 1) {
      p_->Add(K("num_mtp_layers"), ": must be at least 1 when ", feature, ", got ", c_.num_mtp_layers);
    }
    if (r_.Usable("dspark_target_layer_ids") && c_.dspark_target_layer_ids.empty()) {
      p_->Add(K("dspark_target_layer_ids"), ": must list at least one layer when ", feature);
    }
    Positive("dspark_n_routed_experts", c_.dspark_n_routed_experts);
    Positive("dspark_n_activated_experts", c_.dspark_n_activated_experts);
    if (r_.Usable("dspark_n_routed_experts", "dspark_n_activated_experts") &&
        c_.dspark_n_activated_experts > c_.dspark_n_routed_experts && c_.dspark_n_routed_experts > 0) {
      p_->Add(K("dspark_n_activated_experts"), " (", c_.dspark_n_activated_experts, ") exceeds ",
              K("dspark_n_routed_experts"), " (", c_.dspark_n_routed_experts, ")");
    }
    if (r_.Usable("dspark_noise_token_id", "vocab_size") && c_.vocab_size > 0 &&
        (c_.dspark_noise_token_id < 0 || c_.dspark_noise_token_id >= c_.vocab_size)) {
      p_->Add(K("dspark_noise_token_id"), ": token ", c_.dspark_noise_token_id, " is outside the vocabulary [0, ",
              c_.vocab_size, ")");
    }
  }

  void CheckTokens() {
    if (!r_.Usable("vocab_size") || c_.vocab_size <= 0) return;
    for (const auto& [name, id] : {std::pair<std::string_view, int>{"bos_token_id", c_.bos_token_id},
                                   std::pair<std::string_view, int>{"eos_token_id", c_.eos_token_id}}) {
      if (r_.Usable(name) && (id < 0 || id >= c_.vocab_size)) {
        p_->Add(K(name), ": token ", id, " is outside the vocabulary [0, ", c_.vocab_size, ")");
      }
    }
  }

  void CheckQuantization() {
    if (!r_.Usable("weight_dtype", "expert_dtype", "weight_block_size", "scale_fmt")) return;
    const std::string& weights = c_.weight_dtype;
    const std::string& experts = c_.expert_dtype;
    if (weights != "fp8" && weights != "bf16") {
      p_->Add(K("weight_dtype"), ": expected \"fp8\" or \"bf16\", got \"", weights, "\"");
      return;
    }
    if (experts != "fp4" && experts != "fp8" && experts != "bf16") {
      p_->Add(K("expert_dtype"), ": expected \"fp4\" or \"fp8\", got \"", experts, "\"");
      return;
    }
    if (experts == "bf16" && weights == "fp8") {
      p_->Add(K("expert_dtype"), ": bf16 experts in an fp8 checkpoint are not a V4.1 format (expected fp4 or fp8)");
    }
    if ((weights == "fp8" || experts == "fp8") && c_.weight_block_size != kFp8BlockSize) {
      p_->Add(K("weight_block_size"), ": V4.1 fp8 weights use ", kFp8BlockSize, "x", kFp8BlockSize, " blocks, got ",
              c_.weight_block_size, "x", c_.weight_block_size);
    }
    if ((weights != "bf16" || experts != "bf16") && c_.scale_fmt != "ue8m0") {
      p_->Add(K("scale_fmt"), ": V4.1 quantized weights use \"ue8m0\" scales, got \"", c_.scale_fmt, "\"");
    }
  }

  const ModelConfig& c_;
  const Reader& r_;
  Problems* p_;
};

}  // namespace

ModelConfig ParseModelConfig(std::string_view json_text, const std::string& origin) {
  const Json root = ParseJsonBounded(json_text, origin, kConfigLimits);
  if (!root.is_object()) throw MakeError(origin, ": expected a JSON object at the top level, got ", root.type_name());

  const bool hf = root.contains("text_config");
  if (hf && !root["text_config"].is_object()) {
    throw MakeError(origin, ": text_config: expected an object, got ", root["text_config"].type_name());
  }
  if (!hf && !root.contains("dim") && root.contains("hidden_size")) {
    throw MakeError(origin,
                    ": has hidden_size but neither text_config nor dim: expected the DeepSeek-V4.1 HF "
                    "config (model fields under text_config) or the flat reference inference/config.json");
  }

  const Form form = hf ? Form::kHf : Form::kReference;
  Problems problems;
  Reader reader(form, &problems);
  ModelConfig config = ReferenceDefaults(form);
  config.source = origin;
  if (hf) {
    ReadHfForm(root, &reader, &config);
  } else {
    ReadReferenceForm(root, &reader, &config);
  }
  Finish(reader, &config);
  if (reader.Usable("num_layers")) FillRoles(&config);
  Validator(config, reader, &problems).Run();
  if (!problems.empty()) throw problems.ToError(origin);
  return config;
}

ModelConfig LoadModelConfig(const std::string& model_dir) {
  const ModelDirectory dir(model_dir);
  // Anything at either name counts: a config.json that is a FIFO, a directory or a broken symlink is reported as
  // such, not skipped.
  for (const std::string_view name : {"config.json", "inference/config.json"}) {
    if (std::optional<FileHandle> file = dir.OpenIfPresent(name, "the model config")) {
      return ParseModelConfig(ReadWholeFile(*file, kConfigLimits.max_bytes), file->path());
    }
  }
  throw MakeError(model_dir, ": no model config: neither ", dir.PathOf("config.json"), " nor ",
                  dir.PathOf("inference/config.json"), " exists");
}

}  // namespace deepinfer
