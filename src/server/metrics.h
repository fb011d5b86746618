// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4).
//
// Counters and histograms are recorded here as things happen; gauges (running, waiting, KV
// memory, prefix cache) and the engine's own counters (steps, preemptions, prefix-cache hits)
// are read from a LoopStats snapshot when the text is rendered.
//
// What is counted per choice: one engine request per choice (n > 1 or a batch of completion
// prompts make several), by the engine's finish reason: "stop" (EOS, a stop token or a stop
// string; tool calls end this way), "length" (max_tokens or the context), "abort" (the client
// went away, or shutdown), "error". Prompt tokens are counted once per choice.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/stop_conditions.h"
#include "server/engine_loop.h"

namespace deepinfer {

// Cumulative buckets as Prometheus wants them (upper bounds, +Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  void Render(std::string& out, std::string_view name, std::string_view help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// One finished choice, as the loop saw it.
struct FinishedChoice {
  FinishReason reason = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  std::optional<double> ttft_s;  // arrival to first token (none if no token came)
  std::optional<double> tpot_s;  // mean time between tokens after the first (needs >= 2 tokens)
  double e2e_s = 0.0;            // arrival to finish
};

class Metrics {
 public:
  Metrics();

  void RecordFinished(const FinishedChoice& choice);
  // One HTTP response (its status) on a route ("/v1/chat/completions", ...; "other" for 404s).
  void RecordHttp(std::string_view route, int status);
  // A client closed its connection before its response was complete.
  void RecordDisconnect();
  void ConnectionOpened();
  void ConnectionClosed();

  std::string Render(const LoopStats& stats) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> finished_;              // by finish reason
  std::map<std::pair<std::string, int>, uint64_t> http_;  // by (route, status)
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  uint64_t disconnects_ = 0;
  int64_t connections_ = 0;
  Histogram ttft_;
  Histogram tpot_;
  Histogram e2e_;
};

// This process's resident set size in bytes (from /proc/self/statm; 0 if unreadable).
uint64_t ResidentMemoryBytes();
// Bytes in live heap allocations (glibc's mallinfo2: in-use arena chunks plus mmapped ones, over
// all arenas). Unlike RSS it does not keep the allocator's high-water steps, so a leak shows as
// growth here and nothing else does. glibc counts the chunks in its per-thread caches as in use:
// they add a bounded amount (tens of KB) unless the process runs with
// GLIBC_TUNABLES=glibc.malloc.tcache_count=0. 0 where the C library has no mallinfo2.
uint64_t HeapAllocatedBytes();

}  // namespace deepinfer
