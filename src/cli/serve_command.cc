#include "cli/serve_command.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "backend/cpu_backend.h"
#include "cli/default_model.h"
#include "cli/flags.h"
#include "cli/isa_flag.h"
#include "cli/model_loading.h"
#include "cli/serving_bench.h"
#include "cli/speculative_flag.h"
#include "cli/weight_layout_flag.h"
#include "core/error.h"
#include "core/model_directory.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kernels/cpu/cpu_context.h"
#include "model/model.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

// With --kv-cache-memory auto: this share of the machine's memory.
constexpr uint64_t kAutoKvShareDivisor = 4;

struct ServeOptions {
  std::string model;  // empty: the embedded default
  std::string served_model_name;
  HttpOptions http;
  int64_t max_model_len = 0;                // 0: the model's
  std::optional<uint64_t> kv_cache_memory;  // unset: auto
  std::optional<int64_t> max_running;       // unset: the engine's default, capped at max_step_tokens
  int64_t max_step_tokens = EngineOptions{}.max_step_tokens;
  int64_t max_queue = 512;
  int threads = 0;
  std::optional<IsaLevel> isa;
  std::optional<Bf16Dot> kernel_plan;
  WeightLayout weight_layout = WeightLayout::kAuto;
  bool prefix_cache = true;
  std::optional<uint64_t> seed;
  bool speculative = false;
  int speculative_length = 0;
};

int64_t Positive(const std::string& flag, const std::string& v, int64_t max) { return ParseIntFlag(flag, v, 1, max); }

std::chrono::milliseconds Seconds(const std::string& flag, const std::string& v) {
  const double s = ParseRealFlag(flag, v);
  if (s <= 0 || s > 86400) throw MakeError(flag, ": expected seconds in (0, 86400], got '", v, "'");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

const std::vector<Flag<ServeOptions>>& ServeFlags() {
  static const std::vector<Flag<ServeOptions>> flags = {
      {"--model", "DIR", kModelFlagHelp, [](ServeOptions& o, const std::string& v) { o.model = v; }},
      {"--host", "ADDR", "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)",
       [](ServeOptions& o, const std::string& v) { o.http.host = v; }},
      {"--port", "PORT", "TCP port (default 8000; 0 picks a free one and prints it)",
       [](ServeOptions& o, const std::string& v) {
         o.http.port = static_cast<uint16_t>(ParseIntFlag("--port", v, 0, 65535));
       }},
      {"--served-model-name", "NAME", "the model name clients use (default: the model folder's name)",
       [](ServeOptions& o, const std::string& v) {
         if (v.empty()) throw MakeError("--served-model-name: must not be empty");
         o.served_model_name = v;
       }},
      {"--api-key", "KEY", "require \"Authorization: Bearer KEY\" on /v1/*, /tokenize, /detokenize",
       [](ServeOptions& o, const std::string& v) {
         if (v.empty()) throw MakeError("--api-key: must not be empty");
         o.http.api_key = v;
       }},
      {"--max-model-len", "N", "context limit, prompt + completion (default: the model's max_position_embeddings)",
       [](ServeOptions& o, const std::string& v) {
         o.max_model_len = ParseIntFlag("--max-model-len", v, 2, kMaxTokensFlag);
       }},
      {"--kv-cache-memory", "BYTES", "KV cache budget, e.g. 512M or 4G; 0: no limit (default auto: 1/4 of RAM)",
       [](ServeOptions& o, const std::string& v) {
         if (v == "auto") {
           o.kv_cache_memory.reset();
         } else {
           o.kv_cache_memory = ParseByteSize("--kv-cache-memory", v);
         }
       }},
      {"--max-running", "N", "requests running at once (default 64, at most --max-step-tokens)",
       [](ServeOptions& o, const std::string& v) { o.max_running = Positive("--max-running", v, INT_MAX); }},
      {"--max-step-tokens", "N", "tokens one engine step may run (default 512)",
       [](ServeOptions& o, const std::string& v) { o.max_step_tokens = Positive("--max-step-tokens", v, 1 << 20); }},
      {"--max-queue", "N", "requests accepted beyond the running ones before 429 (default 512)",
       [](ServeOptions& o, const std::string& v) { o.max_queue = ParseIntFlag("--max-queue", v, 0, 1 << 20); }},
      {"--threads", "N", "compute threads (default: all cores; at most 4 per hardware thread)",
       [](ServeOptions& o, const std::string& v) { o.threads = ParseThreadsFlag("--threads", v); }},
      IsaFlag<ServeOptions>(),
      KernelPlanFlag<ServeOptions>(),
      WeightLayoutFlag<ServeOptions>(),
      SpeculativeFlag<ServeOptions>(),
      SpeculativeLengthFlag<ServeOptions>(),
      {"--http-threads", "N", "threads running the HTTP connections (default 2)",
       [](ServeOptions& o, const std::string& v) {
         o.http.threads = static_cast<int>(Positive("--http-threads", v, 256));
       }},
      {"--max-request-bytes", "BYTES", "largest request body, e.g. 16M (default 16M; larger: 413)",
       [](ServeOptions& o, const std::string& v) {
         o.http.max_request_bytes = ParseByteSize("--max-request-bytes", v);
         if (o.http.max_request_bytes == 0) throw MakeError("--max-request-bytes: must be positive");
       }},
      {"--max-connections", "N", "open connections at most; more are closed at once (default 4096)",
       [](ServeOptions& o, const std::string& v) {
         o.http.max_connections = static_cast<size_t>(Positive("--max-connections", v, 1 << 20));
       }},
      {"--header-timeout", "SECONDS",
       "time a client has to send a request header; also the keep-alive idle time (default 10)",
       [](ServeOptions& o, const std::string& v) { o.http.header_timeout = Seconds("--header-timeout", v); }},
      {"--shutdown-timeout", "SECONDS", "on SIGINT / SIGTERM, time running requests get to finish (default 10)",
       [](ServeOptions& o, const std::string& v) { o.http.shutdown_timeout = Seconds("--shutdown-timeout", v); }},
      {"--no-prefix-cache", nullptr, "turn the prefix cache off",
       [](ServeOptions& o, const std::string&) { o.prefix_cache = false; }},
      {"--seed", "S", "seeds requests that bring none (default: random)",
       [](ServeOptions& o, const std::string& v) { o.seed = ParseSeedFlag("--seed", v); }},
      {"--no-access-log", nullptr, "no per-request log line",
       [](ServeOptions& o, const std::string&) { o.http.access_log = false; }},
  };
  return flags;
}

uint64_t AutoKvBudget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / kAutoKvShareDivisor;
}

