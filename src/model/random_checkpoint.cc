#include "model/random_checkpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/numeric.h"
#include "core/progress.h"
#include "io/safetensors_writer.h"
#include "model/engram_hash.h"
#include "model/weights.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian");

namespace fs = std::filesystem;

constexpr int kMaxLayers = 40;
constexpr int kMaxExperts = 384;
constexpr int kEngramLookback = 3;  // n-grams 2..4

// Every number a preset fixes, in one table. What a preset leaves open (layers, routed experts,
// vocabulary, Engram rows) comes from the flags, with the defaults named here.
struct Preset {
  const char* name;
  const char* summary;
  int64_t hidden;
  int64_t moe_intermediate;
  int heads;
  int64_t head_dim;
  int64_t rope_head_dim;
  int64_t q_lora_rank;
  int o_groups;
  int64_t o_lora_rank;
  int window;
  int64_t max_position;
  int64_t yarn_original_max_position;
  int top_k;  // routed experts per token
  int index_heads;
  int64_t index_head_dim;
  int index_topk;
  int candidate_topk_blocks;
  int candidate_block_size;
  int engram_heads;
  int64_t engram_head_dim;
  int64_t engram_vocab;  // engram_vocab_size without --engram-rows
  int default_layers;    // 0: --layers is required
  int default_experts;   // 0: --experts is required
};

constexpr int kDraftTopK = 3;  // routed experts per token in a DSpark stage (the release's)

constexpr Preset kPresets[] = {
    {"v41-flash-slice",
     "the real DeepSeek-V4.1-Flash per-layer dimensions",
     5120,
     2304,
     64,
     512,
     64,
     1280,
     8,
     1024,
     128,
     1048576,
     65536,
     6,
     32,
     128,
     512,
     2048,
     8,
     8,
     256,
     4000,
     0,
     0},
    // The dimensions of the golden model tiny-a, with a vocabulary covering the tokenizer: a model
    // that runs chat text in milliseconds per step (server and chat tests).
    {"tiny", "tiny dimensions (those of the golden model tiny-a), vocabulary = the tokenizer's",
     64,     64,
     4,      64,
     16,     64,
     2,      32,
     16,     4096,
     64,     2,
     16,     32,
     16,     6,
     4,      2,
     32,     1000,
     8,      8},
};

