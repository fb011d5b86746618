#include "server/http_server.h"

#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>
#include <vector>

#include "server/chat_page.h"
#include "server/openapi.h"

namespace deepinfer {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr size_t kHeaderLimit = 32 << 10;
constexpr auto kLingerTime = std::chrono::seconds(2);

enum class Route {
  kChatPage,
  kHealth,
  kMetrics,
  kOpenApi,
  kModels,
  kModel,
  kChatCompletions,
  kCompletions,
  kTokenize,
  kDetokenize,
  kResetPrefixCache,
};

struct RouteInfo {
  Route route;
  const char* path;  // "/v1/models/" matches by prefix
  http::verb method;
  bool needs_key;
  const char* label;  // the metrics label
};

constexpr RouteInfo kRoutes[] = {
    {Route::kChatPage, "/", http::verb::get, false, "/"},
    {Route::kHealth, "/health", http::verb::get, false, "/health"},
    {Route::kMetrics, "/metrics", http::verb::get, false, "/metrics"},
    {Route::kOpenApi, "/openapi.json", http::verb::get, false, "/openapi.json"},
    {Route::kModels, "/v1/models", http::verb::get, true, "/v1/models"},
    {Route::kModel, "/v1/models/", http::verb::get, true, "/v1/models/{model}"},
    {Route::kChatCompletions, "/v1/chat/completions", http::verb::post, true, "/v1/chat/completions"},
    {Route::kCompletions, "/v1/completions", http::verb::post, true, "/v1/completions"},
    {Route::kTokenize, "/tokenize", http::verb::post, true, "/tokenize"},
    {Route::kDetokenize, "/detokenize", http::verb::post, true, "/detokenize"},
    {Route::kResetPrefixCache, "/reset_prefix_cache", http::verb::post, true, "/reset_prefix_cache"},
};

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

// The route whose path matches, and whether the method does too.
const RouteInfo* FindRoute(std::string_view path, http::verb method, bool* path_known) {
  *path_known = false;
  for (const RouteInfo& r : kRoutes) {
    const std::string_view p = r.path;
    const bool match = p.ends_with('/') && p.size() > 1 ? path.starts_with(p) && path.size() > p.size() : path == p;
    if (!match) continue;
    *path_known = true;
    if (r.method == method) return &r;
  }
  return nullptr;
}

// Constant-time in the key's bytes: a wrong key's timing says nothing about the right one.
bool SameKey(std::string_view given, std::string_view key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

// The parser's own errors (bad syntax, limits), as opposed to the connection breaking.
bool IsHttpError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::need_more).category();
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One in-flight generation request on a session.
struct Generation {
  GenerationRequest request;
  std::unique_ptr<ResponseBuilder> builder;  // refers to `request`
  std::shared_ptr<Channel> channel;
  std::string id;
  // Streaming: SSE text waiting for the socket, the text being written, and progress flags.
  std::string out;
  std::string wire;
  bool header_written = false;
  bool writing = false;
  bool ended = false;
  bool last_chunk_sent = false;
  http::response<http::empty_body> sse_header;
  std::optional<http::response_serializer<http::empty_body>> sse_serializer;
};

}  // namespace

struct HttpServer::Impl {
  Impl(HttpOptions o, EngineLoop& l, Metrics& m, const ModelInfo& i)
      : options(std::move(o)),
        loop(l),
        metrics(m),
        model(i),
        openapi(OpenApiJson(i, !this->options.api_key.empty())),
        ioc(std::max(1, this->options.threads)),
        acceptor(ioc),
        signals(ioc, SIGINT, SIGTERM),
        shutdown_timer(ioc),
        accept_retry(ioc) {}

  void Accept();
  void BeginShutdown();
  void PollShutdown();

