// `deepinfer bench`: the model's speed next to this machine's own limits, measured in one run.
#pragma once

#include <string>
#include <vector>

namespace deepinfer {

// deepinfer bench [--model DIR] [--threads N] [--isa scalar|avx2|avx512] [--prefill-tokens N]
//                 [--decode-tokens M] [--batch-sizes 1,4,16] [--warmup K] [--json]
// Measures DRAM read bandwidth and the FLOP peak of the prefill kernels' instruction class
// with the same threads, then prefill (TTFT, FLOP/s, share of peak) and decode at each batch
// size (TPOT, tokens/s, weight bytes per step, GB/s, share of bandwidth). Prints a table;
// with --json also one JSON object on the last line. Returns 0; throws Error on bad flags
// or a model that cannot run.
int RunBenchCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
