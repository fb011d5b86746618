#include "server/engine_loop.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>

#include "server/metrics.h"

namespace deepinfer {

void Channel::SetNotifier(std::function<void()> notify) {
  const std::lock_guard lock(mutex_);
  notify_ = std::move(notify);
}

std::vector<ChoiceEvent> Channel::Take() {
  const std::lock_guard lock(mutex_);
  notified_ = false;
  return std::exchange(events_, {});
}

void Channel::Push(std::vector<ChoiceEvent> events) {
  std::function<void()> notify;
  {
    const std::lock_guard lock(mutex_);
    for (ChoiceEvent& e : events) events_.push_back(std::move(e));
    if (!notified_ && notify_) {
      notified_ = true;
      notify = notify_;
    }
  }
  if (notify) notify();
}

// A submission while the loop serves it (loop thread only).
struct EngineLoop::Active {
  std::shared_ptr<Channel> channel;
  int n = 1;
  Clock::time_point arrival;
  std::vector<std::optional<RequestParams>> waiting;  // choices not handed to the engine yet
  std::vector<std::optional<RequestId>> ids;          // engine ids, once added
  std::vector<bool> finished;
  std::vector<std::optional<Clock::time_point>> first_token;
  std::vector<Clock::time_point> last_token;
  std::vector<int64_t> generated;
  std::vector<int64_t> prompt_tokens;
  size_t unfinished = 0;
  std::vector<ChoiceEvent> outbox;  // pushed to the channel once per step
};

EngineLoop::EngineLoop(Engine& engine, Metrics& metrics, int max_running, int max_queue)
    : engine_(engine),
      metrics_(metrics),
      capacity_(static_cast<size_t>(max_running) + static_cast<size_t>(max_queue)),
      stats_(engine.stats()),
      thread_([this] { Run(); }) {}

EngineLoop::~EngineLoop() {
  BeginShutdown(Clock::now());
  Join();
}

SubmitResult EngineLoop::Submit(Submission submission) {
  const size_t choices = submission.choices.size();
  {
    const std::lock_guard lock(mutex_);
    if (!accepting_) return SubmitResult::kShuttingDown;
    // Reserve the capacity under the lock so two submissions cannot both take the last slot.
    if (outstanding_.load() + choices > capacity_) return SubmitResult::kQueueFull;
    outstanding_ += choices;
    pending_ += choices;
    commands_.emplace_back(std::move(submission));
  }
  wake_.notify_one();
  return SubmitResult::kAccepted;
}

void EngineLoop::Cancel(const std::shared_ptr<Channel>& channel) {
  {
    const std::lock_guard lock(mutex_);
    commands_.emplace_back(CancelCommand{channel});
  }
  wake_.notify_one();
}

void EngineLoop::ResetPrefixCache(std::function<void()> done) {
  {
    const std::lock_guard lock(mutex_);
    commands_.emplace_back(ResetCommand{std::move(done)});
  }
  wake_.notify_one();
}

LoopStats EngineLoop::Stats() const {
  LoopStats s;
  {
    const std::lock_guard lock(stats_mutex_);
    s.engine = stats_;
  }
  s.pending = pending_.load();
  s.outstanding = outstanding_.load();
  s.capacity = capacity_;
  return s;
}

void EngineLoop::BeginShutdown(Clock::time_point deadline) {
  {
    const std::lock_guard lock(mutex_);
    accepting_ = false;
    if (!deadline_ || deadline < *deadline_) deadline_ = deadline;
  }
  wake_.notify_one();
}

void EngineLoop::Join() {
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Run() {
  while (true) {
    std::vector<Command> commands;
    bool shutting_down = false;
    bool past_deadline = false;
    {
      std::unique_lock lock(mutex_);
      const bool busy = !engine_.idle() || !active_.empty();
      if (!busy) {
        if (!accepting_ && commands_.empty()) break;  // shutdown and nothing left
        wake_.wait(lock, [&] { return !commands_.empty() || !accepting_; });
      }
      commands.swap(commands_);
      shutting_down = !accepting_;
      past_deadline = deadline_ && Clock::now() >= *deadline_;
    }
    for (Command& command : commands) Execute(command);
    if (shutting_down && past_deadline) AbortAll("the server is shutting down");
    if (engine_.idle()) {
      // Siblings wait for a leader in the engine; with the engine idle none is left to wait for.
      for (const std::unique_ptr<Active>& a : active_) {
        for (size_t i = 0; i < a->waiting.size(); ++i) {
          if (a->waiting[i]) AddChoice(*a, i);
        }
      }
      if (engine_.idle()) {
        Publish();
        for (const std::unique_ptr<Active>& a : active_) {
          if (!a->outbox.empty()) a->channel->Push(std::exchange(a->outbox, {}));
        }
        std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->unfinished == 0; });
        continue;
      }
    }
    std::vector<RequestUpdate> updates;
    try {
      updates = engine_.Step();
    } catch (const std::exception& e) {
      // The engine reports request failures as updates; an exception here is a bug. Fail every
      // request rather than leave clients waiting forever.
      std::fprintf(stderr, "serve: internal error in the engine step: %s\n", e.what());
      AbortAll(std::string("internal error: ") + e.what());
      continue;
    }
    Route(std::move(updates), Clock::now());  // publishes the stats
  }
  Publish();
}

