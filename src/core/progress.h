// A one-line progress bar on stderr for work measured in bytes (writing or reading a
// checkpoint): "make-model   42%  1.95 / 4.66 GB  310 MB/s  ETA 9 s".
//
// It appears only when its stream is a terminal and the work has run for more than a second,
// redraws at most ten times a second, and ends its line on Finish (or destruction). Logs and
// pipes never see it. Add may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace deepinfer {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total_bytes, std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Add(uint64_t bytes);
  void Finish();

  // The line for `done` of `total` bytes after `seconds` (no carriage return).
  static std::string Line(std::string_view label, uint64_t done, uint64_t total, double seconds);

 private:
  using Clock = std::chrono::steady_clock;

  const std::string label_;
  const uint64_t total_;
  std::FILE* const out_;
  const bool terminal_;
  const Clock::time_point start_ = Clock::now();
  std::atomic<uint64_t> done_{0};
  std::mutex draw_mutex_;
  Clock::time_point last_draw_{};
  bool shown_ = false;
  bool finished_ = false;
};

}  // namespace deepinfer