std::string PresetNames() {
  std::string names;
  for (const Preset& p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

const Preset& RequirePreset(const std::string& name) {
  if (name.empty()) throw MakeError("make-model: --preset is required (available: ", PresetNames(), ")");
  const Preset* preset = FindPreset(name);
  if (preset == nullptr) throw MakeError("--preset: unknown preset '", name, "' (available: ", PresetNames(), ")");
  return *preset;
}

// ---------------------------------------------------------------------------------------------
// Layer schedule.

enum class Role { kSwa, kRatio2Source, kRatio2Reuse, kRatio1Candidates, kRatio1Reindex, kRatio1Reuse };

std::vector<Role> Schedule(int layers) {
  switch (layers) {
    case 1:
      return {Role::kRatio1Candidates};
    case 2:
      return {Role::kRatio2Source, Role::kRatio1Candidates};
    case 3:
      return {Role::kRatio2Source, Role::kRatio2Reuse, Role::kRatio1Candidates};
    case 4:
      return {Role::kRatio2Source, Role::kRatio2Reuse, Role::kRatio1Candidates, Role::kRatio1Reindex};
    default:
      break;
  }
  std::vector<Role> roles = {Role::kSwa, Role::kRatio2Source, Role::kRatio2Reuse, Role::kRatio1Candidates};
  for (int i = 4; i < layers; ++i) roles.push_back((i - 4) % 4 == 0 ? Role::kRatio1Reindex : Role::kRatio1Reuse);
  return roles;
}

bool HasEngram(const std::vector<Role>& roles, size_t layer) {
  return roles.size() == 1 || roles[layer] == Role::kSwa || roles[layer] == Role::kRatio2Source;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSwa:
      return "SWA";
    case Role::kRatio2Source:
      return "ratio-2 KV+index source";
    case Role::kRatio2Reuse:
      return "ratio-2 reuse";
    case Role::kRatio1Candidates:
      return "ratio-1 KV+index source, candidate source";
    case Role::kRatio1Reindex:
      return "ratio-1 reindex (candidates)";
    case Role::kRatio1Reuse:
      return "ratio-1 reuse";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Engram table sizes: the reference's prime rule (engram_hash.h), per layer in order with one
// global "used" set, each n-gram's search restarting at engram_vocab_size - 1.

}  // namespace

std::vector<int64_t> EngramPrimeSums(int64_t engram_vocab_size, int tables, int heads) {
  std::vector<int64_t> used;
  std::vector<int64_t> sums;
  for (int t = 0; t < tables; ++t) {
    int64_t sum = 0;
    for (int n = 0; n < kEngramLookback; ++n) {
      int64_t current = engram_vocab_size - 1;
      for (int h = 0; h < heads; ++h) {
        current = NextUnusedPrime(current, used);
        used.push_back(current);
        sum += current;
      }
    }
    sums.push_back(sum);
  }
  return sums;
}

namespace {

// engram_vocab_size and the table rows: the default, or the largest start whose sums fit R.
std::pair<int64_t, std::vector<int64_t>> EngramSizes(const Preset& p, int64_t rows, int tables) {
  if (rows == 0) return {p.engram_vocab, EngramPrimeSums(p.engram_vocab, tables, p.engram_heads)};
  auto fits = [&](int64_t vocab) { return EngramPrimeSums(vocab, tables, p.engram_heads).back() <= rows; };
  if (!fits(1)) {
    throw MakeError("--engram-rows: ", rows, " rows cannot hold the ", kEngramLookback * p.engram_heads,
                    " hash buckets of each of ", tables, " Engram table(s); at least ",
                    EngramPrimeSums(1, tables, p.engram_heads).back(), " are needed");
  }
  int64_t lo = 1, hi = rows;  // fits(lo), and nothing above hi can fit
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return {lo, std::vector<int64_t>(static_cast<size_t>(tables), rows)};
}

// ---------------------------------------------------------------------------------------------
// Random bytes.

uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// wyrand: 64 random bits per multiply, plenty for weights.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    state += 0xA0761D6478BD642FULL;
    const unsigned __int128 t = static_cast<unsigned __int128>(state) * (state ^ 0xE7037ED1A0B428DBULL);
    return static_cast<uint64_t>(t >> 64) ^ static_cast<uint64_t>(t);
  }
};

// Each 64 KiB of a tensor has its own stream, so any chunking or thread count gives the same file.
constexpr uint64_t kStreamBytes = uint64_t{64} << 10;

// Standard normal quantile (Acklam's rational approximation, |relative error| < 1.2e-9).
double NormalQuantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  const double low = 0.02425;
  if (p < low) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - low) return -NormalQuantile(1 - p);
  const double q = p - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// z of the 65536 equiprobable cells: a 16-bit random index draws a near-Gaussian value.
const std::vector<float>& Normal16() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(NormalQuantile((i + 0.5) / 65536.0));
    return t;
  }();
  return table;
}

enum class Gen {
  kNormalBF16,   // bf16 mean + std * z
  kNormalF32,    // f32 mean + std * z, plus `shift` on elements [shift_begin, shift_end)
  kByteTable,    // each byte = table[random byte] (FP8 codes)
  kRandomBytes,  // uniform bytes (packed FP4 codes)
  kConstant,     // every byte = constant (uniform ue8m0 scales)
  kByteRange,    // each byte uniform in [low, low + count) (varied ue8m0 scales)
};

struct Recipe {
  Gen gen = Gen::kRandomBytes;
  float mean = 0, std = 0;
  int64_t shift_begin = 0, shift_end = 0;
  float shift = 0;
  std::shared_ptr<const std::vector<uint16_t>> bf16;
  std::array<uint8_t, 256> table{};
  uint8_t constant = 0;
  uint8_t low = 0, count = 1;
};

