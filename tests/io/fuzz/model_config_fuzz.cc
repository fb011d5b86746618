// libFuzzer target: arbitrary text as config.json (either form). Parsing must end in a config or
// one deepinfer::Error naming the file; an accepted config must be within the bounds the rest of
// the engine relies on (so its shape arithmetic cannot overflow).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "../../fuzz_check.h"
#include "core/error.h"
#include "io/model_config.h"

using deepinfer::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  deepinfer::ModelConfig c;
  try {
    c = deepinfer::ParseModelConfig(text, "config.json");
  } catch (const deepinfer::Error& e) {
    FuzzCheck(std::string_view(e.what()).starts_with("config.json: "), "an error that does not name the file");
    FuzzCheck(std::string_view(e.what()).find('\n') == std::string_view::npos, "a multi-line error");
    return 0;
  }
  FuzzCheck(c.roles.size() == static_cast<size_t>(c.num_layers), "one role per layer");
  FuzzCheck(c.num_layers >= 1 && c.num_layers <= 1024, "num_layers out of bounds");
  FuzzCheck(c.vocab_size >= 1 && c.vocab_size <= (int64_t{1} << 24), "vocab_size out of bounds");
  FuzzCheck(c.hidden_size >= 1 && c.hidden_size <= 65536, "hidden_size out of bounds");
  FuzzCheck(c.hc_mult >= 1 && c.hc_mult <= 16, "hc_mult out of bounds");
  FuzzCheck(c.n_routed_experts >= 1 && c.n_routed_experts <= 4096, "n_routed_experts out of bounds");
  FuzzCheck(c.num_experts_per_tok <= c.n_routed_experts, "top-k above the expert count");
  FuzzCheck(c.compress_ratios.size() >= static_cast<size_t>(c.num_layers), "short compress_ratios");
  for (const deepinfer::LayerRole& role : c.roles) {
    FuzzCheck(role.kv_source_layer < c.num_layers && role.index_source_layer < c.num_layers, "role out of range");
  }
  return 0;
}
