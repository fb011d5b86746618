// The one thread that owns the Engine in `deepinfer serve`.
//
//   HTTP thread                          loop thread
//   -----------                          -----------
//   channel = make_shared<Channel>()
//   channel->SetNotifier(post to me)
//   loop.Submit({choices, channel}) ──►  command queue ──► Engine::Add (n > 1: see below)
//                                        Engine::Step ──► channel->Push(events) ──► notifier
//   channel->Take() ◄─────────────────────────────────────────────────────────────┘
//   loop.Cancel(channel) (client gone) ► Engine::Abort: its KV pages go back at once
//
// Only the loop thread touches the Engine (which is not thread-safe); JSON, chat rendering and
// tokenization stay on the HTTP threads. The loop steps while there is work and sleeps on a
// condition variable otherwise.
//
// Capacity: at most `max_running + max_queue` choices (engine requests) are accepted and
// unfinished at once; Submit refuses more (the server answers 429), and refuses everything
// once shutdown began (503).
//
// n > 1: the first choice of each prompt goes in alone; its siblings are added once it has
// produced its first token, so they adopt the prompt from the prefix cache instead of all
// computing it in the same step. This changes no result (the engine is exact under any
// admission order) and costs the siblings one step of latency.
//
// Thread safety: every public member may be called from any thread. A channel's notifier runs
// on the loop thread: it must only hand work elsewhere (post to an executor), never block or
// call back into the loop.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/engine.h"

namespace deepinfer {

class Metrics;

using Clock = std::chrono::steady_clock;

// One choice's progress: an Engine update, stamped with the end of the step that produced it.
struct ChoiceEvent {
  size_t choice = 0;  // index into Submission::choices
  RequestUpdate update;
  Clock::time_point time;
  // Engine::Add refused the request (update.error says why; nothing was generated): a 400.
  bool rejected = false;
};

// One submission's events, from the loop thread to the HTTP session that waits for them.
class Channel {
 public:
  // Set before submitting. Called on the loop thread when events arrive and no earlier
  // notification is still unanswered by a Take.
  void SetNotifier(std::function<void()> notify);
  // Everything that arrived since the last Take, in order.
  std::vector<ChoiceEvent> Take();
  // Loop thread.
  void Push(std::vector<ChoiceEvent> events);

 private:
  std::mutex mutex_;
  std::vector<ChoiceEvent> events_;
  std::function<void()> notify_;
  bool notified_ = false;
};

struct Submission {
  std::vector<RequestParams> choices;  // prompt-major: choice i is prompt i / n, sample i % n
  int n = 1;
  std::shared_ptr<Channel> channel;
  Clock::time_point arrival = Clock::now();  // when the HTTP request arrived (latency metrics)
};

enum class SubmitResult { kAccepted, kQueueFull, kShuttingDown };

struct LoopStats {
  EngineStats engine;
  size_t pending = 0;      // accepted choices not yet handed to the engine (queue, deferred siblings)
  size_t outstanding = 0;  // accepted choices not finished
  size_t capacity = 0;     // max_running + max_queue
};

class EngineLoop {
 public:
  // Starts the loop thread. `engine` and `metrics` must outlive the loop.
  EngineLoop(Engine& engine, Metrics& metrics, int max_running, int max_queue);
  ~EngineLoop();  // BeginShutdown(now), then joins
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  SubmitResult Submit(Submission submission);
  // Aborts the submission's unfinished choices (a client that went away).
  void Cancel(const std::shared_ptr<Channel>& channel);
  // Drops every prefix-cache entry (POST /reset_prefix_cache); `done` runs on the loop thread
  // afterwards, once Stats() shows the result (same rules as a notifier).
  void ResetPrefixCache(std::function<void()> done);
  LoopStats Stats() const;

  // Stops accepting; running and queued requests go on until `deadline`, then are aborted.
  void BeginShutdown(Clock::time_point deadline);
  // After BeginShutdown: waits until every request finished and the thread ended.
  void Join();

 private:
  struct Active;
  struct CancelCommand {
    std::shared_ptr<Channel> channel;
  };
  struct ResetCommand {
    std::function<void()> done;
  };
  using Command = std::variant<Submission, CancelCommand, ResetCommand>;

  void Run();
  void Execute(Command& command);
  void AddChoice(Active& active, size_t choice);
  void Route(std::vector<RequestUpdate> updates, Clock::time_point time);
  void FinishChoice(Active& active, size_t choice, const RequestUpdate& update, Clock::time_point time);
  void AbortAll(const std::string& why);
  void Publish();

  Engine& engine_;
  Metrics& metrics_;
  const size_t capacity_;

  mutable std::mutex mutex_;  // commands_, accepting_, deadline_
  std::condition_variable wake_;
  std::vector<Command> commands_;
  bool accepting_ = true;
  std::optional<Clock::time_point> deadline_;
  std::atomic<size_t> outstanding_{0};
  std::atomic<size_t> pending_{0};

  mutable std::mutex stats_mutex_;
  EngineStats stats_;

  // Loop thread only.
  std::vector<std::unique_ptr<Active>> active_;
  struct Owner {
    Active* active;
    size_t choice;
  };
  std::map<RequestId, Owner> owners_;

  std::thread thread_;
};

}  // namespace deepinfer