void FillStream(const Recipe& r, Rng& rng, uint64_t tensor_offset, uint8_t* out, size_t n) {
  switch (r.gen) {
    case Gen::kRandomBytes:
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t bits = rng.Next();
        std::memcpy(out + i, &bits, std::min<size_t>(8, n - i));
      }
      return;
    case Gen::kByteTable:
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t bits = rng.Next();
        const size_t m = std::min<size_t>(8, n - i);
        for (size_t k = 0; k < m; ++k) out[i + k] = r.table[(bits >> (8 * k)) & 0xFF];
      }
      return;
    case Gen::kNormalBF16: {
      const uint16_t* table = r.bf16->data();
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t bits = rng.Next();
        uint16_t v[4];
        for (int k = 0; k < 4; ++k) v[k] = table[(bits >> (16 * k)) & 0xFFFF];
        std::memcpy(out + i, v, std::min<size_t>(8, n - i));
      }
      return;
    }
    case Gen::kNormalF32: {
      const std::vector<float>& z = Normal16();
      uint64_t bits = 0;
      for (size_t i = 0, k = 0; i < n; i += 4, ++k) {
        if (k % 4 == 0) bits = rng.Next();
        float value = r.mean + r.std * z[(bits >> (16 * (k % 4))) & 0xFFFF];
        const int64_t element = static_cast<int64_t>((tensor_offset + i) / 4);
        if (element >= r.shift_begin && element < r.shift_end) value += r.shift;
        std::memcpy(out + i, &value, 4);
      }
      return;
    }
    case Gen::kConstant:
      std::memset(out, r.constant, n);
      return;
    case Gen::kByteRange:
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t bits = rng.Next();
        const size_t m = std::min<size_t>(8, n - i);
        for (size_t k = 0; k < m; ++k) {
          out[i + k] = static_cast<uint8_t>(r.low + ((((bits >> (8 * k)) & 0xFF) * r.count) >> 8));
        }
      }
      return;
  }
}

// Builds the tensor list and how to fill each tensor, from the loader's own inventory.
class WeightPlan {
 public:
  explicit WeightPlan(const ModelConfig& c) : c_(c) {
    ForEachExpectedTensor(c, [&](const ExpectedTensor& t) {
      Add(t);
      return true;
    });
  }

  const std::vector<TensorSpec>& specs() const { return specs_; }

  void Fill(uint64_t seed, size_t index, uint64_t offset, std::span<uint8_t> out) const {
    DI_CHECK(offset % kStreamBytes == 0, "chunks must start on a stream boundary, got offset ", offset);
    const Recipe& recipe = recipes_[index];
    for (size_t pos = 0; pos < out.size(); pos += kStreamBytes) {
      const uint64_t stream = (offset + pos) / kStreamBytes;
      Rng rng{Mix64(seed ^ Mix64(index * 0x100000001B3ULL + 1) ^ Mix64(stream + 0x5DEECE66DULL))};
      FillStream(recipe, rng, offset + pos, out.data() + pos, std::min<size_t>(kStreamBytes, out.size() - pos));
    }
  }

 private:
  void Push(std::string name, DType dtype, std::vector<int64_t> shape, Recipe recipe) {
    specs_.push_back({std::move(name), dtype, std::move(shape)});
    recipes_.push_back(std::move(recipe));
  }

  std::shared_ptr<const std::vector<uint16_t>> BF16Table(float mean, float std) {
    auto& slot = bf16_tables_[{mean, std}];
    if (!slot) {
      auto table = std::make_shared<std::vector<uint16_t>>(65536);
      const std::vector<float>& z = Normal16();
      for (size_t i = 0; i < z.size(); ++i) (*table)[i] = FloatToBF16(mean + std * z[i]);
      slot = std::move(table);
    }
    return slot;
  }

  Recipe NormalBF16(float mean, float std) {
    Recipe r;
    r.gen = Gen::kNormalBF16;
    r.bf16 = BF16Table(mean, std);
    return r;
  }
  static Recipe NormalF32(float mean, float std) {
    Recipe r;
    r.gen = Gen::kNormalF32;
    r.mean = mean;
    r.std = std;
    return r;
  }
  static Recipe Constant(uint8_t byte) {
    Recipe r;
    r.gen = Gen::kConstant;
    r.constant = byte;
    return r;
  }

  // FP8 codes whose values, times 2^s, have standard deviation `std`: the code table is the
  // 256-quantile Gaussian times c = std / 2^s in [64, 128) (max |code| ~ 370 < 448).
  static std::pair<Recipe, uint8_t> FP8Codes(double std) {
    const int s = static_cast<int>(std::floor(std::log2(std / 64.0)));
    const double c = std / std::ldexp(1.0, s);
    Recipe r;
    r.gen = Gen::kByteTable;
    for (int k = 0; k < 256; ++k) r.table[k] = FloatToE4M3(static_cast<float>(c * NormalQuantile((k + 0.5) / 256.0)));
    return {r, ScaleByte(s)};
  }