  HttpOptions options;
  EngineLoop& loop;
  Metrics& metrics;
  const ModelInfo& model;
  const std::string openapi;
  // Declared before the io_context: sessions still queued in it update these when it goes.
  std::atomic<size_t> connections{0};
  std::atomic<size_t> busy{0};  // requests between their header and the end of their response
  std::atomic<bool> stopping{false};
  Clock::time_point shutdown_deadline;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer shutdown_timer;
  net::steady_timer accept_retry;
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server) : stream_(std::move(socket)), server_(server) {
    ++server_.connections;
    server_.metrics.ConnectionOpened();
  }
  ~Session() {
    if (busy_) --server_.busy;
    --server_.connections;
    server_.metrics.ConnectionClosed();
  }

  void Start() { net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::ReadHeader, Self())); }

 private:
  std::shared_ptr<Session> Self() { return shared_from_this(); }

  void ReadHeader() {
    if (server_.stopping) return Close();
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_.options.max_request_bytes);
    stream_.expires_after(server_.options.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnHeader, Self()));
  }

  void OnHeader(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted) return Close();
    if (ec == beast::error::timeout) {
      // Idle keep-alive connections end here too; only a partial header is worth a line.
      if (buffer_.size() > 0 && server_.options.access_log) {
        std::fprintf(stderr, "serve: closed a connection whose header took over %.0f ms\n",
                     Millis(server_.options.header_timeout));
      }
      return;
    }
    start_ = Clock::now();
    BeginRequest();
    if (ec == http::error::body_limit) return TooLarge();
    if (ec == http::error::header_limit) {
      return RespondError(ApiError(431, "invalid_request_error", "header_too_large", "",
                                   "the request header exceeds " + std::to_string(kHeaderLimit) + " bytes"),
                          /*close=*/true);
    }
    if (ec) {
      if (!IsHttpError(ec)) return Close();  // the connection broke
      return RespondError(InvalidRequest("", "malformed HTTP request: " + ec.message(), "bad_request"), true);
    }
    const auto& req = parser_->get();
    method_ = std::string(req.method_string());
    target_ = std::string(req.target());
    bool path_known = false;
    route_ = FindRoute(PathOf(target_), req.method(), &path_known);
    if (route_ == nullptr) {
      if (path_known) {
        return RespondError(ApiError(405, "invalid_request_error", "method_not_allowed", "",
                                     "method " + method_ + " is not allowed on " + std::string(PathOf(target_))),
                            true);
      }
      return RespondError(ApiError(404, "invalid_request_error", "not_found", "",
                                   "no route " + std::string(PathOf(target_)) + " (see /openapi.json)"),
                          true);
    }
    if (route_->needs_key && !server_.options.api_key.empty()) {
      const beast::string_view header = req[http::field::authorization];
      const std::string_view auth(header.data(), header.size());
      constexpr std::string_view kBearer = "Bearer ";
      const bool ok = auth.starts_with(kBearer) && SameKey(auth.substr(kBearer.size()), server_.options.api_key);
      if (!ok) {
        return RespondError(ApiError(401, "invalid_request_error", "invalid_api_key", "",
                                     auth.empty() ? "missing API key: send \"Authorization: Bearer KEY\""
                                                  : "incorrect API key provided"),
                            true);
      }
    }
    if (req[http::field::expect] == "100-continue") {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
      return http::async_write(stream_, *cont, [self = Self(), cont](beast::error_code e, size_t) {
        if (e) return self->Close();
        self->ReadBody();
      });
    }
    ReadBody();
  }

  void ReadBody() {
    stream_.expires_after(server_.options.body_timeout);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnBody, Self()));
  }

  void OnBody(beast::error_code ec, size_t) {
    if (ec == beast::error::timeout || ec == net::error::operation_aborted) return;
    if (ec == http::error::body_limit) return TooLarge();
    if (ec == http::error::partial_message || ec == http::error::end_of_stream) {
      const auto length = parser_->content_length();
      return RespondError(
          InvalidRequest("",
                         "truncated body: the connection ended after " + std::to_string(parser_->get().body().size()) +
                             " of " + (length ? std::to_string(*length) : std::string("?")) + " bytes",
                         "truncated_body"),
          true);
    }
    if (ec) {
      if (!IsHttpError(ec)) return Close();
      return RespondError(InvalidRequest("", "malformed HTTP body: " + ec.message(), "bad_request"), true);
    }
    stream_.expires_never();
    Dispatch();
  }

  void TooLarge() {
    RespondError(ApiError(413, "invalid_request_error", "request_too_large", "",
                          "the request body exceeds the limit of " + std::to_string(server_.options.max_request_bytes) +
                              " bytes"),
                 true);
  }

  void Dispatch() {
    const std::string& body = parser_->get().body();
    const ModelInfo& model = server_.model;
    try {
      switch (route_->route) {
        case Route::kChatPage:
          return Respond(200, std::string(ChatPageHtml()), "text/html; charset=utf-8");
        case Route::kHealth: {
          const LoopStats s = server_.loop.Stats();
          const Json health = {{"status", server_.stopping ? "shutting_down" : "ok"},
                               {"model", model.name},
                               {"vocab_size", model.vocab_size},
                               {"max_model_len", model.max_model_len},
                               {"running", s.engine.running},
                               {"waiting", s.engine.waiting + s.pending},
                               {"kv_pages_in_use", s.engine.kv_pages_in_use},
                               {"kv_used_bytes", s.engine.kv_in_use_bytes},
                               {"kv_budget_bytes", s.engine.kv_budget_bytes},
                               {"prefix_cache_blocks", s.engine.prefix_cached_blocks}};
          return Respond(server_.stopping ? 503 : 200, DumpJson(health), "application/json");
        }
        case Route::kMetrics:
          return Respond(200, server_.metrics.Render(server_.loop.Stats()), "text/plain; version=0.0.4");
        case Route::kOpenApi:
          return Respond(200, server_.openapi, "application/json");
        case Route::kModels:
          return Respond(200, DumpJson(ModelsResponse(model)), "application/json");
        case Route::kModel: {
          const std::string_view id = PathOf(target_).substr(std::string_view("/v1/models/").size());
          if (id != model.name) {
            throw ApiError(404, "invalid_request_error", "model_not_found", "model",
                           "The model `" + std::string(id.substr(0, 256)) + "` does not exist");
          }
          return Respond(200, DumpJson(ModelsResponse(model)["data"][0]), "application/json");
        }
        case Route::kChatCompletions:
          return Generate(ParseChatCompletionRequest(Parse(body), model));
        case Route::kCompletions:
          return Generate(ParseCompletionRequest(Parse(body), model));
        case Route::kTokenize:
          return Respond(200, DumpJson(TokenizeResponse(Parse(body), model)), "application/json");
        case Route::kDetokenize:
          return Respond(200, DumpJson(DetokenizeResponse(Parse(body), model)), "application/json");
        case Route::kResetPrefixCache: {
          // Answered once the loop has done it, so a /health that follows sees the result. The
          // callback holds the session until then.
          auto executor = stream_.get_executor();
          return server_.loop.ResetPrefixCache([self = Self(), executor] {
            net::post(executor, [self] { self->Respond(200, DumpJson(Json{{"status", "ok"}}), "application/json"); });
          });
        }
      }
    } catch (const ApiError& e) {
      return RespondError(e, false);
    } catch (const std::exception& e) {
      // Every request error is an ApiError; anything else is a bug worth a 500, not a crash.
      return RespondError(ApiError(500, "server_error", "internal_error", "", e.what()), false);
    }
  }

  Json Parse(const std::string& body) const {
    return ParseRequestJson(
        body, JsonLimits{server_.options.max_request_bytes, server_.options.max_json_depth, DuplicateKeys::kLastWins});
  }

  void Generate(GenerationRequest request) {
    auto gen = std::make_unique<Generation>();
    gen->request = std::move(request);
    std::vector<RequestParams> choices = ExpandChoices(gen->request);
    const LoopStats stats = server_.loop.Stats();
    if (choices.size() > stats.capacity) {
      throw InvalidRequest("n", "this request has " + std::to_string(choices.size()) +
                                    " choices; the server holds at most " + std::to_string(stats.capacity) +
                                    " at once (--max-running + --max-queue)");
    }
    const bool chat = gen->request.kind == ApiKind::kChat;
    gen->id = RandomId(chat ? "chatcmpl-" : "cmpl-");
    gen->builder = std::make_unique<ResponseBuilder>(gen->request, server_.model, gen->id,
                                                     static_cast<int64_t>(std::time(nullptr)));
    gen->channel = std::make_shared<Channel>();
    std::weak_ptr<Session> weak = Self();
    auto executor = stream_.get_executor();
    gen->channel->SetNotifier([weak, executor] {
      net::post(executor, [weak] {
        if (auto self = weak.lock()) self->OnEngineEvents();
      });
    });
    Submission submission;
    submission.choices = std::move(choices);
    submission.n = gen->request.n;
    submission.channel = gen->channel;
    submission.arrival = start_;
    gen_ = std::move(gen);
    switch (server_.loop.Submit(std::move(submission))) {
      case SubmitResult::kAccepted:
        break;
      case SubmitResult::kQueueFull:
        gen_.reset();
        return RespondError(ApiError(429, "rate_limit_error", "queue_full", "",
                                     "the server is at capacity (" + std::to_string(stats.capacity) +
                                         " requests running or queued); retry later"),
                            false);
      case SubmitResult::kShuttingDown:
        gen_.reset();
        return RespondError(ApiError(503, "server_error", "shutting_down", "", "the server is shutting down"), false);
    }
    WatchDisconnect();
    if (gen_->request.stream) WriteSseHeader();
  }

  void WriteSseHeader() {
    Generation& g = *gen_;
    g.sse_header = http::response<http::empty_body>(http::status::ok, parser_->get().version());
    g.sse_header.set(http::field::server, "deepinfer");
    g.sse_header.set(http::field::content_type, "text/event-stream");
    g.sse_header.set(http::field::cache_control, "no-cache");
    g.sse_header.keep_alive(parser_->get().keep_alive());
    g.sse_header.chunked(true);
    g.sse_serializer.emplace(g.sse_header);
    g.writing = true;
    status_ = 200;
    server_.metrics.RecordHttp(route_->label, 200);
    stream_.expires_after(server_.options.write_timeout);
    http::async_write_header(stream_, *g.sse_serializer, [self = Self()](beast::error_code ec, size_t) {
      if (!self->gen_) return;
      self->gen_->writing = false;
      self->gen_->header_written = true;
      self->OnStreamWritten(ec);
    });
  }

  void OnEngineEvents() {
    if (!gen_ || gone_) return;
    std::vector<ChoiceEvent> events = gen_->channel->Take();
    if (events.empty()) return;
    ResponseBuilder& b = *gen_->builder;
    if (gen_->request.stream) {
      gen_->out += b.StreamEvents(events);
      if (b.done() && !gen_->ended) {
        gen_->out += b.StreamEnd();
        gen_->ended = true;
      }
      return PumpStream();
    }
    b.Collect(events);
    if (!b.done()) return;
    StopWatching();
    if (b.rejection()) return RespondError(InvalidRequest("", *b.rejection()), false);
    if (b.failure()) {
      if (server_.stopping) {
        return RespondError(ApiError(503, "server_error", "shutting_down", "", *b.failure()), false);
      }
      return RespondError(ApiError(500, "server_error", "generation_failed", "", *b.failure()), false);
    }
    Respond(200, b.Body(), "application/json");
  }

  void PumpStream() {
    Generation& g = *gen_;
    if (!g.header_written || g.writing || gone_) return;
    stream_.expires_after(server_.options.write_timeout);
    if (!g.out.empty()) {
      g.writing = true;
      g.wire = std::exchange(g.out, {});
      return net::async_write(stream_, http::make_chunk(net::buffer(g.wire)),
                              [self = Self()](beast::error_code ec, size_t) { self->OnStreamWritten(ec); });
    }
    if (g.ended && !g.last_chunk_sent) {
      g.writing = true;
      g.last_chunk_sent = true;
      return net::async_write(stream_, http::make_chunk_last(),
                              [self = Self()](beast::error_code ec, size_t) { self->OnStreamWritten(ec); });
    }
    stream_.expires_never();
    if (g.last_chunk_sent) {
      StopWatching();
      EndRequest(g.sse_header.keep_alive());
    }
  }

  void OnStreamWritten(beast::error_code ec) {
    if (!gen_) return;
    gen_->writing = false;
    if (ec) return ClientGone();
    PumpStream();
  }

  // A readable socket while a request runs means the client closed it (or pipelined the next
  // request, which waits in the kernel until this response is done).
  void WatchDisconnect() {
    const uint64_t watch = ++watch_;
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = Self(), watch](beast::error_code ec) { self->OnReadable(ec, watch); });
  }

  void OnReadable(beast::error_code ec, uint64_t watch) {
    if (watch != watch_ || !gen_ || gone_ || ec == net::error::operation_aborted) return;
    if (ec) return ClientGone();
    char byte = 0;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return ClientGone();
    if (n < 0) return WatchDisconnect();
  }

  void StopWatching() {
    ++watch_;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
  }

  void ClientGone() {
    if (gone_) return;
    gone_ = true;
    // A stream whose [DONE] is out (a client may close before the final empty chunk) ended.
    const bool complete = gen_ && gen_->request.stream && gen_->ended;
    if (gen_ && !complete) {
      server_.loop.Cancel(gen_->channel);
      server_.metrics.RecordDisconnect();
      if (!gen_->request.stream) {
        status_ = 499;  // nginx's "client closed request"
        server_.metrics.RecordHttp(route_->label, status_);
      }
      Log(" (client gone)");
    }
    Close();
  }

  void Respond(int status, std::string body, std::string_view content_type,
               std::vector<std::pair<http::field, std::string>> headers = {}, bool close = false) {
    const unsigned version = parser_ && parser_->get().version() != 0 ? parser_->get().version() : 11;
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), version);
    res->set(http::field::server, "deepinfer");
    res->set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    for (const auto& [field, value] : headers) res->set(field, value);
    res->body() = std::move(body);
    const bool keep_alive = !close && !server_.stopping && parser_ && parser_->get().keep_alive();
    res->keep_alive(keep_alive);
    res->prepare_payload();
    status_ = status;
    server_.metrics.RecordHttp(route_ ? route_->label : "other", status);
    stream_.expires_after(server_.options.write_timeout);
    http::async_write(stream_, *res, [self = Self(), res, keep_alive, close](beast::error_code ec, size_t) {
      self->stream_.expires_never();
      if (ec) return self->Close();
      self->EndRequest(keep_alive, /*linger=*/close);
    });
  }

  void RespondError(const ApiError& error, bool close) {
    std::vector<std::pair<http::field, std::string>> headers;
    if (error.status() == 429) headers.emplace_back(http::field::retry_after, "1");
    if (error.status() == 401) headers.emplace_back(http::field::www_authenticate, "Bearer");
    error_ = error.what();
    Respond(error.status(), error.Body(), "application/json", std::move(headers), close);
  }

  void BeginRequest() {
    if (!busy_) ++server_.busy;
    busy_ = true;
    status_ = 0;
    error_.clear();
    route_ = nullptr;
    method_.clear();
    target_.clear();
  }

  void EndRequest(bool keep_alive, bool linger = false) {
    Log("");
    gen_.reset();
    if (busy_) --server_.busy;
    busy_ = false;
    if (linger) return Linger();
    if (keep_alive && !server_.stopping) return ReadHeader();
    Close();
  }

  // After an error that left the body unread: stop sending, read what the client still sends
  // for a moment, so it sees our response instead of a reset connection.
  void Linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    drain_.resize(64 << 10);
    stream_.async_read_some(net::buffer(drain_), [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      self->LingerMore();
    });
  }

  void LingerMore() {
    stream_.async_read_some(net::buffer(drain_), [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      self->LingerMore();
    });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  void Log(std::string_view note) {
    if (!server_.options.access_log || logged_ == start_) return;
    logged_ = start_;
    const Clock::time_point now = Clock::now();
    std::string ttft = "-";
    std::string id = "-";
    Usage usage;
    if (gen_) {
      id = gen_->id;
      usage = gen_->builder->usage();
      if (const auto first = gen_->builder->first_token_time()) {
        char text[32];
        std::snprintf(text, sizeof(text), "%.1f", Millis(*first - start_));
        ttft = text;
      }
    }
    std::fprintf(stderr, "serve: %s \"%s %s\" %d prompt=%lld completion=%lld ttft_ms=%s total_ms=%.1f%s%s%s\n",
                 id.c_str(), method_.empty() ? "?" : method_.c_str(),
                 target_.empty() ? "?" : std::string(PathOf(target_)).substr(0, 200).c_str(), status_,
                 static_cast<long long>(usage.prompt_tokens), static_cast<long long>(usage.completion_tokens),
                 ttft.c_str(), Millis(now - start_), note.data(),
                 error_.empty() ? "" : " error: ", error_.substr(0, 200).c_str());
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const RouteInfo* route_ = nullptr;
  std::string method_;
  std::string target_;
  std::unique_ptr<Generation> gen_;
  Clock::time_point start_;
  Clock::time_point logged_;
  int status_ = 0;
  std::string error_;
  uint64_t watch_ = 0;
  bool gone_ = false;
  bool busy_ = false;
  std::string drain_;
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (stopping || ec == net::error::operation_aborted) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly instead of spinning.
      std::fprintf(stderr, "serve: accept failed: %s\n", ec.message().c_str());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (connections >= options.max_connections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks are small; send each at once
      std::make_shared<Session>(std::move(socket), *this)->Start();
    }
    Accept();
  });
}

