// A whole `deepinfer serve` stack in-process for the server tests (the embedded default's
// checkpoint, tests/data/models/tiny-a), and a blocking loopback HTTP client small enough to
// drive it from many threads. These tests also run under ASan + UBSan and TSan.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "backend/cpu_backend.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

inline const std::string kTinyModelDir = DEEPINFER_TEST_DATA_DIR "/models/tiny-a";

inline const Tokenizer& ProjectTokenizer() {
  static const Tokenizer tokenizer = Tokenizer::FromFile(DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json");
  return tokenizer;
}

inline const Model& TinyModel() {
  static const std::unique_ptr<Model> model = Model::Load(kTinyModelDir);
  return *model;
}

struct StackOptions {
  int max_running = 16;
  int max_queue = 256;
  HttpOptions http = {};
};

// Engine, loop and HTTP server on a free loopback port, served on a background thread.
class ServerStack {
 public:
  explicit ServerStack(StackOptions options = {})
      : pool_(2),
        backend_(pool_, DetectIsa()),
        info_(DescribeModel("tiny-a", ProjectTokenizer(), TinyModel().config().vocab_size, TinyModel().max_context())),
        engine_(TinyModel(), ComputeContext{backend_},
                EngineOptions{.max_step_tokens = 256, .max_running = options.max_running}, &ProjectTokenizer()),
        loop_(engine_, metrics_, options.max_running, options.max_queue),
        server_(WithFreePort(options.http), loop_, metrics_, info_),
        port_(server_.Listen()),
        runner_([this] { server_.Run(); }) {}

  ~ServerStack() {
    server_.Stop();
    runner_.join();
  }

  uint16_t port() const { return port_; }
  EngineLoop& loop() { return loop_; }
  Metrics& metrics() { return metrics_; }

  // Until nothing runs or waits; then drops the prefix cache and returns the loop's stats.
  LoopStats SettleAndClearCache() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (loop_.Stats().outstanding > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::promise<void> done;
    loop_.ResetPrefixCache([&done] { done.set_value(); });
    done.get_future().wait();
    return loop_.Stats();
  }

 private:
  static HttpOptions WithFreePort(HttpOptions http) {
    http.port = 0;
    http.access_log = false;
    return http;
  }

  ThreadPool pool_;
  CpuBackend backend_;
  ModelInfo info_;
  Engine engine_;
  Metrics metrics_;
  EngineLoop loop_;
  HttpServer server_;
  uint16_t port_;
  std::thread runner_;
};

// A blocking client connection to 127.0.0.1:port.
class Connection {
 public:
  explicit Connection(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    timeval timeout{60, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~Connection() { Close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool connected() const { return connected_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  // Reads until `done(received)` holds, the peer closes, or the receive timeout; returns all.
  template <typename Done>
  std::string ReadUntil(Done done) {
    std::string received;
    char buffer[16384];
    while (!done(received)) {
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      received.append(buffer, static_cast<size_t>(n));
    }
    return received;
  }

  std::string ReadAll() {
    return ReadUntil([](const std::string&) { return false; });
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

inline std::string Post(std::string_view path, std::string_view body) {
  return "POST " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

inline int StatusOf(const std::string& response) {
  return response.size() > 12 && response.starts_with("HTTP/1.1 ") ? std::stoi(response.substr(9, 3)) : 0;
}

inline size_t Count(const std::string& text, std::string_view what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

// The response's value of `name` in /metrics text, e.g. `deepinfer_prompt_tokens_total`.
inline double MetricValue(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(metrics.substr(at + name.size() + 2));
}

}  // namespace deepinfer::testing