void EngineLoop::Execute(Command& command) {
  if (auto* submission = std::get_if<Submission>(&command)) {
    auto active = std::make_unique<Active>();
    const size_t count = submission->choices.size();
    active->channel = std::move(submission->channel);
    active->n = std::max(1, submission->n);
    active->arrival = submission->arrival;
    active->waiting.reserve(count);
    for (RequestParams& p : submission->choices) active->waiting.emplace_back(std::move(p));
    active->ids.resize(count);
    active->finished.assign(count, false);
    active->first_token.resize(count);
    active->last_token.resize(count);
    active->generated.assign(count, 0);
    active->prompt_tokens.assign(count, 0);
    active->unfinished = count;
    Active& a = *active;
    active_.push_back(std::move(active));
    for (size_t i = 0; i < count && a.waiting[i]; i += static_cast<size_t>(a.n)) AddChoice(a, i);
    if (!a.outbox.empty()) a.channel->Push(std::exchange(a.outbox, {}));
    return;
  }
  if (auto* cancel = std::get_if<CancelCommand>(&command)) {
    for (const std::unique_ptr<Active>& a : active_) {
      if (a->channel != cancel->channel) continue;
      for (size_t i = 0; i < a->ids.size(); ++i) {
        if (a->finished[i]) continue;
        if (a->ids[i]) {
          engine_.Abort(*a->ids[i]);  // reported by the next Step, which frees nothing more
        } else {
          RequestUpdate update;
          update.finish = FinishReason::kAbort;
          update.prompt_tokens = static_cast<int64_t>(a->waiting[i]->prompt.size());
          a->waiting[i].reset();
          --pending_;
          FinishChoice(*a, i, update, Clock::now());
        }
      }
    }
    return;
  }
  engine_.ClearPrefixCache();
  Publish();
  if (auto* reset = std::get_if<ResetCommand>(&command); reset && reset->done) reset->done();
}

void EngineLoop::AddChoice(Active& a, size_t choice) {
  RequestParams params = std::move(*a.waiting[choice]);
  a.waiting[choice].reset();
  --pending_;
  const int64_t prompt_tokens = static_cast<int64_t>(params.prompt.size());
  a.prompt_tokens[choice] = prompt_tokens;
  try {
    const RequestId id = engine_.Add(std::move(params));
    a.ids[choice] = id;
    owners_[id] = Owner{&a, choice};
  } catch (const std::exception& e) {
    // Every choice of a submission has the same parameters but the seed: refuse them all.
    for (size_t i = 0; i < a.ids.size(); ++i) {
      if (a.finished[i]) continue;
      if (a.ids[i]) {
        engine_.Abort(*a.ids[i]);
        continue;
      }
      if (a.waiting[i]) {
        a.waiting[i].reset();
        --pending_;
      }
      RequestUpdate update;
      update.finish = FinishReason::kError;
      update.error = e.what();
      update.prompt_tokens = prompt_tokens;
      a.outbox.push_back(ChoiceEvent{i, update, Clock::now(), /*rejected=*/true});
      a.finished[i] = true;
      --a.unfinished;
      --outstanding_;
    }
  }
}

