// EngineLoop: the engine thread and its queues, on the tiny model.
#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "backend/cpu_backend.h"
#include "server/metrics.h"
#include "server_fixture.h"

namespace deepinfer {
namespace {

using testing::ProjectTokenizer;
using testing::TinyModel;

// Collects a channel's events; Wait returns once `choices` choices finished.
class Collector {
 public:
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();

  Collector() {
    channel->SetNotifier([this] {
      const std::lock_guard lock(mutex_);
      cv_.notify_all();
    });
  }

  std::vector<ChoiceEvent> Wait(size_t choices) {
    std::vector<ChoiceEvent> all;
    size_t finished = 0;
    std::unique_lock lock(mutex_);
    while (finished < choices) {
      lock.unlock();
      for (ChoiceEvent& e : channel->Take()) {
        finished += e.update.finished();
        all.push_back(std::move(e));
      }
      lock.lock();
      if (finished < choices) cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
    return all;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
};

RequestParams Greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.stop.max_tokens = max_tokens;
  p.stop.ignore_eos = true;
  return p;
}

class EngineLoopTest : public ::testing::Test {
 protected:
  ThreadPool pool{2};
  CpuBackend backend{pool, DetectIsa()};
  Engine engine{TinyModel(), ComputeContext{backend}, EngineOptions{.max_step_tokens = 128, .max_running = 4},
                &ProjectTokenizer()};
  Metrics metrics;
};

TEST_F(EngineLoopTest, DeliversEachChoiceToItsChannel) {
  EngineLoop loop(engine, metrics, 4, 8);
  Collector a, b;
  ASSERT_EQ(loop.Submit({{Greedy({5, 6, 7}, 5)}, 1, a.channel}), SubmitResult::kAccepted);
  ASSERT_EQ(loop.Submit({{Greedy({8, 9}, 3), Greedy({8, 9}, 3)}, 2, b.channel}), SubmitResult::kAccepted);
  std::vector<ChoiceEvent> ea = a.Wait(1), eb = b.Wait(2);
  size_t tokens_a = 0, tokens_b[2] = {0, 0};
  for (const ChoiceEvent& e : ea) tokens_a += e.update.tokens.size();
  for (const ChoiceEvent& e : eb) tokens_b[e.choice] += e.update.tokens.size();
  EXPECT_EQ(tokens_a, 5u);
  EXPECT_EQ(tokens_b[0], 3u);
  EXPECT_EQ(tokens_b[1], 3u);
  EXPECT_EQ(ea.back().update.finish, FinishReason::kMaxTokens);
  EXPECT_EQ(loop.Stats().outstanding, 0u);
}

// A client that has seen its request end reads /metrics or /health next: the stats it finds must
// already be those after the end (they were published after the events once, and the server test
// of the metrics saw a finished stream still running).
TEST_F(EngineLoopTest, StatsShowAChoiceFinishedBeforeItsLastEventArrives) {
  EngineLoop loop(engine, metrics, 4, 8);
  auto channel = std::make_shared<Channel>();
  std::promise<LoopStats> at_end;
  channel->SetNotifier([&] {  // on the loop thread, inside Push
    for (const ChoiceEvent& e : channel->Take()) {
      if (e.update.finished()) at_end.set_value(loop.Stats());
    }
  });
  ASSERT_EQ(loop.Submit({{Greedy({5, 6, 7}, 3)}, 1, channel}), SubmitResult::kAccepted);
  const LoopStats stats = at_end.get_future().get();
  EXPECT_EQ(stats.engine.running, 0u);
  EXPECT_EQ(stats.engine.waiting, 0u);
  EXPECT_EQ(stats.outstanding, 0u);
}

// n > 1: the siblings wait for the first choice's prefill and adopt it from the prefix cache.
TEST_F(EngineLoopTest, SiblingsAdoptTheFirstChoicesPrompt) {
  EngineLoop loop(engine, metrics, 4, 8);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + i);
  Collector c;
  ASSERT_EQ(loop.Submit({{Greedy(prompt, 2), Greedy(prompt, 2), Greedy(prompt, 2)}, 3, c.channel}),
            SubmitResult::kAccepted);
  std::map<size_t, int64_t> cached;
  for (const ChoiceEvent& e : c.Wait(3)) {
    if (!e.update.tokens.empty()) cached[e.choice] = e.update.cached_tokens;
  }
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 32);  // two full 16-token blocks
  EXPECT_EQ(cached[2], 32);
}

TEST_F(EngineLoopTest, CapacityAndCancel) {
  EngineLoop loop(engine, metrics, 1, 1);
  Collector a, b, c;
  ASSERT_EQ(loop.Submit({{Greedy({5}, 1000)}, 1, a.channel}), SubmitResult::kAccepted);
  ASSERT_EQ(loop.Submit({{Greedy({6}, 1000)}, 1, b.channel}), SubmitResult::kAccepted);
  EXPECT_EQ(loop.Submit({{Greedy({7}, 1)}, 1, c.channel}), SubmitResult::kQueueFull);
  loop.Cancel(a.channel);
  loop.Cancel(b.channel);
  EXPECT_EQ(a.Wait(1).back().update.finish, FinishReason::kAbort);
  EXPECT_EQ(b.Wait(1).back().update.finish, FinishReason::kAbort);
  EXPECT_EQ(loop.Submit({{Greedy({7}, 1)}, 1, c.channel}), SubmitResult::kAccepted);
  c.Wait(1);
  std::promise<void> reset;
  loop.ResetPrefixCache([&] { reset.set_value(); });
  reset.get_future().wait();
  EXPECT_EQ(loop.Stats().engine.kv_pages_in_use, 0u);
  const std::string text = metrics.Render(loop.Stats());
  EXPECT_NE(text.find("deepinfer_requests_finished_total{finish_reason=\"abort\"} 2\n"), std::string::npos) << text;
}

TEST_F(EngineLoopTest, RefusedRequestsAreRejectedEvents) {
  EngineLoop loop(engine, metrics, 4, 8);
  Collector c;
  RequestParams bad = Greedy({1, 2}, 3);
  bad.sampling.top_p = 5.0f;  // the engine's own validation refuses it
  ASSERT_EQ(loop.Submit({{bad, bad}, 2, c.channel}), SubmitResult::kAccepted);
  const std::vector<ChoiceEvent> events = c.Wait(2);
  ASSERT_EQ(events.size(), 2u);
  for (const ChoiceEvent& e : events) {
    EXPECT_TRUE(e.rejected);
    EXPECT_NE(e.update.error.find("top_p"), std::string::npos) << e.update.error;
  }
  EXPECT_EQ(loop.Stats().outstanding, 0u);
}

TEST_F(EngineLoopTest, ShutdownAbortsWhatIsLeftAtTheDeadline) {
  EngineLoop loop(engine, metrics, 4, 8);
  Collector c;
  ASSERT_EQ(loop.Submit({{Greedy({5, 6}, 100000)}, 1, c.channel}), SubmitResult::kAccepted);
  loop.BeginShutdown(Clock::now() + std::chrono::milliseconds(200));
  EXPECT_EQ(loop.Submit({{Greedy({5}, 1)}, 1, c.channel}), SubmitResult::kShuttingDown);
  const std::vector<ChoiceEvent> events = c.Wait(1);
  EXPECT_EQ(events.back().update.finish, FinishReason::kAbort);
  EXPECT_NE(events.back().update.error.find("shutting down"), std::string::npos);
  loop.Join();
}

}  // namespace
}  // namespace deepinfer