  static uint8_t ScaleByte(int exponent) {
    DI_CHECK(exponent > -127 && exponent < 128, "scale exponent ", exponent, " out of the ue8m0 range");
    return static_cast<uint8_t>(127 + exponent);
  }

  // The std of a weight relative to 1/sqrt(fan_in), as in make_tiny_models.py.
  static double Gain(TensorSlot slot) {
    switch (slot) {
      case TensorSlot::kExpertW1:  // routed and shared experts
      case TensorSlot::kExpertW3:
      case TensorSlot::kSharedW1:
      case TensorSlot::kSharedW3:
      case TensorSlot::kWqB:
        return 2.0;
      case TensorSlot::kExpertW2:
      case TensorSlot::kSharedW2:
        return 0.5;
      case TensorSlot::kWoB:
        return 0.6;
      default:
        return 1.0;
    }
  }

  void Add(const ExpectedTensor& t) {
    const std::string& n = t.name;
    const double fan_in = t.shape.size() == 2 ? static_cast<double>(t.shape[1]) : 1.0;
    const float matrix_std = static_cast<float>(Gain(t.slot) / std::sqrt(fan_in));
    switch (t.kind) {
      case TensorKind::kVector:
        switch (t.slot) {
          case TensorSlot::kHcAttnBase:
          case TensorSlot::kHcFfnBase: {
            // pre ~ sigmoid(N(0, .5)); post ~ 2 sigmoid(-1 + N(0, .5)) ~ 0.54; comb logits N(0, .5).
            Recipe r = NormalF32(0.0f, 0.5f);
            r.shift_begin = c_.hc_mult;
            r.shift_end = 2 * c_.hc_mult;
            r.shift = -1.0f;
            Push(n, DType::kF32, t.shape, r);
            return;
          }
          case TensorSlot::kHcAttnScale:
          case TensorSlot::kHcFfnScale:
            Push(n, DType::kF32, t.shape, NormalF32(1.0f, 0.1f));
            return;
          case TensorSlot::kAttnSink:
            Push(n, DType::kF32, t.shape, NormalF32(0.0f, 1.0f));
            return;
          case TensorSlot::kGateBias:
            Push(n, DType::kF32, t.shape, NormalF32(0.0f, 0.1f));
            return;
          default:  // every norm weight
            Push(n, DType::kBF16, t.shape, NormalBF16(1.0f, 0.1f));
            return;
        }
      case TensorKind::kDenseMatrix:
        switch (t.slot) {
          case TensorSlot::kEmbed:
            Push(n, DType::kBF16, t.shape, NormalBF16(0.0f, 16.0f));  // the residual stream's scale
            return;
          case TensorSlot::kHead:
            Push(n, DType::kBF16, t.shape, NormalBF16(0.0f, static_cast<float>(0.5 / std::sqrt(fan_in))));
            return;
          case TensorSlot::kEngramQ:
          case TensorSlot::kEngramK:
            Push(n, DType::kBF16, t.shape, NormalBF16(1.0f, 0.5f));
            return;
          default:
            Push(n, DType::kBF16, t.shape, NormalBF16(0.0f, matrix_std));
            return;
        }
      case TensorKind::kF32Matrix:  // hc_*_fn: small, so the mixes start near their bases
        Push(n, DType::kF32, t.shape, NormalF32(0.0f, static_cast<float>(1.0 / std::sqrt(fan_in))));
        return;
      case TensorKind::kFP8Matrix: {
        auto [codes, scale] = FP8Codes(matrix_std);
        Push(n, DType::kF8E4M3, t.shape, codes);
        Push(ScaleName(n), DType::kF8E8M0, {(t.shape[0] + 31) / 32, (t.shape[1] + 31) / 32}, Constant(scale));
        return;
      }
      case TensorKind::kFP4Matrix: {
        // Uniform e2m1 codes: values {0, .5, 1, 1.5, 2, 3, 4, 6} x sign, rms sqrt(68.5 / 8).
        const double code_std = std::sqrt(68.5 / 8.0);
        const int s = static_cast<int>(std::lround(std::log2(matrix_std / code_std)));
        Recipe codes;
        codes.gen = Gen::kRandomBytes;
        Push(n, DType::kI8, {t.shape[0], t.shape[1] / 2}, codes);
        Push(ScaleName(n), DType::kF8E8M0, {t.shape[0], t.shape[1] / 32}, Constant(ScaleByte(s)));
        return;
      }
      case TensorKind::kEngramTable: {
        // Codes ~ N(0, 64), one scale per row per 32 columns in 2^-11 .. 2^-2: rows of rms ~6,
        // each scale really different.
        Push(n, DType::kF8E4M3, t.shape, FP8Codes(64.0).first);
        Recipe scales;
        scales.gen = Gen::kByteRange;
        scales.low = 116;
        scales.count = 10;
        Push(ScaleName(n), DType::kF8E8M0, {t.shape[0], t.shape[1] / 32}, scales);
        return;
      }
    }
  }

