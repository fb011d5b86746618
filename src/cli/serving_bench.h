// `deepinfer bench --serving` and `deepinfer bench --context-sweep`: the serving engine
// (src/engine/engine.h) measured end to end, next to the kernel-level `deepinfer bench`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

// True when `args` select one of the modes below (they contain --serving or --context-sweep).
bool IsServingBench(const std::vector<std::string>& args);

// deepinfer bench --serving [--num-requests N] [--input-len I] [--output-len O] [--model DIR]
//                 [--threads T] [--isa LEVEL] [--max-step-tokens B] [--max-running R]
//                 [--kv-cache-memory BYTES] [--no-prefix-cache] [--shared-prefix-len P]
//                 [--request-rate R] [--temperature T] [--seed S] [--json]
// N seeded random prompts of I tokens (the first P shared), each generating exactly O tokens,
// arriving all at once or as a seeded Poisson process, driven through one Engine on this
// thread. Reports TTFT / TPOT / end-to-end latency (mean, p50, p99), throughput, request
// outcomes, steps, preemptions, prefix-cache hits and KV memory.
//
// deepinfer bench --context-sweep [--contexts 256,1024,2048] [--max-model-len-list 2048,4096]
//                 [--decode-steps D] [--warmup-steps W] [--model DIR] [--threads T] [--isa LEVEL]
//                 [--json]
// For each maximum context L (the model loaded with ModelOptions::max_context = L) and each
// context length C, an Engine whose buckets are the given contexts prefills one request so
// that its D timed decode steps end exactly at position C, and reports the mean step time and
// the steps' context bucket.
//
// Both print a table; with --json also one JSON object on the last line. Return 0; throw
// Error (one line, naming the flag) on bad flags.
int RunServingBench(const std::vector<std::string>& args);

// "4096", "64M", "2G", "1.5GiB" -> bytes (binary multiples K/M/G/T, optional "B"/"iB"); the
// flag is named in errors.
uint64_t ParseByteSize(const std::string& flag, const std::string& text);

}  // namespace deepinfer
