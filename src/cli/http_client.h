// A small blocking HTTP/1.1 client (Boost.Beast) for `bench --serving --url`: one request per
// connection, the response body handed over as it arrives (SSE streams), plain http only.
// Thread-safe: every call makes its own connection.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace deepinfer {

struct HttpUrl {
  std::string host;
  std::string port;
  std::string text;     // as given, for messages
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
};

// "http://HOST:PORT" (an optional trailing "/"); `flag` is named in errors.
HttpUrl ParseHttpUrl(const std::string& flag, const std::string& url);

// Sends the request and calls `on_body` with each piece of the (de-chunked) body as it comes.
// Returns the status. Throws Error naming the URL when the connection fails.
int HttpRequest(const HttpUrl& url, const std::string& method, const std::string& path, const std::string& body,
                const std::function<void(std::string_view)>& on_body);

// GET, whole body; throws Error unless the status is 200.
std::string HttpGet(const HttpUrl& url, const std::string& path);

}  // namespace deepinfer