  const ModelConfig& c_;
  std::vector<TensorSpec> specs_;
  std::vector<Recipe> recipes_;
  std::map<std::pair<float, float>, std::shared_ptr<const std::vector<uint16_t>>> bf16_tables_;
};

}  // namespace

void ValidateRandomCheckpointOptions(const RandomCheckpointOptions& o) {
  const Preset& p = RequirePreset(o.preset);
  if (o.out.empty()) throw MakeError("make-model: --out DIR is required");
  if (o.layers < 1 || o.layers > kMaxLayers) {
    throw MakeError("--layers: expected 1..", kMaxLayers, " (the released backbone has 40), got ", o.layers,
                    o.layers == 0 ? " (--layers is required)" : "");
  }
  if (o.experts < p.top_k || o.experts > kMaxExperts) {
    throw MakeError("--experts: expected ", p.top_k, "..", kMaxExperts, " (each token uses the top ", p.top_k,
                    " routed experts), got ", o.experts, o.experts == 0 ? " (--experts is required)" : "");
  }
  if (o.vocab < 0) throw MakeError("--vocab: must be positive, got ", o.vocab);
  if (o.engram_rows < 0) throw MakeError("--engram-rows: must be positive, got ", o.engram_rows);
  if (o.shard_gb < 0) throw MakeError("--shard-gb: must not be negative, got ", o.shard_gb);
  if (o.threads < 0) throw MakeError("--threads: must not be negative, got ", o.threads);
  if (o.draft_stages < 0 || o.draft_stages > 16) {
    throw MakeError("--draft-stages: expected 0..16 (the release has 3), got ", o.draft_stages);
  }
  if (o.draft_experts != 0 && (o.draft_experts < kDraftTopK || o.draft_experts > kMaxExperts)) {
    throw MakeError("--draft-experts: expected ", kDraftTopK, "..", kMaxExperts, ", got ", o.draft_experts);
  }
  if (o.draft_experts != 0 && o.draft_stages == 0) throw MakeError("--draft-experts needs --draft-stages");
}

std::vector<RandomCheckpointPreset> RandomCheckpointPresets() {
  std::vector<RandomCheckpointPreset> presets;
  for (const Preset& p : kPresets) presets.push_back({p.name, p.summary});
  return presets;
}

std::vector<std::string> RandomCheckpointLayerRoles(int layers) {
  std::vector<std::string> names;
  for (const Role role : Schedule(layers)) names.push_back(RoleName(role));
  return names;
}

RandomCheckpointOptions WithPresetDefaults(RandomCheckpointOptions o) {
  if (const Preset* p = FindPreset(o.preset)) {
    if (o.layers == 0) o.layers = p->default_layers;
    if (o.experts == 0) o.experts = p->default_experts;
  }
  return o;
}

TokenizerFacts ReadTokenizerFacts(const std::string& path, std::string_view image_placeholder) {
  const Tokenizer tokenizer = Tokenizer::FromFile(path);
  TokenizerFacts facts;
  facts.size = static_cast<int64_t>(tokenizer.size());
  facts.engram_compressed_vocab = BuildEngramTokenMap(tokenizer).compressed_vocab_size;
  facts.image_token_id = tokenizer.TokenToId(image_placeholder);
  return facts;
}

