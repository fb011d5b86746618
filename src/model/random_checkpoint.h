// Random DeepSeek-V4.1 checkpoints in the released layout (what `deepinfer make-model` writes):
// with the real V4.1-Flash per-layer dimensions, for benchmarks and load tests at full size
// without the 763B-parameter release, or tiny, for tests that need a vocabulary covering the
// tokenizer. The tensors are those of the inventory (model/weights.h ForEachExpectedTensor).
//
// The presets' numbers live in one table (kPresets in random_checkpoint.cc). The vocabulary
// defaults to the tokenizer's size and engram_compressed_vocab_size is computed from the
// tokenizer, so any tokenizer.json gives a consistent model. Errors name each option as the
// make-model flag spells it (--layers, --vocab, ...).
//
// Preset tiny: the dimensions of the golden model tiny-a (hidden 64, 4 heads x 64 with 16 rope
// dims, q_lora 64, 2 o-groups x 32, window 16, 8 routed experts 64 wide, top-2, indexer 16 x 32
// top-16, candidates 6 blocks x 4, Engram 2 heads x 32, max context 4096, YaRN from 64).
//
// Preset v41-flash-slice: every per-layer shape, dtype and storage format is the release's
// (hidden 5120; 64 heads x 512 with 64 rope dims; q_lora 1280; 8 o-groups x o_lora 1024;
// window 128; routed experts 2304 wide as packed FP4 (I8) + per-row-per-32 ue8m0 scales,
// top-6 of E plus one FP8 shared expert; FP8 e4m3 linears with 32x32 ue8m0 scales; indexer
// 32 heads x 128, top-512; candidates 2048 blocks x 8; hc 4; norm_eps 1e-20; RoPE 10000 /
// compressed 160000 with YaRN x16 from 65536; Engram 8 heads x 256, 2..4-grams, compressed
// vocab 99092), written in the released HF config.json form with quantization_config.
// What is cut: the layer count, the routed expert count, optionally the vocabulary and the Engram
// table rows. DSpark (MTP) stages only with --draft-stages N: the release's head (block 5, Markov
// rank 256, window-only stages with --draft-experts routed experts, default 128, top-3, noise id
// 128799 or the last id of a smaller vocabulary), its taps from up to 3 layers spread over the
// backbone (the first, the middle, the last).
//
// Layer schedule (the roles of spec section 1.2), for L layers:
//   L >= 5: 0 SWA + Engram, 1 ratio-2 KV+index source + Engram, 2 ratio-2 reuse,
//           3 ratio-1 KV+index source + candidate source, then for i >= 4: ratio-1 reindex
//           (an index source filtered by the candidates) when (i - 4) % 4 == 0, else ratio-1
//           reuse, the released model's 1-in-4 pattern (L = 6: ..., 4 reindex, 5 reuse).
//   L = 4: ratio-2 source + Engram, ratio-2 reuse, ratio-1 source + candidates, reindex.
//   L = 3: ratio-2 source + Engram, ratio-2 reuse, ratio-1 source + candidates.
//   L = 2: ratio-2 source + Engram, ratio-1 source + candidates.
//   L = 1: ratio-1 source + candidates + Engram.
// I.e. the first L of the roles [ratio-1 source+candidates, ratio-2 source, ratio-2 reuse,
// reindex, SWA, ratio-1 reuse] in layer order; Engram sits on the SWA layer and the ratio-2
// source (the release's layers 1 and 14), or on the only layer when L = 1.
//
// Engram tables: without --engram-rows, engram_vocab_size is 4000 and each table has exactly
// the sum of its 24 primes as rows (~98.6k rows, 25 MB), as in the release; with R rows, both
// tables have R rows and engram_vocab_size is the largest prime-search start whose prime sums
// fit R. tokenizer.json (needed for the Engram token map) is copied into the model.
//
// Weights are random with the statistics of tools/golden/make_tiny_models.py, scaled to the
// real fan-ins: embedding std 16, norms ~1, hc_fn std 1/sqrt(hc*D), FP8 codes drawn from a
// Gaussian quantile table with one power-of-two scale per 32x32 block giving std
// k/sqrt(fan_in), random FP4 codes with per-32 scales. Bytes come from a counter-seeded PRNG
// per 64 KiB of each tensor, so the files depend only on the seed (not on the thread count).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/model_config.h"

namespace deepinfer {

struct RandomCheckpointOptions {
  std::string preset;
  int layers = 0;
  int experts = 0;
  std::string out;
  int64_t vocab = 0;        // 0: the tokenizer's size
  int64_t engram_rows = 0;  // 0: the exact prime sums for engram_vocab_size 4000
  int draft_stages = 0;     // DSpark stages (0: none)
  int draft_experts = 0;    // routed experts of each stage (0: 128, the release's; at most --experts' bound)
  uint64_t seed = 0;
  double shard_gb = 0;    // 0: one model.safetensors; else shards of at most G * 10^9 bytes
  int threads = 0;        // 0: one per hardware thread
  std::string tokenizer;  // tokenizer.json to copy into the model (required to write one)
};

struct RandomCheckpointResult {
  ModelConfig config;
  std::vector<std::string> files;  // safetensors files
  uint64_t weight_bytes = 0;       // tensor data bytes
  double seconds = 0;
};

// Rows of each Engram table under the reference's prime rule: per table, the sum of its
// (n-gram, head) primes drawn above engram_vocab_size - 1 from one global "used" set.
std::vector<int64_t> EngramPrimeSums(int64_t engram_vocab_size, int tables, int heads);

// What the config takes from the tokenizer.json the model ships with.
struct TokenizerFacts {
  int64_t size = 0;                     // ids (the largest vocabulary the model may have)
  int64_t engram_compressed_vocab = 0;  // of its Engram compressed token map
  std::optional<int32_t> image_token_id;
};
// image_token_id is the id of `image_placeholder` (the chat format's image token), when the
// tokenizer has it.
TokenizerFacts ReadTokenizerFacts(const std::string& path, std::string_view image_placeholder);

// The presets, for help texts.
struct RandomCheckpointPreset {
  std::string name;
  std::string summary;
};
std::vector<RandomCheckpointPreset> RandomCheckpointPresets();

// The role of each of `layers` layers under the layer schedule above, in words.
std::vector<std::string> RandomCheckpointLayerRoles(int layers);

// Throws Error on a bad option (after WithPresetDefaults); the vocabulary is checked against the
// tokenizer by RandomCheckpointConfigJson.
void ValidateRandomCheckpointOptions(const RandomCheckpointOptions& options);

// The preset's defaults for what the options leave at 0 (layers, experts).
RandomCheckpointOptions WithPresetDefaults(RandomCheckpointOptions options);

// The HF config.json text (validated with ParseModelConfig before it is returned).
std::string RandomCheckpointConfigJson(const RandomCheckpointOptions& options, const TokenizerFacts& tokenizer);

// Writes the model into options.out (created; must be empty or absent): the safetensors,
// options.tokenizer copied as tokenizer.json, then config.json last, so an interrupted run never
// looks loadable. `tokenizer` is ReadTokenizerFacts of options.tokenizer. Threads: options.threads,
// 0 for one per hardware thread.
RandomCheckpointResult WriteRandomCheckpoint(const RandomCheckpointOptions& options, const TokenizerFacts& tokenizer);

}  // namespace deepinfer
