#include "cli/inspect_command.h"

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/default_model.h"
#include "cli/flags.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace deepinfer {
namespace {

// inspect spells out this many tensor problems and counts the rest.
constexpr size_t kInspectListedProblems = 50;

}  // namespace

int RunInspectCommand(const std::vector<std::string>& args) {
  static const std::vector<Flag<std::string>> flags = {
      {"--model", "DIR", kModelFlagHelp, [](std::string& model, const std::string& v) { model = v; }},
  };
  if (WantsHelp(args)) {
    std::cout << "usage: deepinfer inspect [flags]\n";
    PrintFlagHelp(std::cout, flags);
    return 0;
  }
  std::string model;
  ParseFlags("inspect", args, flags, model);
  const std::string model_dir = ModelDirOrDefault(model);
  const ModelConfig c = LoadModelConfig(model_dir);
  std::printf("model: %s\nconfig: %s\n", model_dir.c_str(), c.source.c_str());
  std::printf(
      "vocab %lld, hidden %lld, layers %d (+%d DSpark), heads %d x %lld (rope %lld), q_lora %lld, "
      "o_groups %d x %lld, window %d\n",
      static_cast<long long>(c.vocab_size), static_cast<long long>(c.hidden_size), c.num_layers, c.num_mtp_layers,
      c.num_heads, static_cast<long long>(c.head_dim), static_cast<long long>(c.rope_head_dim),
      static_cast<long long>(c.q_lora_rank), c.o_groups, static_cast<long long>(c.o_lora_rank), c.window_size);
  std::printf("experts %d routed (top %d, %s, scale %.3g) + %d shared, width %lld; hc %d; weights %s, experts %s\n",
              c.n_routed_experts, c.num_experts_per_tok, c.scoring_func.c_str(), c.routed_scaling_factor,
              c.n_shared_experts, static_cast<long long>(c.moe_intermediate_size), c.hc_mult, c.weight_dtype.c_str(),
              c.expert_dtype.c_str());
  std::printf("indexer %d heads x %lld, top-k %d; candidates: source %d, %d blocks of %d\n", c.index_n_heads,
              static_cast<long long>(c.index_head_dim), c.index_topk, c.candidate_source_layer, c.candidate_topk_blocks,
              c.candidate_block_size);
  std::printf("\nlayer ratio role                           kv-from index-from extras\n");
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerRole& r = c.roles[i];
    std::string role = r.compress_ratio == 0 ? "sliding window"
                       : r.kv_source         ? "KV source (compressor, index keys)"
                       : r.index_source      ? "reindex"
                                             : "reuse";
    if (r.index_source && r.kv_source) role += " + index";
    if (r.candidate_source) role += " + candidates";
    if (r.uses_candidates) role += " (candidate-constrained)";
    std::printf("%5d %5d %-30s %7d %10d %s\n", i, r.compress_ratio, role.c_str(), r.kv_source_layer,
                r.index_source_layer, r.engram_index >= 0 ? "engram" : "");
  }
  const Checkpoint checkpoint = Checkpoint::Open(model_dir);
  std::printf("\ntensors (%zu):\n", checkpoint.size());
  for (const std::string& name : checkpoint.Names()) {
    const TensorInfo* t = checkpoint.Find(name);
    std::printf("  %-60s %-8s %-16s %s\n", name.c_str(), std::string(DTypeName(t->dtype)).c_str(),
                t->ShapeString().c_str(), std::filesystem::path(t->file).filename().c_str());
  }
  const TensorProblems problems = CheckTensors(c, checkpoint, kInspectListedProblems);
  if (problems.empty()) {
    std::printf("\nvalidation: OK (every tensor the config implies is present with the expected dtype and shape)\n");
    return 0;
  }
  std::printf("\nvalidation: %s%zu problem(s)\n", problems.complete ? "" : "at least ", problems.count);
  for (const std::string& p : problems.listed) std::printf("  %s\n", p.c_str());
  if (problems.count > problems.listed.size()) {
    std::printf("  ... and %s%zu more\n", problems.complete ? "" : "at least ",
                problems.count - problems.listed.size());
  }
  return 1;
}

}  // namespace deepinfer
