#include "core/step_parallelism.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace deepinfer {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StepParallelism::StepParallelism(ThreadPool& pool) : StepParallelism(pool, Options{}) {}

StepParallelism::StepParallelism(ThreadPool& pool, Options options) : pool_(pool), options_(std::move(options)) {
  if (!options_.clock) options_.clock = NowSeconds;
}

bool StepParallelism::Probeable(const Shape& s) const {
  return options_.way == Way::kChoose && pool_.size() > 1 && s.call_seconds >= 0.0 &&
         s.call_seconds < options_.probe_below_call_seconds;
}

bool StepParallelism::serial(uint64_t shape) const {
  const auto it = shapes_.find(shape);
  return it != shapes_.end() && it->second.serial;
}

void StepParallelism::Begin(uint64_t shape) {
  DI_CHECK(current_ == nullptr, "StepParallelism::Begin inside a step");
  Shape& s = shapes_[shape];
  // A shape that stopped being probeable (its calls grew long) goes back to all threads.
  if (!Probeable(s)) {
    s.serial = false;
    s.evidence = 0.0;
    s.probe_seconds = 0.0;
  }
  probing_ = Probeable(s) && s.probe_seconds == 0.0 && s.steps >= s.next_probe && s.last_seconds > 0.0;
  serial_now_ = options_.way == Way::kOneThread || s.serial != probing_;
  current_ = &s;
  pool_.SetSerial(serial_now_);
  hand_offs_at_begin_ = pool_.hand_offs();
  begin_seconds_ = options_.clock();
}

void StepParallelism::End(bool completed) {
  DI_CHECK(current_ != nullptr, "StepParallelism::End without Begin");
  const double seconds = options_.clock() - begin_seconds_;
  pool_.SetSerial(false);
  Shape& s = *current_;
  current_ = nullptr;
  if (!completed) return;

  if (!serial_now_) {
    const ThreadPool::HandOffs now = pool_.hand_offs();
    const uint64_t calls = now.calls - hand_offs_at_begin_.calls;
    s.call_seconds = calls > 0 ? (now.seconds - hand_offs_at_begin_.seconds) / static_cast<double>(calls) : -1.0;
  }
  if (probing_) {
    s.probe_seconds = seconds;
    s.last_was_current = false;
    ++stats_.probes;
  } else {
    if (s.last_was_current && s.steps > 1) {  // step 0 is cold
      const double pair = std::log(seconds / s.last_seconds);
      s.pair_variance = (1.0 - kNoiseWeight) * s.pair_variance + kNoiseWeight * pair * pair;
    }
    const bool changed_way = s.probe_seconds > 0.0 && Learn(s, seconds);
    s.last_seconds = seconds;
    // A step of the way just left makes no pair with the next (the noise is a way's own).
    s.last_was_current = !changed_way;
  }
  ++s.steps;
  ++stats_.steps;
  if (serial_now_) ++stats_.serial_steps;
}

bool StepParallelism::Learn(Shape& s, double after_seconds) {
  // How much the probe's way lost by, as a log ratio (negative: it won).
  // (A probe leaves last_seconds alone: it is still the step before the probe.)
  const double probe_loss = std::log(s.probe_seconds) - 0.5 * (std::log(s.last_seconds) + std::log(after_seconds));
  s.probe_seconds = 0.0;
  // A sample's variance: the probe's step's, plus half a step's (the mean of two references); a
  // step's is half a pair's.
  const double step_variance = std::max(0.5 * s.pair_variance, kLeastStepNoise * kLeastStepNoise);
  const double sample_noise = std::sqrt(1.5 * step_variance);
  const double gain = std::clamp((-probe_loss - kSwitchMargin) / sample_noise, -kMostPerSample, kMostPerSample);
  s.evidence = std::max(0.0, s.evidence + gain - kEvidenceSlack);
  if (s.evidence >= kEvidenceToSwitch) {
    s.serial = !s.serial;
    s.evidence = 0.0;
    s.interval = kMinInterval;
    s.next_probe = s.steps + kMinInterval;
    return true;
  }
  // The step completing the sample is s.steps; the probe was the one before it.
  if (s.evidence > 0.0) {
    s.next_probe = s.steps - 1 + kConfirmInterval;
    return false;
  }
  s.interval = probe_loss < kClearMargin ? kMinInterval : std::min(2 * s.interval, kMaxInterval);
  // The probe's extra time, in steps of the current way.
  const double extra_steps = std::expm1(std::max(0.0, probe_loss));
  const double paid_down = std::min(std::ceil(extra_steps / kProbeCostBudget), static_cast<double>(kMaxCostInterval));
  s.next_probe = s.steps + std::max(s.interval, static_cast<uint64_t>(paid_down));
  return false;
}

}  // namespace deepinfer
