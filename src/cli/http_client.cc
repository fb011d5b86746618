#include "cli/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>

#include "core/error.h"

namespace deepinfer {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

}  // namespace

HttpUrl ParseHttpUrl(const std::string& flag, const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  std::string_view rest(url);
  if (!rest.starts_with(kScheme)) throw MakeError(flag, ": expected http://HOST:PORT, got '", url, "'");
  rest.remove_prefix(kScheme.size());
  if (rest.ends_with('/')) rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size() ||
      rest.find('/') != std::string_view::npos) {
    throw MakeError(flag, ": expected http://HOST:PORT, got '", url, "'");
  }
  HttpUrl parsed{std::string(rest.substr(0, colon)), std::string(rest.substr(colon + 1)), url, ""};
  for (const char c : parsed.port) {
    if (c < '0' || c > '9') throw MakeError(flag, ": bad port in '", url, "'");
  }
  return parsed;
}

int HttpRequest(const HttpUrl& url, const std::string& method, const std::string& path, const std::string& body,
                const std::function<void(std::string_view)>& on_body) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  const auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (!ec) stream.connect(endpoints, ec);
  if (ec) throw MakeError(url.text, ": cannot connect: ", ec.message());

  http::request<http::string_body> request(http::string_to_verb(method), path, 11);
  request.set(http::field::host, url.host);
  request.set(http::field::content_type, "application/json");
  if (!url.api_key.empty()) request.set(http::field::authorization, "Bearer " + url.api_key);
  request.body() = body;
  request.prepare_payload();
  http::write(stream, request, ec);
  if (ec) throw MakeError(url.text, path, ": cannot send the request: ", ec.message());

  // A chunked body (SSE) goes to on_body chunk by chunk as it arrives; any other at the end.
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
    on_body(std::string_view(data.data(), data.size()));
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  http::read(stream, buffer, parser, ec);
  if (ec) throw MakeError(url.text, path, ": the response broke off: ", ec.message());
  if (!parser.chunked()) on_body(parser.get().body());
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return static_cast<int>(parser.get().result_int());
}

std::string HttpGet(const HttpUrl& url, const std::string& path) {
  std::string body;
  const int status = HttpRequest(url, "GET", path, "", [&](std::string_view piece) { body += piece; });
  if (status != 200) throw MakeError(url.text, path, ": HTTP ", status, ": ", body.substr(0, 300));
  return body;
}

}  // namespace deepinfer
