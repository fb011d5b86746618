// The HTTP server in-process: many concurrent streams with a third of the clients leaving at
// random points, and malformed requests, all on loopback. Small enough to run under ASan +
// UBSan and TSan (tools/test.sh); the pytest suite (tests/server/*.py) runs the full soak.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "server_fixture.h"

namespace deepinfer {
namespace {

using testing::Connection;
using testing::Count;
using testing::MetricValue;
using testing::Post;
using testing::ServerStack;
using testing::StackOptions;
using testing::StatusOf;

struct ClientPlan {
  std::string body;
  int max_tokens = 0;
  int leave_after_events = -1;  // -1: read to the end; 0: right after the response header
};

struct ClientResult {
  int status = 0;
  bool done = false;
  size_t events = 0;
};

ClientResult RunClient(uint16_t port, const ClientPlan& plan) {
  ClientResult result;
  Connection c(port);
  if (!c.connected() || !c.Send(Post("/v1/completions", plan.body))) return result;
  const std::string received = c.ReadUntil([&](const std::string& r) {
    if (plan.leave_after_events == 0) return r.find("\r\n\r\n") != std::string::npos;
    if (plan.leave_after_events > 0 && Count(r, "data: {") >= static_cast<size_t>(plan.leave_after_events)) {
      return true;
    }
    return r.find("data: [DONE]") != std::string::npos && r.ends_with("0\r\n\r\n");
  });
  result.status = testing::StatusOf(received);
  result.done = received.find("data: [DONE]") != std::string::npos;
  result.events = Count(received, "data: {");
  return result;  // leaving: the connection closes here
}

TEST(HttpServer, ConcurrentStreamsWithClientsLeavingMidStream) {
  ServerStack stack;
  std::mt19937 rng(7);
  constexpr int kClients = 48;
  std::vector<ClientPlan> plans(kClients);
  int survivors = 0, leavers = 0;
  int64_t prompt_tokens = 0, survivor_tokens = 0;
  for (int i = 0; i < kClients; ++i) {
    ClientPlan& p = plans[i];
    std::string prompt;
    const int length = 4 + static_cast<int>(rng() % 20);
    for (int t = 0; t < length; ++t) prompt += (t ? "," : "") + std::to_string(3 + rng() % 500);
    const bool leaves = i % 3 == 2;
    p.max_tokens = leaves ? 64 : 6 + static_cast<int>(rng() % 8);
    p.leave_after_events = leaves ? static_cast<int>(rng() % 4) : -1;
    p.body = "{\"prompt\": [" + prompt + "], \"max_tokens\": " + std::to_string(p.max_tokens) +
             ", \"ignore_eos\": true, \"temperature\": 0, \"stream\": true}";
    prompt_tokens += length;
    (leaves ? leavers : survivors) += 1;
    if (!leaves) survivor_tokens += p.max_tokens;
  }
  std::vector<ClientResult> results(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] { results[i] = RunClient(stack.port(), plans[i]); });
  }
  for (std::thread& t : threads) t.join();

  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    EXPECT_EQ(results[i].status, 200);
    if (plans[i].leave_after_events < 0) {
      EXPECT_TRUE(results[i].done);
      // One chunk per token at most, plus the finish chunk; tokens may be merged when slow.
      EXPECT_GE(results[i].events, 2u);
    } else {
      EXPECT_FALSE(results[i].done);
    }
  }
  const LoopStats stats = stack.SettleAndClearCache();
  EXPECT_EQ(stats.outstanding, 0u);
  EXPECT_EQ(stats.engine.kv_pages_in_use, 0u);  // aborted requests freed everything
  const std::string metrics = stack.metrics().Render(stats);
  EXPECT_EQ(MetricValue(metrics, "deepinfer_requests_finished_total{finish_reason=\"length\"}"), survivors);
  EXPECT_EQ(MetricValue(metrics, "deepinfer_requests_finished_total{finish_reason=\"abort\"}"), leavers);
  EXPECT_EQ(MetricValue(metrics, "deepinfer_http_client_disconnects_total"), leavers);
  EXPECT_EQ(MetricValue(metrics, "deepinfer_prompt_tokens_total"), prompt_tokens);
  const double generated = MetricValue(metrics, "deepinfer_generation_tokens_total");
  EXPECT_GE(generated, survivor_tokens);
  EXPECT_LE(generated, survivor_tokens + 64 * leavers);
}

struct BadRequest {
  const char* name;
  std::string bytes;
  bool shutdown_write;
  int status;
};

// Malformed input under the sanitizers: each gets its status, and the server goes on serving.
TEST(HttpServer, MalformedRequestsGetTheirStatus) {
  StackOptions options;
  options.http.max_request_bytes = 4096;
  options.http.header_timeout = std::chrono::milliseconds(500);
  ServerStack stack(options);
  const std::string deep = std::string(500, '[') + std::string(500, ']');
  const std::vector<BadRequest> cases = {
      {"bad JSON", Post("/v1/chat/completions", "{\"messages\": ["), false, 400},
      {"invalid UTF-8", Post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}"),
       false, 400},
      {"deep nesting", Post("/v1/completions", deep), false, 400},
      {"1e400", Post("/v1/completions", "{\"prompt\": [1], \"temperature\": 1e400}"), false, 400},
      {"wrong types", Post("/v1/completions", "{\"prompt\": {\"a\": 1}, \"n\": \"x\"}"), false, 400},
      {"vocabulary", Post("/v1/completions", "{\"prompt\": [1, 600]}"), false, 400},
      {"text outside the vocabulary",
       Post("/v1/chat/completions",
            "{\"messages\": [{\"role\": \"user\", \"content\": "
            "\"hello\"}]}"),
       false, 400},
      {"context", Post("/v1/completions", "{\"prompt\": [1], \"max_tokens\": 100000}"), false, 400},
      {"unknown model", Post("/v1/completions", "{\"prompt\": [1], \"model\": \"m\"}"), false, 404},
      {"truncated body", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"prompt\": [1", true,
       400},
      {"too large", Post("/v1/completions", std::string(5000, ' ')), true, 413},
      {"garbage", "GET\x01/ HTTP/9\r\n\r\n", false, 400},
      {"header too large", "GET /health HTTP/1.1\r\nX: " + std::string(40000, 'a') + "\r\n\r\n", false, 431},
      {"no such route", "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", false, 404},
  };
  for (const BadRequest& bad : cases) {
    SCOPED_TRACE(bad.name);
    Connection c(stack.port());
    ASSERT_TRUE(c.connected());
    c.Send(bad.bytes);
    if (bad.shutdown_write) c.ShutdownWrite();
    const std::string response = c.ReadUntil([](const std::string& r) { return r.find("}}") != std::string::npos; });
    EXPECT_EQ(StatusOf(response), bad.status) << response.substr(0, 300);
    EXPECT_NE(response.find("{\"error\":{\"message\":"), std::string::npos) << response.substr(0, 300);
  }
  // A header trickling in is cut off at the header deadline.
  Connection slow(stack.port());
  slow.Send("POST /v1/completions HTTP/1.1\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(slow.ReadAll(), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // Still serving.
  Connection ok(stack.port());
  ok.Send(Post("/v1/completions", "{\"prompt\": [1, 2], \"max_tokens\": 2}"));
  const std::string response =
      ok.ReadUntil([](const std::string& r) { return r.find("\"usage\"") != std::string::npos; });
  EXPECT_EQ(StatusOf(response), 200) << response;
}

}  // namespace
}  // namespace deepinfer
