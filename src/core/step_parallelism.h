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
// step runs the other way (a probe). A probe's time against the geometric mean of the shape's
// steps just before and just after it (both run the current way, so a host that drifts slower or
// faster favours neither) is one sample of the other way's gain. A step here varies by ~15% from
// the next and one in twenty is held up by half again, far more than the few percent between the
// ways, so one sample decides nothing. The samples feed a one-sided cumulative sum (CUSUM) in
// units of the shape's own step-to-step noise, measured from its consecutive steps: each adds its
// gain beyond kSwitchMargin, less a slack, and the way changes when the sum reaches
// kEvidenceToSwitch. So a host with quiet steps decides within a few probes on a difference of a
// few percent, a noisy one needs the difference to be large or many samples to agree, and two
// equal ways stay as they are. While the sum is above zero the next probe follows at once; a probe
// that confirms the current way by a clear margin doubles the interval (up to kMaxInterval), so
// a settled shape spends few steps probing, and a probe that lost by a lot waits until its cost is
// paid down (kProbeCostBudget).
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
  // While the evidence for the other way is above zero, probes come this many steps apart (the
  // step after a probe completes its sample, the next is the following probe's "before").
  static constexpr uint64_t kConfirmInterval = 3;
  // A gain of the other way smaller than this (a log ratio) is no reason to change.
  static constexpr double kSwitchMargin = 0.02;
  // The CUSUM, in units of a sample's noise: each sample adds its gain beyond the margin, at most
  // kMostPerSample, less kEvidenceSlack; the way changes at kEvidenceToSwitch. The cap makes it
  // take at least 4 samples: a burst of host noise fakes one or two, rarely four in a row (the
  // tests' simulated host: where all threads are 8% faster, runs of 66 steps spent 7% of their
  // steps serial on average, none of 200 more than 25%; without the cap, 29%). The slack is low
  // enough to find a way that is 15% faster when the other is erratic (a slack of 0.5 found it in
  // 37% of such steps, 0.3 in 62%).
  static constexpr double kEvidenceSlack = 0.3;
  static constexpr double kEvidenceToSwitch = 4.0;
  static constexpr double kMostPerSample = 1.5;
  // The step-to-step noise (standard deviation of log step time): assumed before a shape has
  // measured its own, and the least assumed after (a clock and a machine are never exact).
  static constexpr double kAssumedStepNoise = 0.15;
  static constexpr double kLeastStepNoise = 0.01;
  // The weight of a new pair of consecutive steps in the noise's moving average.
  static constexpr double kNoiseWeight = 1.0 / 16;
  // A probe that loses by more than this confirms the way clearly and doubles the interval.
  static constexpr double kClearMargin = 0.05;
  // A probe that loses costs its extra time once; the next one waits long enough to keep that
  // under this fraction of the steps' time (a 16-thread pool's serial probe loses ~15 steps'
  // worth, so it waits ~1500 steps), up to kMaxCostInterval.
  static constexpr double kProbeCostBudget = 0.01;
  static constexpr uint64_t kMaxCostInterval = 1 << 14;

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
    double evidence = 0.0;  // the CUSUM for the other way
    // Moving average of the squared log ratio of consecutive steps run the current way.
    double pair_variance = 2 * kAssumedStepNoise * kAssumedStepNoise;
    bool last_was_current = false;  // the shape's last step ran the current way (not a probe)
    uint64_t interval = kMinInterval;
    uint64_t next_probe = kFirstProbeStep;
    // The last step run the current way (while a probe is pending: the step before it).
    double last_seconds = 0.0;
    double probe_seconds = 0.0;  // the pending probe, awaiting the step after it; 0: none
    double call_seconds = -1.0;  // mean handed-off call of the last parallel step; < 0: unknown
  };
  bool Probeable(const Shape& s) const;
  // Completes the pending probe's sample with the step after it and updates the way; returns
  // whether the way changed.
  bool Learn(Shape& s, double after_seconds);

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
