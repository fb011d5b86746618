// The HTTP front of `deepinfer serve`: Boost.Beast on one Asio io_context run by a few threads
// (`http_threads`), so thousands of idle or streaming connections cost no thread each.
//
// Routes: GET / (chat page), /health, /metrics, /openapi.json, /v1/models[/{id}];
// POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize, /reset_prefix_cache.
// With an API key, every POST route and /v1/models need "Authorization: Bearer KEY" (401).
//
// Each connection is a session on its own strand: read the header (a deadline for the whole
// header, so a client trickling bytes is cut off), check route, key and Content-Length (413
// before the body is read), read the body (bounded), parse and validate the request on this
// thread, submit it to the EngineLoop, then write the response or stream SSE chunks as the
// loop's events arrive. While a request runs the session watches its socket: a client that
// closes (also mid-stream) has its request cancelled at once, which frees its KV pages.
// HTTP/1.1 keep-alive; one request at a time per connection.
//
// Shutdown (SIGINT / SIGTERM, or Stop): stop accepting, let requests finish until the
// deadline, abort the rest, close, return from Run.
//
// One access-log line per request on stderr: id, method, target, status, prompt and
// completion tokens, time to first token, total time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/openai_api.h"

namespace deepinfer {

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (Listen returns it)
  std::string api_key;   // empty: no key needed
  int threads = 2;
  size_t max_request_bytes = size_t{16} << 20;
  int max_json_depth = 64;
  size_t max_connections = 4096;
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};  // also the keep-alive idle time
  std::chrono::milliseconds body_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(60)};  // one write to a slow reader
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(10)};
  bool access_log = true;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, EngineLoop& loop, Metrics& metrics, const ModelInfo& model);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; throws Error naming the address. Returns the port (useful with port 0).
  uint16_t Listen();
  // Serves until SIGINT / SIGTERM or Stop(), then shuts down (see above) and returns.
  void Run();
  // Thread-safe; as a signal.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
