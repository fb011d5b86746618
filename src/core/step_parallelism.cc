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
  if (s.serial && !Probeable(s)) s.serial = false;
  probing_ = Probeable(s) && s.steps >= s.next_probe && s.last_seconds > 0.0;
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
    // log(serial / parallel) from this probe and the step before it.
    const double sample = std::log(seconds / s.last_seconds) * (serial_now_ ? 1.0 : -1.0);
    s.log_ratio = s.sampled ? (1.0 - kSampleWeight) * s.log_ratio + kSampleWeight * sample : sample;
    s.sampled = true;
    const bool was_serial = s.serial;
    if (!s.serial && s.log_ratio < -kSwitchMargin) {
      s.serial = true;
    } else if (s.serial && s.log_ratio > kSwitchMargin) {
      s.serial = false;
    }
    // How much the probe's way lost by (negative: it won).
    const double probe_loss = serial_now_ ? sample : -sample;
    if (s.serial != was_serial || probe_loss < kClearMargin) {
      s.interval = kMinInterval;
    } else {
      s.interval = std::min(2 * s.interval, kMaxInterval);
    }
    // The probe's extra time, in steps of the current way.
    const double extra_steps = s.serial != was_serial ? 0.0 : std::expm1(std::max(0.0, probe_loss));
    const double paid_down = std::min(std::ceil(extra_steps / kProbeCostBudget), static_cast<double>(kMaxCostInterval));
    s.next_probe = s.steps + 1 + std::max(s.interval, static_cast<uint64_t>(paid_down));
    ++stats_.probes;
  } else {
    s.last_seconds = seconds;
  }
  ++s.steps;
  ++stats_.steps;
  if (serial_now_) ++stats_.serial_steps;
}

}  // namespace deepinfer