std::string RandomCheckpointConfigJson(const RandomCheckpointOptions& options, const TokenizerFacts& tokenizer) {
  const RandomCheckpointOptions o = WithPresetDefaults(options);
  ValidateRandomCheckpointOptions(o);
  const Preset& p = RequirePreset(o.preset);
  const int64_t vocab = o.vocab == 0 ? tokenizer.size : o.vocab;
  if (vocab < 3 || vocab > tokenizer.size) {
    throw MakeError("--vocab: expected 3..", tokenizer.size,
                    " (ids 0..2 are bos, eos and the Engram pad; the Engram token map covers the tokenizer's ",
                    tokenizer.size, " ids), got ", vocab);
  }
  const std::vector<Role> roles = Schedule(o.layers);
  std::vector<int> ratios, kv_sources, index_sources, engram_layers;
  int candidate_source = -1;
  for (int i = 0; i < o.layers; ++i) {
    const Role role = roles[static_cast<size_t>(i)];
    ratios.push_back(role == Role::kSwa ? 0 : (role == Role::kRatio2Source || role == Role::kRatio2Reuse) ? 2 : 1);
    if (role == Role::kRatio2Source || role == Role::kRatio1Candidates) kv_sources.push_back(i);
    if (role == Role::kRatio2Source || role == Role::kRatio1Candidates || role == Role::kRatio1Reindex) {
      index_sources.push_back(i);
    }
    if (role == Role::kRatio1Candidates) candidate_source = i;
    if (HasEngram(roles, static_cast<size_t>(i))) engram_layers.push_back(i);
  }
  const auto [engram_vocab, engram_rows] = EngramSizes(p, o.engram_rows, static_cast<int>(engram_layers.size()));

  using Json = nlohmann::ordered_json;
  Json text = {
      {"model_type", "deepseek_v41_text"},
      {"vocab_size", vocab},
      {"hidden_size", p.hidden},
      {"moe_intermediate_size", p.moe_intermediate},
      {"num_hidden_layers", o.layers},
      {"num_nextn_predict_layers", 0},
      {"num_attention_heads", p.heads},
      {"num_key_value_heads", 1},
      {"head_dim", p.head_dim},
      {"qk_rope_head_dim", p.rope_head_dim},
      {"q_lora_rank", p.q_lora_rank},
      {"o_groups", p.o_groups},
      {"o_lora_rank", p.o_lora_rank},
      {"rms_norm_eps", 1e-20},
      {"sliding_window", p.window},
      {"max_position_embeddings", p.max_position},
      {"rope_theta", 10000.0},
      {"compress_rope_theta", 160000.0},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 16.0},
        {"original_max_position_embeddings", p.yarn_original_max_position},
        {"beta_fast", 32},
        {"beta_slow", 1}}},
      {"n_routed_experts", o.experts},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", p.top_k},
      {"scoring_func", "sqrtsoftplus"},
      {"topk_method", "noaux_tc"},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5},
      {"swiglu_limit", 10.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", false},
      {"compress_ratios", ratios},
      {"kv_source_layer_ids", kv_sources},
      {"index_source_layer_ids", index_sources},
      {"index_n_heads", p.index_heads},
      {"index_head_dim", p.index_head_dim},
      {"index_topk", p.index_topk},
      {"candidate_source_layer_id", candidate_source},
      {"candidate_topk_blocks", p.candidate_topk_blocks},
      {"candidate_block_size", p.candidate_block_size},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
      {"engram_layer_ids", engram_layers},
      {"engram_num_embeddings", engram_rows},
      {"engram_max_ngram_size", kEngramLookback + 1},
      {"engram_vocab_size", engram_vocab},
      {"engram_n_heads", p.engram_heads},
      {"engram_head_dim", p.engram_head_dim},
      {"engram_pad_token_id", 2},
      {"engram_compressed_vocab_size", tokenizer.engram_compressed_vocab},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
  };
  Json root = {
      {"architectures", {"DeepseekV41ForCausalLM"}},
      {"model_type", "deepseek_v41"},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
  };
  if (tokenizer.image_token_id && *tokenizer.image_token_id < vocab) root["image_token_id"] = *tokenizer.image_token_id;
  root["text_config"] = std::move(text);
  root["quantization_config"] = {{"quant_method", "fp8"},
                                 {"activation_scheme", "dynamic"},
                                 {"weight_block_size", {32, 32}},
                                 {"scale_fmt", "ue8m0"},
                                 {"expert_dtype", "fp4"}};
  if (o.draft_stages > 0) {
    // The release's DSpark head; its taps from up to 3 layers spread over the backbone.
    std::vector<int> targets;
    const int taps = std::min(3, o.layers);
    for (int k = 0; k < taps; ++k) targets.push_back(taps == 1 ? 0 : k * (o.layers - 1) / (taps - 1));
    Json& t = root["text_config"];
    t["num_nextn_predict_layers"] = o.draft_stages;
    for (int k = 0; k < o.draft_stages; ++k) t["compress_ratios"].push_back(0);
    t["dspark_block_size"] = 5;
    t["dspark_noise_token_id"] = std::min<int64_t>(128799, vocab - 1);
    t["dspark_target_layer_ids"] = targets;
    t["dspark_markov_rank"] = 256;
    t["dspark_n_routed_experts"] = o.draft_experts == 0 ? 128 : o.draft_experts;
    t["dspark_num_experts_per_tok"] = kDraftTopK;
  }
  root["deepinfer_make_model"] = {{"preset", o.preset},
                                  {"layers", o.layers},
                                  {"experts", o.experts},
                                  {"vocab", vocab},
                                  {"draft_stages", o.draft_stages},
                                  {"seed", o.seed}};
  const std::string json = root.dump(1) + "\n";
  (void)ParseModelConfig(json, "make-model " + o.preset + " config");  // throws if the rule ever breaks
  return json;
}

