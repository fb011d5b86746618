#include "cli/serving_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu_backend.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "cli/http_client.h"
#include "cli/isa_flag.h"
#include "cli/model_loading.h"
#include "cli/weight_layout_flag.h"
#include "core/bounded_json.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_conditions.h"
#include "io/model_config.h"
#include "kernels/cpu/cpu_context.h"
#include "model/model.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;  // keys in the order written, for a readable line

// Prompt ids avoid 0..2 (BOS, EOS and the Engram pad of the released configs).
constexpr int32_t kFirstPromptToken = 3;
// Steps in a row that neither run a forward nor report anything before the driver gives up.
constexpr int kMaxStalledSteps = 1000;
// Flag bounds: token counts are at most kMaxTokensFlag (cli/flags.h), and at most 2^20 requests
// are generated (their prompts are also held to a memory check, see RunServing).
constexpr int64_t kMaxRequests = int64_t{1} << 20;
// Bookkeeping per request beyond its prompt (records, engine state), for the memory check.
constexpr int64_t kRequestBytes = 4096;

double Seconds(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Progress goes to stderr so stdout holds only the table (and the JSON line).
void Progress(const std::string& what) { std::fprintf(stderr, "bench: %s...\n", what.c_str()); }

struct Summary {
  size_t count = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p99 = 0.0;
};

// numpy's default percentile: linear interpolation between the closest ranks.
double Percentile(const std::vector<double>& sorted, double q) {
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * frac;
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0.0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = Percentile(values, 50.0);
  s.p99 = Percentile(values, 99.0);
  return s;
}

std::string MiB(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// ---------------------------------------------------------------------------------------------
// --serving

struct ServingOptions {
  std::string model;  // empty: the embedded default
  int threads = 0;
  std::optional<IsaLevel> isa;
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  int64_t num_requests = 16;
  int64_t input_len = 128;
  int64_t output_len = 32;
  int64_t max_step_tokens = EngineOptions{}.max_step_tokens;
  std::optional<int64_t> max_running;  // unset: the engine's default, capped at max_step_tokens
  uint64_t kv_cache_memory = 0;        // 0: no limit
  bool prefix_cache = true;
  int64_t shared_prefix_len = 0;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at t = 0
  double temperature = 0.0;
  uint64_t seed = 0;
  bool json = false;
  std::string url;  // drive a running server instead of an engine in this process
  std::string api_key;
};

// Client threads of an HTTP run at most (requests beyond wait client-side for a free one).
constexpr size_t kMaxHttpClients = 1024;
// What the server sends back (/health, one SSE event) is parsed within these limits.
constexpr JsonLimits kServerJsonLimits{size_t{1} << 20, 64};

const std::vector<Flag<ServingOptions>>& ServingFlags() {
  static const std::vector<Flag<ServingOptions>> flags = {
      {"--serving", nullptr, "this mode: many requests through the serving engine",
       [](ServingOptions&, const std::string&) {}},
      {"--num-requests", "N", "requests (default 16)",
       [](ServingOptions& o, const std::string& v) {
         o.num_requests = ParseIntFlag("--num-requests", v, 1, kMaxRequests);
       }},
      {"--input-len", "I", "prompt tokens per request, ids uniform in [3, vocab) (default 128)",
       [](ServingOptions& o, const std::string& v) {
         o.input_len = ParseIntFlag("--input-len", v, 1, kMaxTokensFlag);
       }},
      {"--output-len", "O", "generated tokens per request, EOS ignored (default 32)",
       [](ServingOptions& o, const std::string& v) {
         o.output_len = ParseIntFlag("--output-len", v, 1, kMaxTokensFlag);
       }},
      {"--model", "DIR", kModelFlagHelp, [](ServingOptions& o, const std::string& v) { o.model = v; }},
      {"--threads", "N", "worker threads (default: all cores; at most 4 per hardware thread)",
       [](ServingOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<ServingOptions>(),
      KernelPlanFlag<ServingOptions>(),
      WeightLayoutFlag<ServingOptions>(),
      {"--max-step-tokens", "B", "tokens one engine step may run (default 512)",
       [](ServingOptions& o, const std::string& v) {
         o.max_step_tokens = ParseIntFlag("--max-step-tokens", v, 1, kMaxTokensFlag);
       }},
      {"--max-running", "R", "requests running at once (default 64, at most --max-step-tokens)",
       [](ServingOptions& o, const std::string& v) {
         o.max_running = ParseIntFlag("--max-running", v, 1, kMaxRequests);
       }},
      {"--kv-cache-memory", "BYTES", "KV cache budget, e.g. 64M or 2G (default 0: no limit)",
       [](ServingOptions& o, const std::string& v) { o.kv_cache_memory = ParseByteSize("--kv-cache-memory", v); }},
      {"--no-prefix-cache", nullptr, "turn the prefix cache off",
       [](ServingOptions& o, const std::string&) { o.prefix_cache = false; }},
      {"--shared-prefix-len", "P", "the first P prompt tokens are the same in every request (default 0)",
       [](ServingOptions& o, const std::string& v) {
         o.shared_prefix_len = ParseIntFlag("--shared-prefix-len", v, 0, kMaxTokensFlag);
       }},
      {"--request-rate", "R", "requests/s as seeded Poisson arrivals (default inf: all at t = 0)",
       [](ServingOptions& o, const std::string& v) {
         if (v == "inf") {
           o.request_rate = std::numeric_limits<double>::infinity();
           return;
         }
         o.request_rate = ParseRealFlag("--request-rate", v);
         if (o.request_rate <= 0.0) throw MakeError("--request-rate: must be positive or 'inf', got '", v, "'");
       }},
      {"--temperature", "T", "sampling temperature (default 0: greedy)",
       [](ServingOptions& o, const std::string& v) {
         o.temperature = ParseRealFlag("--temperature", v);
         if (o.temperature < 0.0) throw MakeError("--temperature: must be >= 0, got '", v, "'");
       }},
      {"--seed", "S", "seeds the prompts, the arrivals and every request's sampler (default 0)",
       [](ServingOptions& o, const std::string& v) { o.seed = ParseSeedFlag("--seed", v); }},
      {"--json", nullptr, "also print one JSON object with the results as the last line",
       [](ServingOptions& o, const std::string&) { o.json = true; }},
      {"--url", "http://HOST:PORT",
       "drive a running deepinfer serve over HTTP (SSE streams), same workload; empties its prefix cache first",
       [](ServingOptions& o, const std::string& v) {
         (void)ParseHttpUrl("--url", v);
         o.url = v;
       }},
      {"--api-key", "KEY", "with --url: the server's API key",
       [](ServingOptions& o, const std::string& v) { o.api_key = v; }},
  };
  return flags;
}

// With --url the server's own settings decide the engine: engine flags would be silently ignored.
void RejectEngineFlagsWithUrl(const ServingOptions& o) {
  const ServingOptions defaults;
  const char* flag = !o.model.empty()                                ? "--model"
                     : o.threads != 0                                ? "--threads"
                     : o.isa                                         ? "--isa"
                     : o.kernel_plan                                 ? "--kernel-plan"
                     : o.weight_layout != defaults.weight_layout     ? "--weight-layout"
                     : o.max_running                                 ? "--max-running"
                     : o.max_step_tokens != defaults.max_step_tokens ? "--max-step-tokens"
                     : o.kv_cache_memory != defaults.kv_cache_memory ? "--kv-cache-memory"
                     : !o.prefix_cache                               ? "--no-prefix-cache"
                                                                     : nullptr;
  if (flag) throw MakeError(flag, ": not with --url (the server's own flags set its engine)");
}

struct RequestRecord {
  double arrival_s = 0.0;  // scheduled arrival, from the start of the run
  std::optional<double> first_token_s;
  double last_token_s = 0.0;
  double finish_s = 0.0;
  int64_t generated = 0;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  bool ok() const {
    return finish != FinishReason::kNone && finish != FinishReason::kError && finish != FinishReason::kAbort;
  }
};

// Prompts: the shared prefix from one stream, each request's own tail from another, so the
// prompts do not change with the request rate (whose arrivals use a third).
std::vector<std::vector<int32_t>> MakePrompts(const ServingOptions& o, int64_t vocab) {
  const uint64_t span = static_cast<uint64_t>(vocab - kFirstPromptToken);
  Rng prefix_rng(o.seed * 3 + 1);
  Rng tail_rng(o.seed * 3 + 2);
  std::vector<int32_t> prefix(o.shared_prefix_len);
  for (int32_t& t : prefix) t = kFirstPromptToken + static_cast<int32_t>(prefix_rng.Next() % span);
  std::vector<std::vector<int32_t>> prompts(o.num_requests, prefix);
  for (std::vector<int32_t>& p : prompts) {
    while (static_cast<int64_t>(p.size()) < o.input_len) {
      p.push_back(kFirstPromptToken + static_cast<int32_t>(tail_rng.Next() % span));
    }
  }
  return prompts;
}

// Arrival times in seconds: all 0 at an infinite rate, else a Poisson process starting at 0.
std::vector<double> MakeArrivals(const ServingOptions& o) {
  std::vector<double> arrivals(o.num_requests, 0.0);
  if (std::isinf(o.request_rate)) return arrivals;
  Rng rng(o.seed * 3 + 3);
  for (size_t i = 1; i < arrivals.size(); ++i) {
    arrivals[i] = arrivals[i - 1] - std::log(rng.UniformOpenZero()) / o.request_rate;
  }
  return arrivals;
}

void SummaryJson(Json& j, const std::string& name, const Summary& s) {
  auto value = [&](double v) { return s.count > 0 ? Json(v) : Json(nullptr); };
  j[name + "_mean"] = value(s.mean);
  j[name + "_p50"] = value(s.p50);
  j[name + "_p99"] = value(s.p99);
}

// Where a serving run ran, for the report: the engine in this process, or a server over HTTP
// (whose engine counters come from the deltas of its /metrics).
struct ServingRun {
  std::string target;  // model folder or URL
  std::string engine_line;
  int threads = 0;
  std::string isa;
  bool over_http = false;
  uint64_t steps = 0, preemptions = 0, prefix_hit = 0, prefix_queried = 0, kv_peak = 0, kv_budget = 0;
  std::vector<int64_t> context_buckets, steps_per_bucket;  // in-process only
};

void CheckWorkload(const ServingOptions& o, int64_t vocab, int64_t max_context) {
  if (o.input_len + o.output_len > max_context) {
    throw MakeError("--input-len + --output-len: ", o.input_len, " + ", o.output_len, " = ", o.input_len + o.output_len,
                    " tokens exceed the model's maximum context of ", max_context, " tokens");
  }
  if (vocab <= kFirstPromptToken) {
    throw MakeError("bench --serving: the model's vocabulary of ", vocab, " is too small");
  }
  // Every prompt is made up front: what they hold must fit comfortably in this machine's memory.
  const double prompt_bytes = static_cast<double>(o.num_requests) *
                              static_cast<double>(o.input_len * static_cast<int64_t>(sizeof(int32_t)) + kRequestBytes);
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && prompt_bytes > memory / 4) {
    throw MakeError("--num-requests x --input-len: ", o.num_requests, " requests of ", o.input_len,
                    " prompt tokens need about ", MiB(static_cast<uint64_t>(prompt_bytes)),
                    ", more than a quarter of this machine's ", MiB(static_cast<uint64_t>(memory)));
  }
}

std::vector<RequestRecord> ServeInProcess(const ServingOptions& o, int64_t max_running,
                                          const std::vector<double>& arrivals, ServingRun& run) {
  const IsaLevel isa = ChooseIsaFlag(o.isa);
  const Bf16Dot plan = ChooseKernelPlanFlag(o.kernel_plan, isa);
  const std::string model_dir = ModelDirOrDefault(o.model);
  Progress("loading " + model_dir);
  const std::unique_ptr<Model> model = Model::Load(model_dir);
  ApplyWeightLayout(*model, o.weight_layout, isa, plan);
  const int64_t vocab = model->config().vocab_size;
  CheckWorkload(o, vocab, model->max_context());

  ThreadPool pool(o.threads);
  CpuBackend backend(pool, isa, plan);
  const ComputeContext ctx{backend};
  EngineOptions engine_options;
  engine_options.max_step_tokens = o.max_step_tokens;
  engine_options.max_running = static_cast<int>(max_running);
  engine_options.kv_cache_memory = o.kv_cache_memory;
  engine_options.prefix_caching = o.prefix_cache;
  engine_options.seed = o.seed;
  Engine engine(*model, ctx, engine_options);

  const std::vector<std::vector<int32_t>> prompts = MakePrompts(o, vocab);
  std::vector<RequestRecord> records(o.num_requests);
  std::map<RequestId, size_t> index_of;

  Progress("serving " + std::to_string(o.num_requests) + " requests");
  const Clock::time_point start = Clock::now();
  auto now_s = [&] { return Seconds(start, Clock::now()); };
  size_t next = 0;
  int stalled = 0;
  while (next < prompts.size() || !engine.idle()) {
    for (const double t = now_s(); next < prompts.size() && arrivals[next] <= t; ++next) {
      RequestParams params;
      params.prompt = prompts[next];
      params.sampling.temperature = static_cast<float>(o.temperature);
      params.stop.max_tokens = o.output_len;
      params.stop.ignore_eos = true;
      params.seed = o.seed + next;
      records[next].arrival_s = arrivals[next];
      index_of[engine.Add(std::move(params))] = next;
    }
    if (engine.idle()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(arrivals[next] - now_s()));
      continue;
    }
    const uint64_t steps_before = engine.stats().steps;
    const std::vector<RequestUpdate> updates = engine.Step();
    const double t = now_s();
    for (const RequestUpdate& u : updates) {
      RequestRecord& r = records[index_of.at(u.id)];
      if (!u.tokens.empty()) {
        if (!r.first_token_s) r.first_token_s = t;
        r.last_token_s = t;
        r.generated += static_cast<int64_t>(u.tokens.size());
      }
      if (u.finished()) {
        r.finish = u.finish;
        r.finish_s = t;
        r.error = u.error;
      }
    }
    stalled = (updates.empty() && engine.stats().steps == steps_before) ? stalled + 1 : 0;
    if (stalled >= kMaxStalledSteps) {
      const EngineStats s = engine.stats();
      throw MakeError("bench --serving: the engine made no progress in ", kMaxStalledSteps, " steps (", s.running,
                      " running, ", s.waiting, " waiting requests)");
    }
  }
  const EngineStats stats = engine.stats();
  run.target = model_dir;
  run.threads = pool.size();
  run.isa = std::string(IsaName(isa));
  const std::string budget = stats.kv_budget_bytes > 0 ? MiB(stats.kv_budget_bytes) : "no limit";
  run.engine_line = "engine: max step tokens " + std::to_string(o.max_step_tokens) + ", max running " +
                    std::to_string(max_running) + ", KV budget " + budget + ", prefix cache " +
                    (o.prefix_cache ? "on" : "off") + "; " + std::to_string(pool.size()) + " threads, isa " + run.isa;
  run.steps = stats.steps;
  run.preemptions = stats.preemptions;
  run.prefix_hit = stats.prefix.hit_tokens;
  run.prefix_queried = stats.prefix.queried_tokens;
  run.kv_peak = stats.kv_peak_bytes;
  run.kv_budget = stats.kv_budget_bytes;
  run.context_buckets = engine.context_buckets();
  run.steps_per_bucket = std::vector<int64_t>(stats.steps_per_bucket.begin(), stats.steps_per_bucket.end());
  return records;
}

// A counter of the server's /metrics text (0 when absent).
double MetricOf(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? 0.0 : std::stod(metrics.substr(at + name.size() + 2));
}

// One streamed completion over HTTP: the same prompt, length and sampling as in-process.
void StreamOne(const HttpUrl& url, const ServingOptions& o, const std::vector<int32_t>& prompt, uint64_t seed,
               Clock::time_point start, RequestRecord& r) {
  const Json body = {{"prompt", prompt},
                     {"max_tokens", o.output_len},
                     {"ignore_eos", true},
                     {"temperature", o.temperature},
                     {"seed", seed},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  std::string pending, error_body;
  bool failed = false;
  auto now_s = [&] { return Seconds(start, Clock::now()); };
  const int status = HttpRequest(url, "POST", "/v1/completions", body.dump(), [&](std::string_view piece) {
    const double t = now_s();
    pending += piece;
    if (failed) return;
    for (size_t end = pending.find("\n\n"); end != std::string::npos; end = pending.find("\n\n")) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (!event.starts_with("data: ") || event == "data: [DONE]") continue;
      Json chunk;
      try {
        chunk = ParseOrderedJsonBounded(std::string_view(event).substr(6), "SSE event", kServerJsonLimits);
        if (!chunk.is_object()) throw Error("SSE event: not a JSON object");
      } catch (const Error& e) {
        r.error = e.what();
        r.finish = FinishReason::kError;
        continue;
      }
      if (chunk.contains("error")) {
        r.error = chunk["error"].value("message", "error");
        r.finish = FinishReason::kError;
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        r.generated = chunk["usage"].value("completion_tokens", int64_t{0});
      }
      for (const Json& choice : chunk.value("choices", Json::array())) {
        if (!choice.value("text", std::string()).empty()) {
          if (!r.first_token_s) r.first_token_s = t;
          r.last_token_s = t;
        }
        if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
          const std::string reason = choice["finish_reason"];
          r.finish = reason == "length" ? FinishReason::kMaxTokens
                     : reason == "stop" ? FinishReason::kStopToken
                                        : FinishReason::kError;
          if (r.finish == FinishReason::kError) r.error = "finish reason " + reason;
        }
      }
    }
  });
  r.finish_s = now_s();
  if (status != 200) {
    r.finish = FinishReason::kError;
    r.error = "HTTP " + std::to_string(status) + ": " + pending.substr(0, 200);
  }
}

std::vector<RequestRecord> ServeOverHttp(const ServingOptions& o, const std::vector<double>& arrivals,
                                         ServingRun& run) {
  HttpUrl url = ParseHttpUrl("--url", o.url);
  url.api_key = o.api_key;
  const Json health = ParseOrderedJsonBounded(HttpGet(url, "/health"), o.url + "/health", kServerJsonLimits);
  const int64_t vocab = health.at("vocab_size").get<int64_t>();
  CheckWorkload(o, vocab, health.at("max_model_len").get<int64_t>());
  const std::vector<std::vector<int32_t>> prompts = MakePrompts(o, vocab);
  std::vector<RequestRecord> records(o.num_requests);
  // The run starts as cold as one in-process: nothing of an earlier run in the prefix cache.
  std::string reset_body;
  const int reset = HttpRequest(url, "POST", "/reset_prefix_cache", "", [&](std::string_view p) { reset_body += p; });
  if (reset != 200) throw MakeError(o.url, "/reset_prefix_cache: HTTP ", reset, ": ", reset_body.substr(0, 300));
  const std::string before = HttpGet(url, "/metrics");

  // One client thread per request in flight, each waiting for its arrival time.
  const size_t workers = std::min<size_t>(prompts.size(), kMaxHttpClients);
  Progress("serving " + std::to_string(o.num_requests) + " requests over " + o.url + " with " +
           std::to_string(workers) + " client threads");
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < prompts.size(); i = next++) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
        records[i].arrival_s = arrivals[i];
        try {
          StreamOne(url, o, prompts[i], o.seed + i, start, records[i]);
        } catch (const Error& e) {
          records[i].finish = FinishReason::kError;
          records[i].error = e.what();
          records[i].finish_s = Seconds(start, Clock::now());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string after = HttpGet(url, "/metrics");
  auto delta = [&](const char* name) { return static_cast<uint64_t>(MetricOf(after, name) - MetricOf(before, name)); };
  run.target = o.url;
  run.over_http = true;
  run.isa = "server";
  run.threads = static_cast<int>(workers);
  run.engine_line = "over HTTP: " + std::to_string(workers) + " client threads, SSE streams; server " +
                    health.value("model", std::string("?")) + " (its own engine settings)";
  run.steps = delta("deepinfer_engine_steps_total");
  run.preemptions = delta("deepinfer_preemptions_total");
  run.prefix_hit = delta("deepinfer_prefix_cache_hit_tokens_total");
  run.prefix_queried = delta("deepinfer_prefix_cache_queried_tokens_total");
  run.kv_budget = static_cast<uint64_t>(MetricOf(after, "deepinfer_kv_cache_budget_bytes"));
  run.kv_peak = static_cast<uint64_t>(MetricOf(after, "deepinfer_kv_cache_held_bytes"));
  return records;
}

int RunServing(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    std::cout << "usage: deepinfer bench --serving [flags]\n";
    PrintFlagHelp(std::cout, ServingFlags());
    return 0;
  }
  ServingOptions o;
  ParseFlags("bench --serving", args, ServingFlags(), o);
  if (!o.url.empty()) RejectEngineFlagsWithUrl(o);
  if (o.shared_prefix_len > o.input_len) {
    throw MakeError("--shared-prefix-len: ", o.shared_prefix_len, " exceeds --input-len ", o.input_len);
  }
  const int64_t max_running = o.max_running.value_or(std::min<int64_t>(EngineOptions{}.max_running, o.max_step_tokens));
  if (max_running > o.max_step_tokens) {
    throw MakeError("--max-running: ", max_running, " exceeds --max-step-tokens ", o.max_step_tokens,
                    " (every running request decodes in every step)");
  }
  const std::vector<double> arrivals = MakeArrivals(o);
  ServingRun run;
  const std::vector<RequestRecord> records =
      o.url.empty() ? ServeInProcess(o, max_running, arrivals, run) : ServeOverHttp(o, arrivals, run);

  // Per-request metrics over the requests that finished normally.
  std::vector<double> ttft_ms, tpot_ms, latency_ms;
  int64_t ok = 0, generated = 0, ok_prompt_tokens = 0;
  double wall_s = 0.0;
  std::string first_error;
  for (const RequestRecord& r : records) {
    generated += r.generated;
    wall_s = std::max(wall_s, r.finish_s);
    if (!r.ok()) {
      if (first_error.empty()) first_error = r.error.empty() ? std::string(OpenAiFinishReason(r.finish)) : r.error;
      continue;
    }
    ++ok;
    ok_prompt_tokens += o.input_len;
    if (r.first_token_s) ttft_ms.push_back((*r.first_token_s - r.arrival_s) * 1e3);
    if (r.generated > 1) {
      tpot_ms.push_back((r.last_token_s - *r.first_token_s) / static_cast<double>(r.generated - 1) * 1e3);
    }
    latency_ms.push_back((r.finish_s - r.arrival_s) * 1e3);
  }
  wall_s -= arrivals.front();
  const int64_t failed = o.num_requests - ok;
  const Summary ttft = Summarize(ttft_ms), tpot = Summarize(tpot_ms), latency = Summarize(latency_ms);
  const double throughput = wall_s > 0 ? static_cast<double>(generated) / wall_s : 0.0;
  const double total_throughput = wall_s > 0 ? static_cast<double>(generated + ok_prompt_tokens) / wall_s : 0.0;
  const double hit_rate =
      run.prefix_queried > 0 ? static_cast<double>(run.prefix_hit) / static_cast<double>(run.prefix_queried) : 0.0;
  const std::string budget = run.kv_budget > 0 ? MiB(run.kv_budget) : "no limit";

  std::printf("deepinfer bench --serving: %s\n", run.target.c_str());
  std::printf("  %lld requests of %lld prompt tokens (%lld shared) + %lld generated, %s, temperature %g, seed %llu\n",
              static_cast<long long>(o.num_requests), static_cast<long long>(o.input_len),
              static_cast<long long>(o.shared_prefix_len), static_cast<long long>(o.output_len),
              std::isinf(o.request_rate) ? "all arriving at t=0"
                                         : ("Poisson arrivals at " + std::to_string(o.request_rate) + " req/s").c_str(),
              o.temperature, static_cast<unsigned long long>(o.seed));
  std::printf("  %s\n", run.engine_line.c_str());
  std::printf("\nresults\n");
  std::printf("  requests ok / failed  %lld / %lld\n", static_cast<long long>(ok), static_cast<long long>(failed));
  if (!first_error.empty()) std::printf("  first failure         %s\n", first_error.c_str());
  std::printf("  wall time             %.3f s (first arrival to last finish)\n", wall_s);
  std::printf("  throughput            %.2f generated tok/s, %.2f total tok/s\n", throughput, total_throughput);
  std::printf("  steps                 %llu (preemptions %llu)\n", static_cast<unsigned long long>(run.steps),
              static_cast<unsigned long long>(run.preemptions));
  std::printf("  prefix cache          %llu of %llu prompt tokens hit (%.2f%%)\n",
              static_cast<unsigned long long>(run.prefix_hit), static_cast<unsigned long long>(run.prefix_queried),
              100.0 * hit_rate);
  std::printf("  KV cache              %s %s, budget %s\n", run.over_http ? "held after" : "peak",
              MiB(run.kv_peak).c_str(), budget.c_str());
  std::printf("\n  %-12s %10s %10s %10s\n", "latency ms", "mean", "p50", "p99");
  auto row = [](const char* name, const Summary& s) {
    if (s.count == 0) {
      std::printf("  %-12s %10s %10s %10s\n", name, "-", "-", "-");
    } else {
      std::printf("  %-12s %10.3f %10.3f %10.3f\n", name, s.mean, s.p50, s.p99);
    }
  };
  row("TTFT", ttft);
  row("TPOT", tpot);
  row("end-to-end", latency);

  if (o.json) {
    Json j;
    j["mode"] = "serving";
    j["model"] = run.target;
    j["over_http"] = run.over_http;
    j["threads"] = run.threads;
    j["isa"] = run.isa;
    j["num_requests"] = o.num_requests;
    j["input_len"] = o.input_len;
    j["output_len"] = o.output_len;
    j["shared_prefix_len"] = o.shared_prefix_len;
    j["request_rate"] = std::isinf(o.request_rate) ? Json(nullptr) : Json(o.request_rate);  // null: all at t = 0
    j["temperature"] = o.temperature;
    j["seed"] = o.seed;
    j["max_step_tokens"] = o.max_step_tokens;
    j["max_running"] = max_running;
    j["prefix_cache"] = o.prefix_cache;
    j["requests_ok"] = ok;
    j["requests_failed"] = failed;
    j["wall_s"] = wall_s;
    j["generated_tokens"] = generated;
    j["throughput_tok_s"] = throughput;
    j["total_tok_s"] = total_throughput;
    SummaryJson(j, "ttft_ms", ttft);
    SummaryJson(j, "tpot_ms", tpot);
    SummaryJson(j, "latency_ms", latency);
    j["steps"] = run.steps;
    j["preemptions"] = run.preemptions;
    j["prefix_hit_tokens"] = run.prefix_hit;
    j["prefix_queried_tokens"] = run.prefix_queried;
    j["prefix_hit_rate"] = hit_rate;
    j["kv_peak_bytes"] = run.kv_peak;
    j["kv_budget_bytes"] = run.kv_budget;  // 0: no limit
    j["context_buckets"] = run.context_buckets;
    j["steps_per_bucket"] = run.steps_per_bucket;
    if (!first_error.empty()) j["first_error"] = first_error;
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  // A benchmark whose requests failed measured something else: the run fails too.
  if (failed > 0) {
    throw MakeError("bench --serving: ", failed, " of ", o.num_requests, " requests failed (first: ", first_error, ")");
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// --context-sweep

struct SweepOptions {
  std::string model;
  int threads = 0;
  std::optional<IsaLevel> isa;
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  std::vector<int64_t> contexts = {256, 1024, 2048};
  std::vector<int64_t> max_model_lens = {2048, 4096};
  int64_t decode_steps = 8;
  int64_t warmup_steps = 2;
  bool json = false;
};

// Ascending, without repeats (reported, not silently fixed).
std::vector<int64_t> ParseAscendingList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> values = ParseIntListFlag(flag, text, 1, kMaxTokensFlag);
  std::sort(values.begin(), values.end());
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] == values[i - 1]) throw MakeError(flag, ": ", values[i], " is listed twice");
  }
  return values;
}