std::string Bytes(uint64_t bytes) {
  if (bytes == 0) return "no limit";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

int RunServeCommand(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    std::cout << "usage: deepinfer serve [flags]\n"
                 "an OpenAI-compatible HTTP server (see /openapi.json); a chat page at /\n";
    PrintFlagHelp(std::cout, ServeFlags());
    return 0;
  }
  ServeOptions o;
  ParseFlags("serve", args, ServeFlags(), o);
  const int64_t max_running = o.max_running.value_or(std::min<int64_t>(EngineOptions{}.max_running, o.max_step_tokens));
  if (max_running > o.max_step_tokens) {
    throw MakeError("--max-running: ", max_running, " exceeds --max-step-tokens ", o.max_step_tokens,
                    " (every running request decodes in every step)");
  }
  const bool embedded = o.model.empty();
  const std::string model_dir = ModelDirOrDefault(o.model);
  std::optional<Tokenizer> loaded = Tokenizer::FromModelDirectory(ModelDirectory(model_dir));
  if (!loaded) throw MakeError(model_dir, ": no tokenizer.json (the server needs it for text and for output)");
  const Tokenizer tokenizer = std::move(*loaded);
  std::fprintf(stderr, "serve: loading %s\n", model_dir.c_str());
  const IsaLevel isa = ChooseIsaFlag(o.isa);
  const Bf16Dot plan = ChooseKernelPlanFlag(o.kernel_plan, isa);
  const std::unique_ptr<Model> model =
      LoadModelAndPageIn(model_dir, ModelOptions{.max_context = o.max_model_len}, isa, plan, o.weight_layout);
  if (const Model::InterleaveReport& r = model->interleave_report(); r.matrices > 0) {
    std::fprintf(stderr, "serve: %lld weight matrices interleaved, %.3f GiB in %.2f s\n",
                 static_cast<long long>(r.matrices), static_cast<double>(r.bytes) / (1 << 30), r.seconds);
  }
  std::string name = o.served_model_name;
  if (name.empty()) {
    name = embedded ? "deepinfer-default" : std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(model_dir).lexically_normal().parent_path().filename().string();
  }
  const ModelInfo info = DescribeModel(name, tokenizer, model->config().vocab_size, model->max_context());

  ThreadPool pool(o.threads);
  EngineOptions engine_options;
  engine_options.max_step_tokens = o.max_step_tokens;
  engine_options.max_running = static_cast<int>(max_running);
  engine_options.kv_cache_memory = o.kv_cache_memory.value_or(AutoKvBudget());
  engine_options.prefix_caching = o.prefix_cache;
  engine_options.seed = o.seed;
  engine_options.speculative = o.speculative;
  engine_options.speculative_length = o.speculative_length;
  CpuBackend backend(pool, isa, plan);
  Engine engine(*model, ComputeContext{backend}, engine_options, &tokenizer);
  Metrics metrics;
  EngineLoop loop(engine, metrics, static_cast<int>(max_running),
                  static_cast<int>(std::min<int64_t>(o.max_queue, INT_MAX)));
  HttpServer server(o.http, loop, metrics, info);
  const uint16_t port = server.Listen();

  std::fprintf(stderr, "serve: model %s (%s): vocabulary %lld, context %lld tokens\n", name.c_str(), model_dir.c_str(),
               static_cast<long long>(info.vocab_size), static_cast<long long>(info.max_model_len));
  if (tokenizer.size() > static_cast<size_t>(info.vocab_size)) {
    std::fprintf(stderr,
                 "serve: note: the model's vocabulary (%lld ids) is smaller than its tokenizer's (%zu): prompts whose "
                 "tokens fall outside it are refused with a 400 (token-id prompts below %lld work)\n",
                 static_cast<long long>(info.vocab_size), tokenizer.size(), static_cast<long long>(info.vocab_size));
  }
  std::fprintf(stderr,
               "serve: engine: KV budget %s, max running %lld, max step tokens %lld, queue %lld, prefix cache %s, "
               "%d compute threads (%s%s%s), %d HTTP threads%s\n",
               Bytes(engine_options.kv_cache_memory).c_str(), static_cast<long long>(max_running),
               static_cast<long long>(o.max_step_tokens), static_cast<long long>(o.max_queue),
               o.prefix_cache ? "on" : "off", pool.size(), std::string(IsaName(isa)).c_str(),
               isa == IsaLevel::kAvx512 ? ", kernel plan " : "",
               isa == IsaLevel::kAvx512 ? std::string(Bf16DotName(plan)).c_str() : "", o.http.threads,
               o.http.api_key.empty() ? "" : ", API key required");
  std::fprintf(stderr, "serve: listening on http://%s:%u\n", o.http.host.c_str(), static_cast<unsigned>(port));
  server.Run();
  std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace deepinfer
