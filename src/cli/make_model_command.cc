#include "cli/make_model_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>

#include "chat/chat_tokens.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "core/error.h"
#include "model/random_checkpoint.h"

namespace deepinfer {
namespace {

// ---------------------------------------------------------------------------------------------
// Flags.

const std::vector<Flag<RandomCheckpointOptions>>& Flags() {
  static const std::vector<Flag<RandomCheckpointOptions>> flags = {
      {"--preset", "NAME", "model family (required): v41-flash-slice (real dims) or tiny",
       [](RandomCheckpointOptions& o, const std::string& v) { o.preset = v; }},
      {"--layers", "L", "backbone layers, 1..40 (required for v41-flash-slice; tiny: 8)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.layers = ParseIntFlagAs<int>("--layers", v); }},
      {"--experts", "E", "routed experts per layer, top-k..384 (required for v41-flash-slice; tiny: 8)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.experts = ParseIntFlagAs<int>("--experts", v); }},
      {"--out", "DIR", "output folder, absent or empty (required)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.out = v; }},
      {"--vocab", "V", "vocabulary rows of embed/head, 3..the tokenizer's size (default: the tokenizer's size)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.vocab = ParseIntFlagAs<int64_t>("--vocab", v); }},
      {"--engram-rows", "R", "rows of each Engram table (default: the prime sums for engram_vocab_size 4000)",
       [](RandomCheckpointOptions& o, const std::string& v) {
         o.engram_rows = ParseIntFlagAs<int64_t>("--engram-rows", v);
       }},
      {"--draft-stages", "N", "DSpark draft stages, the release's head (default 0: none; the release has 3)",
       [](RandomCheckpointOptions& o, const std::string& v) {
         o.draft_stages = ParseIntFlagAs<int>("--draft-stages", v);
       }},
      {"--draft-experts", "E", "routed experts of each DSpark stage (default 128, the release's)",
       [](RandomCheckpointOptions& o, const std::string& v) {
         o.draft_experts = ParseIntFlagAs<int>("--draft-experts", v);
       }},
      {"--seed", "S", "random seed (default 0)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.seed = ParseSeedFlag("--seed", v); }},
      {"--shard-gb", "G", "shard the weights into files of at most G x 10^9 bytes (default 0: one file)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.shard_gb = ParseRealFlag("--shard-gb", v); }},
      {"--threads", "N", "generator threads (default: all cores; at most 4 per hardware thread)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      {"--tokenizer", "FILE", "tokenizer.json to copy into the model (default: the project tokenizer)",
       [](RandomCheckpointOptions& o, const std::string& v) { o.tokenizer = v; }},
  };
  return flags;
}

void PrintHelp(std::ostream& out) {
  out << "usage: deepinfer make-model --preset NAME [--layers L --experts E] --out DIR [flags]\n"
         "writes a random DeepSeek-V4.1 checkpoint in the released layout; presets:\n";
  for (const RandomCheckpointPreset& p : RandomCheckpointPresets()) out << "  " << p.name << ": " << p.summary << "\n";
  PrintFlagHelp(out, Flags());
}

std::string FormatBytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

}  // namespace

RandomCheckpointOptions ParseMakeModelArgs(const std::vector<std::string>& args) {
  RandomCheckpointOptions options;
  ParseFlags("make-model", args, Flags(), options);
  options = WithPresetDefaults(options);
  ValidateRandomCheckpointOptions(options);
  return options;
}

int RunMakeModelCommand(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    PrintHelp(std::cout);
    return 0;
  }
  RandomCheckpointOptions options = ParseMakeModelArgs(args);
  if (options.threads == 0) options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (options.tokenizer.empty()) options.tokenizer = MaterializeProjectTokenizer();
  const RandomCheckpointResult result =
      WriteRandomCheckpoint(options, ReadTokenizerFacts(options.tokenizer, chat_tokens::kImagePlaceholder));
  const ModelConfig& c = result.config;
  const std::vector<std::string> roles = RandomCheckpointLayerRoles(c.num_layers);
  std::cout << "make-model: wrote " << options.out << " (" << options.preset << ", " << c.num_layers << " layers, "
            << c.n_routed_experts << " routed experts, vocab " << c.vocab_size << ")\n";
  for (int i = 0; i < c.num_layers; ++i) {
    std::cout << "  layer " << i << ": " << roles[static_cast<size_t>(i)]
              << (c.roles[static_cast<size_t>(i)].engram_index >= 0 ? " + Engram" : "") << "\n";
  }
  if (!c.engram_layer_ids.empty()) {
    std::cout << "  engram: engram_vocab_size " << c.engram_vocab_size << ", table rows";
    for (const int64_t rows : c.engram_num_embeddings) std::cout << " " << rows;
    std::cout << "\n";
  }
  char rate[64];
  std::snprintf(rate, sizeof(rate), "%.1f s, %.2f GB/s, %d threads", result.seconds,
                static_cast<double>(result.weight_bytes) / 1e9 / std::max(result.seconds, 1e-9), options.threads);
  std::cout << "  weights: " << FormatBytes(result.weight_bytes) << " in " << result.files.size() << " file"
            << (result.files.size() == 1 ? "" : "s") << " (" << rate << ")\n";
  return 0;
}

}  // namespace deepinfer