RandomCheckpointResult WriteRandomCheckpoint(const RandomCheckpointOptions& requested,
                                             const TokenizerFacts& tokenizer_facts) {
  const auto start = std::chrono::steady_clock::now();
  const RandomCheckpointOptions options = WithPresetDefaults(requested);
  ValidateRandomCheckpointOptions(options);
  std::error_code ec;
  const std::string& tokenizer = options.tokenizer;
  if (tokenizer.empty()) throw MakeError("make-model: the tokenizer.json to copy into ", options.out, " is required");
  const std::string config_json = RandomCheckpointConfigJson(options, tokenizer_facts);
  const fs::path out(options.out);
  const fs::path config_path = out / "config.json";
  RandomCheckpointResult result;
  result.config = ParseModelConfig(config_json, config_path.string());

  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) throw MakeError(options.out, ": exists and is not a folder");
    if (!fs::is_empty(out, ec)) {
      throw MakeError(options.out, ": the folder is not empty; make-model writes only into a new or empty folder");
    }
  } else if (!fs::create_directories(out, ec) || ec) {
    throw MakeError(options.out, ": cannot create the folder: ", ec.message());
  }

  const WeightPlan plan(result.config);
  const uint64_t shard_bytes = static_cast<uint64_t>(std::llround(options.shard_gb * 1e9));
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"generator", "deepinfer make-model --preset " + options.preset + " --layers " + std::to_string(options.layers) +
                        " --experts " + std::to_string(options.experts) + " --vocab " +
                        std::to_string(result.config.vocab_size) + " --seed " + std::to_string(options.seed)}};
  const uint64_t seed = options.seed;
  uint64_t total = 0;
  for (const TensorSpec& spec : plan.specs()) total += spec.nbytes();
  ProgressBar bar("make-model", total);
  const CheckpointFiles files = WriteSafetensorsCheckpoint(
      options.out, plan.specs(),
      [&](size_t index, const TensorSpec&, uint64_t offset, std::span<uint8_t> bytes) {
        plan.Fill(seed, index, offset, bytes);
        bar.Add(bytes.size());
      },
      shard_bytes, metadata, options.threads);
  bar.Finish();

  fs::copy_file(tokenizer, out / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
  if (ec) throw MakeError(tokenizer, ": cannot copy to ", (out / "tokenizer.json").string(), ": ", ec.message());
  {
    std::ofstream file(config_path, std::ios::binary | std::ios::trunc);
    file << config_json;
    file.close();
    if (!file) throw MakeError(config_path.string(), ": write failed");
  }
  result.files = files.files;
  result.weight_bytes = files.total_bytes;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace deepinfer