void EngineLoop::Route(std::vector<RequestUpdate> updates, Clock::time_point time) {
  for (RequestUpdate& update : updates) {
    const auto owner = owners_.find(update.id);
    if (owner == owners_.end()) continue;
    Active& a = *owner->second.active;
    const size_t choice = owner->second.choice;
    if (!update.tokens.empty()) {
      if (!a.first_token[choice]) a.first_token[choice] = time;
      a.last_token[choice] = time;
      a.generated[choice] += static_cast<int64_t>(update.tokens.size());
    }
    // The first choice of a prompt has its prompt in the prefix cache now: add its siblings.
    const bool leader = choice % static_cast<size_t>(a.n) == 0;
    if (leader && (!update.tokens.empty() || update.finished())) {
      for (size_t i = choice + 1; i < choice + static_cast<size_t>(a.n) && i < a.waiting.size(); ++i) {
        if (a.waiting[i]) AddChoice(a, i);
      }
    }
    if (update.finished()) {
      owners_.erase(owner);
      FinishChoice(a, choice, update, time);
      continue;
    }
    a.outbox.push_back(ChoiceEvent{choice, std::move(update), time, false});
  }
  // The stats before the events: a client that has seen its request end must not find it still
  // running in /metrics or /health.
  Publish();
  for (const std::unique_ptr<Active>& a : active_) {
    if (!a->outbox.empty()) a->channel->Push(std::exchange(a->outbox, {}));
  }
  std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->unfinished == 0; });
}

void EngineLoop::FinishChoice(Active& a, size_t choice, const RequestUpdate& update, Clock::time_point time) {
  FinishedChoice finished;
  finished.reason = update.finish;
  finished.prompt_tokens = update.prompt_tokens > 0 ? update.prompt_tokens : a.prompt_tokens[choice];
  finished.generated_tokens = a.generated[choice];
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (a.first_token[choice]) {
    finished.ttft_s = seconds(*a.first_token[choice] - a.arrival);
    if (a.generated[choice] >= 2) {
      finished.tpot_s =
          seconds(a.last_token[choice] - *a.first_token[choice]) / static_cast<double>(a.generated[choice] - 1);
    }
  }
  finished.e2e_s = seconds(time - a.arrival);
  metrics_.RecordFinished(finished);
  a.outbox.push_back(ChoiceEvent{choice, update, time, false});
  a.finished[choice] = true;
  --a.unfinished;
  --outstanding_;
}

void EngineLoop::AbortAll(const std::string& why) {
  for (const std::unique_ptr<Active>& a : active_) {
    for (size_t i = 0; i < a->ids.size(); ++i) {
      if (a->finished[i]) continue;
      if (a->ids[i] && owners_.count(*a->ids[i])) {
        engine_.Abort(*a->ids[i]);
        owners_.erase(*a->ids[i]);
      } else if (a->waiting[i]) {
        a->waiting[i].reset();
        --pending_;
      }
      RequestUpdate update;
      update.finish = FinishReason::kAbort;
      update.error = why;
      FinishChoice(*a, i, update, Clock::now());
    }
  }
  // The engine reports the aborts in its next Step; their owners are gone, so they are dropped.
  try {
    while (!engine_.idle()) (void)engine_.Step();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve: internal error while aborting: %s\n", e.what());
  }
  Publish();  // before the events, as in Route
  for (const std::unique_ptr<Active>& a : active_) {
    if (!a->outbox.empty()) a->channel->Push(std::exchange(a->outbox, {}));
  }
  active_.clear();
}

void EngineLoop::Publish() {
  EngineStats stats = engine_.stats();
  const std::lock_guard lock(stats_mutex_);
  stats_ = std::move(stats);
}

}  // namespace deepinfer
