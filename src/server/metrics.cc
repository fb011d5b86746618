#include "server/metrics.h"

#include <malloc.h>
#include <unistd.h>

#include <charconv>
#include <fstream>

namespace deepinfer {
namespace {

// Seconds, roughly x2 apart: from a 1 ms decode step to a 10-minute request.
const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5, 1.0,
                                            2.5,   5.0,    10.0,  20.0, 40.0,  80.0, 160., 320., 640.};

// The shortest text that reads back as the same double.
std::string Number(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

void Header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(Number(value)).append("\n");
}

void Scalar(std::string& out, std::string_view name, std::string_view type, std::string_view help, double value) {
  Header(out, name, type, help);
  Sample(out, name, "", value);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::Render(std::string& out, std::string_view name, std::string_view help) const {
  Header(out, name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    Sample(out, bucket, "le=\"" + Number(bounds_[i]) + "\"", static_cast<double>(cumulative));
  }
  Sample(out, bucket, "le=\"+Inf\"", static_cast<double>(count_));
  Sample(out, std::string(name) + "_sum", "", sum_);
  Sample(out, std::string(name) + "_count", "", static_cast<double>(count_));
}

Metrics::Metrics() : ttft_(kLatencyBounds), tpot_(kLatencyBounds), e2e_(kLatencyBounds) {
  for (const char* reason : {"stop", "length", "abort", "error"}) finished_[reason] = 0;
}

void Metrics::RecordFinished(const FinishedChoice& choice) {
  const std::lock_guard lock(mutex_);
  const std::string_view reason = OpenAiFinishReason(choice.reason);
  ++finished_[std::string(reason.empty() ? "error" : reason)];
  prompt_tokens_ += static_cast<uint64_t>(choice.prompt_tokens);
  generation_tokens_ += static_cast<uint64_t>(choice.generated_tokens);
  if (choice.ttft_s) ttft_.Observe(*choice.ttft_s);
  if (choice.tpot_s) tpot_.Observe(*choice.tpot_s);
  e2e_.Observe(choice.e2e_s);
}

void Metrics::RecordHttp(std::string_view route, int status) {
  const std::lock_guard lock(mutex_);
  ++http_[{std::string(route), status}];
}

void Metrics::RecordDisconnect() {
  const std::lock_guard lock(mutex_);
  ++disconnects_;
}

void Metrics::ConnectionOpened() {
  const std::lock_guard lock(mutex_);
  ++connections_;
}

void Metrics::ConnectionClosed() {
  const std::lock_guard lock(mutex_);
  --connections_;
}

std::string Metrics::Render(const LoopStats& stats) const {
  const EngineStats& e = stats.engine;
  std::string out;
  out.reserve(8192);
  const std::lock_guard lock(mutex_);
  Header(out, "deepinfer_requests_finished_total", "counter",
         "Finished choices (engine requests) by finish reason: stop, length, abort, error.");
  for (const auto& [reason, count] : finished_) {
    Sample(out, "deepinfer_requests_finished_total", "finish_reason=\"" + reason + "\"", static_cast<double>(count));
  }
  Scalar(out, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of finished choices.",
         static_cast<double>(prompt_tokens_));
  Scalar(out, "deepinfer_generation_tokens_total", "counter", "Tokens generated for finished choices.",
         static_cast<double>(generation_tokens_));
  ttft_.Render(out, "deepinfer_time_to_first_token_seconds", "From the request's arrival to its first token.");
  tpot_.Render(out, "deepinfer_time_per_output_token_seconds", "Mean time between tokens after the first.");
  e2e_.Render(out, "deepinfer_e2e_request_latency_seconds", "From the request's arrival to its last token.");
  Scalar(out, "deepinfer_requests_running", "gauge", "Choices the engine is running.", static_cast<double>(e.running));
  Scalar(out, "deepinfer_requests_waiting", "gauge", "Accepted choices not running yet.",
         static_cast<double>(e.waiting + stats.pending));
  Scalar(out, "deepinfer_kv_cache_used_bytes", "gauge", "KV cache pages referenced by requests or the prefix cache.",
         static_cast<double>(e.kv_in_use_bytes));
  Scalar(out, "deepinfer_kv_cache_held_bytes", "gauge", "KV cache pool memory: pages in use plus kept free.",
         static_cast<double>(e.kv_held_bytes));
  Scalar(out, "deepinfer_backend_held_bytes", "gauge",
         "Memory the compute backend keeps between steps: its workspace arena and kernel scratch.",
         static_cast<double>(e.backend_held_bytes));
  Scalar(out, "deepinfer_kv_cache_budget_bytes", "gauge", "KV cache byte budget (0: no limit).",
         static_cast<double>(e.kv_budget_bytes));
  Scalar(out, "deepinfer_kv_cache_pages_in_use", "gauge", "KV cache pages referenced by requests or the prefix cache.",
         static_cast<double>(e.kv_pages_in_use));
  Scalar(out, "deepinfer_prefix_cache_blocks", "gauge", "Blocks held by the prefix cache.",
         static_cast<double>(e.prefix_cached_blocks));
  Scalar(out, "deepinfer_prefix_cache_queried_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
         static_cast<double>(e.prefix.queried_tokens));
  Scalar(out, "deepinfer_prefix_cache_hit_tokens_total", "counter", "Prompt tokens supplied by the prefix cache.",
         static_cast<double>(e.prefix.hit_tokens));
  Scalar(out, "deepinfer_preemptions_total", "counter", "Requests preempted for lack of KV memory.",
         static_cast<double>(e.preemptions));
  const SpeculationStats& spec = e.speculation;
  Scalar(out, "deepinfer_spec_verify_steps_total", "counter", "Request-steps that verified DSpark drafts.",
         static_cast<double>(spec.verify_steps));
  Scalar(out, "deepinfer_spec_draft_tokens_total", "counter", "DSpark drafts verified.",
         static_cast<double>(spec.drafted_tokens));
  Scalar(out, "deepinfer_spec_accepted_tokens_total", "counter", "DSpark drafts the target accepted.",
         static_cast<double>(spec.accepted_tokens));
  Scalar(out, "deepinfer_spec_emitted_tokens_total", "counter",
         "Tokens verify steps produced (accepted drafts plus one per step): over verify steps, the mean accepted "
         "length.",
         static_cast<double>(spec.emitted_tokens));
  auto by_position = [&](std::string_view name, std::string_view help, const std::vector<uint64_t>& counts) {
    Header(out, name, "counter", help);
    for (size_t i = 0; i < counts.size(); ++i) {
      Sample(out, name, "position=\"" + std::to_string(i + 1) + "\"", static_cast<double>(counts[i]));
    }
  };
  by_position("deepinfer_spec_accepted_by_position_total", "DSpark drafts accepted, by draft position.",
              spec.accepted_at);
  by_position("deepinfer_spec_verified_by_position_total", "DSpark drafts verified, by draft position.",
              spec.verified_at);
  Scalar(out, "deepinfer_spec_draft_seconds_total", "counter", "Time in the DSpark draft forward.", spec.draft_seconds);
  Scalar(out, "deepinfer_spec_verify_seconds_total", "counter", "Time in forwards that verified drafts.",
         spec.verify_seconds);
  Scalar(out, "deepinfer_engine_steps_total", "counter", "Engine steps (batched forwards).",
         static_cast<double>(e.steps));
  Scalar(out, "deepinfer_engine_one_thread_steps_total", "counter",
         "Forwards the CPU backend ran on one thread, where its hand-offs cost more than the other threads saved.",
         static_cast<double>(e.one_thread_steps));
  Header(out, "deepinfer_http_requests_total", "counter", "HTTP responses by route and status.");
  for (const auto& [key, count] : http_) {
    Sample(out, "deepinfer_http_requests_total",
           "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"", static_cast<double>(count));
  }
  Scalar(out, "deepinfer_http_client_disconnects_total", "counter",
         "Clients that closed their connection before their response was complete.", static_cast<double>(disconnects_));
  Scalar(out, "deepinfer_http_connections", "gauge", "Open HTTP connections.", static_cast<double>(connections_));
  Scalar(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         static_cast<double>(ResidentMemoryBytes()));
  Scalar(out, "deepinfer_heap_allocated_bytes", "gauge", "Bytes in live heap allocations (malloc'd and not freed).",
         static_cast<double>(HeapAllocatedBytes()));
  return out;
}

uint64_t ResidentMemoryBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

uint64_t HeapAllocatedBytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = ::mallinfo2();
  return info.uordblks + info.hblkhd;
#else
  return 0;
#endif
}

}  // namespace deepinfer
