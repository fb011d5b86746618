// Chooses, for each shape of step, whether a step's parallel calls run on all of the pool's
// threads or one after another on the calling thread (ThreadPool::SetSerial), by timing both
// ways on this machine, now.
//
// Why: a handed-off call costs its hand-off (publishing the parts, the other thread claiming
// them, the join, and the activations crossing between the cores' caches). On a 2-vCPU VM that
// is a few microseconds in some minutes and several times more in others, depending on where the
// host places the vCPUs (measured: the embedded model's batch-4 step took 0.98-1.05 ms on two
// threads in some runs, 1.16-1.74 ms in others, and 1.03-1.12 ms on one). A model whose calls
// take only a few microseconds each can lose more to the hand-offs than the second thread
// saves, and no fixed threshold is right on every host in every minute.
//
// How: a shape's steps run on all threads at first. From its third step on, every `interval`-th
// step runs the other way (a probe); its time against the time of the shape's step just before
// it (run the current way) is one sample of serial / parallel time, and a moving average of the
// samples' logarithms picks the way. A probe that confirms the current way by a clear margin
// doubles the interval (up to kMaxInterval), so a settled shape spends few steps probing, and a
// probe that lost by a lot waits until its cost is paid down (kProbeCostBudget).
//
// Only shapes whose handed-off calls are short get probed. A serial run saves at most the
// hand-off of each call, while the second thread saves about half of each call's work; so where
// a call's wall time on all threads is more than twice the hand-off (kProbeBelowCallSeconds,
// above a wake-up's tens of microseconds), the threads win and the shape always runs on them: a
// large model never probes and pays nothing.
//
// Results do not depend on the way: the pool hands out the same parts either way, and every
// body's result depends only on its part.
//
// Thread contract: as the pool's (one caller at a time, the one that runs the steps).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>

#include "core/thread_pool.h"

namespace deepinfer {

class StepParallelism {
 public:
  // Shapes whose handed-off calls take longer than this on average (wall time, all threads)
  // always run on all threads.
  static constexpr double kProbeBelowCallSeconds = 100e-6;
  // Probe intervals, in steps of one shape.
  static constexpr uint64_t kFirstProbeStep = 2;  // steps 0 and 1 run parallel (step 0 is cold)
  static constexpr uint64_t kMinInterval = 8;
  static constexpr uint64_t kMaxInterval = 128;
  // The way changes when the average says the other is faster by more than this (a log ratio):
  // hysteresis, so noise between two equal ways does not flip it every probe.
  static constexpr double kSwitchMargin = 0.02;
  // A probe that loses by more than this confirms the way clearly and doubles the interval.
  static constexpr double kClearMargin = 0.05;
  // A probe that loses costs its extra time once; the next one waits long enough to keep that
  // under this fraction of the steps' time (a 16-thread pool's serial probe loses ~15 steps'
  // worth, so it waits ~1500 steps), up to kMaxCostInterval.
  static constexpr double kProbeCostBudget = 0.01;
  static constexpr uint64_t kMaxCostInterval = 1 << 14;
  // The weight of a new sample in the moving average.
  static constexpr double kSampleWeight = 0.5;

  // kChoose: as above. kAllThreads / kOneThread: every step that way (measurements, tests).
  enum class Way { kChoose, kAllThreads, kOneThread };
  struct Options {
    Way way = Way::kChoose;
    double probe_below_call_seconds = kProbeBelowCallSeconds;
    // Seconds on a monotonic clock; empty: std::chrono::steady_clock (tests pass their own).
    std::function<double()> clock = {};
  };
  explicit StepParallelism(ThreadPool& pool);
  StepParallelism(ThreadPool& pool, Options options);
  StepParallelism(const StepParallelism&) = delete;
  StepParallelism& operator=(const StepParallelism&) = delete;

  // Bracket one step. `shape` names steps expected to cost about the same (the caller's kind
  // and row count); a caller keeps the number of distinct shapes small. Begin sets the pool's
  // way for the step; End restores all threads and, when `completed`, learns from the step's
  // time (a step that threw teaches nothing).
  void Begin(uint64_t shape);
  void End(bool completed);

  struct Stats {
    uint64_t steps = 0;         // completed steps
    uint64_t serial_steps = 0;  // of those, run on the calling thread alone (probes included)
    uint64_t probes = 0;        // of those, run the other way to time it
  };
  Stats stats() const { return stats_; }
  // Whether steps of `shape` now run on the calling thread alone.
  bool serial(uint64_t shape) const;

 private:
  struct Shape {
    uint64_t steps = 0;  // completed
    bool serial = false;
    double log_ratio = 0.0;  // moving average of log(serial time / parallel time)
    bool sampled = false;
    uint64_t interval = kMinInterval;
    uint64_t next_probe = kFirstProbeStep;
    double last_seconds = 0.0;   // the last step run the current way
    double call_seconds = -1.0;  // mean handed-off call of the last parallel step; < 0: unknown
  };
  bool Probeable(const Shape& s) const;

  ThreadPool& pool_;
  Options options_;
  std::unordered_map<uint64_t, Shape> shapes_;
  Stats stats_;
  // The step in flight (between Begin and End).
  Shape* current_ = nullptr;
  bool probing_ = false;
  bool serial_now_ = false;
  ThreadPool::HandOffs hand_offs_at_begin_;
  double begin_seconds_ = 0.0;
};

}  // namespace deepinfer