const std::vector<Flag<SweepOptions>>& SweepFlags() {
  static const std::vector<Flag<SweepOptions>> flags = {
      {"--context-sweep", nullptr, "this mode: decode step time per context bucket and maximum context",
       [](SweepOptions&, const std::string&) {}},
      {"--contexts", "256,1024,2048", "context lengths, also the engine's context buckets (default 256,1024,2048)",
       [](SweepOptions& o, const std::string& v) { o.contexts = ParseAscendingList("--contexts", v); }},
      {"--max-model-len-list", "2048,4096", "maximum contexts the model is loaded with (default 2048,4096)",
       [](SweepOptions& o, const std::string& v) { o.max_model_lens = ParseAscendingList("--max-model-len-list", v); }},
      {"--decode-steps", "D", "timed decode steps per cell (default 8)",
       [](SweepOptions& o, const std::string& v) { o.decode_steps = ParseIntFlag("--decode-steps", v, 1, 1 << 20); }},
      {"--warmup-steps", "W", "untimed decode steps before them (default 2)",
       [](SweepOptions& o, const std::string& v) { o.warmup_steps = ParseIntFlag("--warmup-steps", v, 0, 1 << 20); }},
      {"--model", "DIR", kModelFlagHelp, [](SweepOptions& o, const std::string& v) { o.model = v; }},
      {"--threads", "N", "worker threads (default: all cores; at most 4 per hardware thread)",
       [](SweepOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<SweepOptions>(),
      KernelPlanFlag<SweepOptions>(),
      WeightLayoutFlag<SweepOptions>(),
      {"--json", nullptr, "also print one JSON object with the results as the last line",
       [](SweepOptions& o, const std::string&) { o.json = true; }},
  };
  return flags;
}

struct SweepCell {
  int64_t max_model_len = 0;
  int64_t context = 0;
  int64_t prompt_tokens = 0;
  int64_t bucket = 0;  // the timed steps' bucket (all the same: checked)
  double prefill_ms = 0.0;
  double step_ms_mean = 0.0;
  double step_ms_median = 0.0;
};

// One request whose prompt plus the warm-up and timed decode steps end exactly at `context`:
// the last timed step runs position context - 1, so every timed step sits in the bucket that
// holds `context`.
SweepCell RunSweepCell(const Model& model, const ComputeContext& ctx, const SweepOptions& o, int64_t context) {
  SweepCell cell;
  cell.max_model_len = model.max_context();
  cell.context = context;
  cell.prompt_tokens = context - o.warmup_steps - o.decode_steps;
  EngineOptions options;
  options.max_running = 1;
  options.prefix_caching = false;
  options.context_buckets = o.contexts;
  options.seed = 0;
  Engine engine(model, ctx, options);
  RequestParams params;
  const uint64_t span = static_cast<uint64_t>(model.config().vocab_size - kFirstPromptToken);
  Rng rng(static_cast<uint64_t>(context));
  for (int64_t t = 0; t < cell.prompt_tokens; ++t) {
    params.prompt.push_back(kFirstPromptToken + static_cast<int32_t>(rng.Next() % span));
  }
  params.stop.max_tokens = 1 + o.warmup_steps + o.decode_steps;
  params.stop.ignore_eos = true;
  engine.Add(std::move(params));

  // Each call must produce exactly one token (after the prefill) or the cell is meaningless.
  auto step_for_token = [&](const char* phase) {
    const std::vector<RequestUpdate> updates = engine.Step();
    for (const RequestUpdate& u : updates) {
      if (u.finish == FinishReason::kError || u.finish == FinishReason::kAbort) {
        throw MakeError("bench --context-sweep: context ", context, ", max model len ", cell.max_model_len,
                        ": the request failed during ", phase, ": ", u.error);
      }
      if (!u.tokens.empty()) return true;
    }
    return false;
  };
  const Clock::time_point prefill_start = Clock::now();
  for (int64_t steps = 0; !step_for_token("prefill"); ++steps) {
    if (engine.idle() || steps > cell.prompt_tokens) {
      throw MakeError("bench --context-sweep: context ", context, ": the prefill produced no token");
    }
  }
  cell.prefill_ms = Seconds(prefill_start, Clock::now()) * 1e3;
  for (int64_t k = 0; k < o.warmup_steps; ++k) {
    if (!step_for_token("warm-up")) throw MakeError("bench --context-sweep: a warm-up step produced no token");
  }
  std::vector<double> step_ms;
  for (int64_t k = 0; k < o.decode_steps; ++k) {
    const Clock::time_point start = Clock::now();
    const bool produced = step_for_token("decode");
    step_ms.push_back(Seconds(start, Clock::now()) * 1e3);
    if (!produced) throw MakeError("bench --context-sweep: a decode step produced no token");
    const int64_t bucket = engine.stats().last_step_bucket;
    if (k > 0 && bucket != cell.bucket) {
      throw MakeError("bench --context-sweep: context ", context, ": timed steps ran in buckets ", cell.bucket, " and ",
                      bucket);
    }
    cell.bucket = bucket;
  }
  if (!engine.idle()) throw MakeError("bench --context-sweep: the request did not finish after its last timed step");
  const Summary s = Summarize(step_ms);
  cell.step_ms_mean = s.mean;
  cell.step_ms_median = s.p50;
  return cell;
}

int RunContextSweep(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    std::cout << "usage: deepinfer bench --context-sweep [flags]\n";
    PrintFlagHelp(std::cout, SweepFlags());
    return 0;
  }
  SweepOptions o;
  ParseFlags("bench --context-sweep", args, SweepFlags(), o);
  const int64_t decode_positions = o.warmup_steps + o.decode_steps;
  if (o.contexts.front() <= decode_positions) {
    throw MakeError("--contexts: ", o.contexts.front(), " leaves no prompt before the ", o.warmup_steps, " warm-up + ",
                    o.decode_steps, " timed decode steps (each context must exceed ", decode_positions, ")");
  }
  if (o.contexts.back() > o.max_model_lens.front()) {
    throw MakeError("--contexts: ", o.contexts.back(), " exceeds the --max-model-len-list entry ",
                    o.max_model_lens.front());
  }
  const IsaLevel isa = ChooseIsaFlag(o.isa);
  const Bf16Dot plan = ChooseKernelPlanFlag(o.kernel_plan, isa);
  const std::string model_dir = ModelDirOrDefault(o.model);
  const int64_t model_max = LoadModelConfig(model_dir).max_position_embeddings;
  if (o.max_model_lens.back() > model_max) {
    throw MakeError("--max-model-len-list: ", o.max_model_lens.back(),
                    " exceeds the model's max_position_embeddings of ", model_max, " (", model_dir, ")");
  }
  ThreadPool pool(o.threads);
  CpuBackend backend(pool, isa, plan);
  const ComputeContext ctx{backend};

  std::vector<SweepCell> cells;  // max_model_len-major
  for (const int64_t max_len : o.max_model_lens) {
    Progress("loading with max context " + std::to_string(max_len));
    const std::unique_ptr<Model> model = Model::Load(model_dir, ModelOptions{.max_context = max_len});
    ApplyWeightLayout(*model, o.weight_layout, isa, plan);
    for (const int64_t context : o.contexts) {
      Progress("context " + std::to_string(context) + ", max context " + std::to_string(max_len));
      cells.push_back(RunSweepCell(*model, ctx, o, context));
    }
  }
  auto cell_at = [&](size_t len_index, size_t context_index) -> const SweepCell& {
    return cells[len_index * o.contexts.size() + context_index];
  };
  // The two claims in numbers, on medians (one stalled step on a busy machine moves a mean a
  // lot): how much a step grows from the smallest to the largest context (at each max context),
  // and how far one context's step time moves across max contexts.
  double spread = 0.0;
  for (size_t c = 0; c < o.contexts.size(); ++c) {
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    for (size_t l = 0; l < o.max_model_lens.size(); ++l) {
      lo = std::min(lo, cell_at(l, c).step_ms_median);
      hi = std::max(hi, cell_at(l, c).step_ms_median);
    }
    spread = std::max(spread, hi / lo - 1.0);
  }
  std::vector<double> growth;
  for (size_t l = 0; l < o.max_model_lens.size(); ++l) {
    growth.push_back(cell_at(l, o.contexts.size() - 1).step_ms_median / cell_at(l, 0).step_ms_median);
  }

  std::printf("deepinfer bench --context-sweep: %s\n", model_dir.c_str());
  std::printf("  mean decode step ms [context bucket] over %lld timed steps after %lld warm-up; %d threads, isa %s\n",
              static_cast<long long>(o.decode_steps), static_cast<long long>(o.warmup_steps), pool.size(),
              std::string(IsaName(isa)).c_str());
  std::printf("\n  %8s", "context");
  for (const int64_t len : o.max_model_lens) std::printf(" %20s", ("max len " + std::to_string(len)).c_str());
  std::printf("\n");
  for (size_t c = 0; c < o.contexts.size(); ++c) {
    std::printf("  %8lld", static_cast<long long>(o.contexts[c]));
    for (size_t l = 0; l < o.max_model_lens.size(); ++l) {
      const SweepCell& cell = cell_at(l, c);
      char text[64];
      std::snprintf(text, sizeof(text), "%.3f [%lld]", cell.step_ms_mean, static_cast<long long>(cell.bucket));
      std::printf(" %20s", text);
    }
    std::printf("\n");
  }
  std::printf("\n  median step time, largest / smallest context:");
  for (const double g : growth) std::printf(" %.2fx", g);
  std::printf("  (per max len)\n");
  std::printf("  largest spread of the median step time across max lens at one context: %.1f%%\n", 100.0 * spread);

  if (o.json) {
    Json results = Json::array();
    for (const SweepCell& cell : cells) {
      results.push_back({{"max_model_len", cell.max_model_len},
                         {"context", cell.context},
                         {"bucket", cell.bucket},
                         {"prompt_tokens", cell.prompt_tokens},
                         {"prefill_ms", cell.prefill_ms},
                         {"step_ms_mean", cell.step_ms_mean},
                         {"step_ms_median", cell.step_ms_median}});
    }
    Json j;
    j["mode"] = "context_sweep";
    j["model"] = model_dir;
    j["threads"] = pool.size();
    j["isa"] = std::string(IsaName(isa));
    j["decode_steps"] = o.decode_steps;
    j["warmup_steps"] = o.warmup_steps;
    j["contexts"] = o.contexts;
    j["max_model_lens"] = o.max_model_lens;
    j["median_step_growth_largest_vs_smallest_context"] = growth;
    j["median_step_spread_across_max_model_len"] = spread;
    j["results"] = results;
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

bool IsServingBench(const std::vector<std::string>& args) {
  return std::find(args.begin(), args.end(), "--serving") != args.end() ||
         std::find(args.begin(), args.end(), "--context-sweep") != args.end();
}

int RunServingBench(const std::vector<std::string>& args) {
  const bool serving = std::find(args.begin(), args.end(), "--serving") != args.end();
  const bool sweep = std::find(args.begin(), args.end(), "--context-sweep") != args.end();
  if (serving && sweep) throw MakeError("bench: --serving and --context-sweep are separate runs; give one");
  if (serving) return RunServing(args);
  if (sweep) return RunContextSweep(args);
  throw MakeError("bench: expected --serving or --context-sweep");
}

uint64_t ParseByteSize(const std::string& flag, const std::string& text) {
  auto bad = [&] { return MakeError(flag, ": expected a byte count such as 268435456, 64M or 2G, got '", text, "'"); };
  size_t digits_end = 0;
  while (digits_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits_end])) || text[digits_end] == '.')) {
    ++digits_end;
  }
  const std::string number = text.substr(0, digits_end);
  if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) throw bad();
  std::string suffix;
  for (size_t i = digits_end; i < text.size(); ++i)
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  static const std::vector<std::pair<std::string, int>> kUnits = {
      {"", 0},    {"b", 0}, {"k", 1},  {"kb", 1},  {"kib", 1}, {"m", 2},  {"mb", 2},
      {"mib", 2}, {"g", 3}, {"gb", 3}, {"gib", 3}, {"t", 4},   {"tb", 4}, {"tib", 4}};
  const auto unit = std::find_if(kUnits.begin(), kUnits.end(), [&](const auto& u) { return u.first == suffix; });
  if (unit == kUnits.end()) throw bad();
  const double bytes = std::stod(number) * std::pow(1024.0, unit->second);
  if (!std::isfinite(bytes) || bytes >= 18446744073709551616.0) throw MakeError(flag, ": '", text, "' is too large");
  if (unit->second == 0 && number.find('.') != std::string::npos) throw bad();  // a fraction of a byte
  return static_cast<uint64_t>(bytes);
}

}  // namespace deepinfer