void HttpServer::Impl::BeginShutdown() {
  if (stopping.exchange(true)) return;
  std::fprintf(stderr, "serve: shutting down: finishing running requests for up to %.1f s\n",
               std::chrono::duration<double>(options.shutdown_timeout).count());
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  shutdown_deadline = Clock::now() + options.shutdown_timeout;
  loop.BeginShutdown(shutdown_deadline);
  PollShutdown();
}

// Every response finished (aborted ones included), or well past the deadline: stop serving.
void HttpServer::Impl::PollShutdown() {
  if (busy == 0 || Clock::now() > shutdown_deadline + kLingerTime) {
    ioc.stop();
    return;
  }
  shutdown_timer.expires_after(std::chrono::milliseconds(20));
  shutdown_timer.async_wait([this](beast::error_code ec) {
    if (!ec) PollShutdown();
  });
}

HttpServer::HttpServer(HttpOptions options, EngineLoop& loop, Metrics& metrics, const ModelInfo& model)
    : impl_(std::make_unique<Impl>(std::move(options), loop, metrics, model)) {}

HttpServer::~HttpServer() = default;

uint16_t HttpServer::Listen() {
  Impl& s = *impl_;
  const std::string where = s.options.host + ":" + std::to_string(s.options.port);
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  const auto endpoints = resolver.resolve(s.options.host, std::to_string(s.options.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) throw MakeError("--host: cannot resolve '", s.options.host, "': ", ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw MakeError("cannot listen on ", where, ": ", ec.message());
  return s.acceptor.local_endpoint().port();
}

void HttpServer::Run() {
  Impl& s = *impl_;
  s.signals.async_wait([&s](beast::error_code ec, int) {
    if (!ec) s.BeginShutdown();
  });
  s.Accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < s.options.threads; ++i) threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (std::thread& t : threads) t.join();
  s.loop.BeginShutdown(Clock::now());
  s.loop.Join();
}

void HttpServer::Stop() {
  net::post(impl_->ioc, [this] { impl_->BeginShutdown(); });
}

}  // namespace deepinfer
