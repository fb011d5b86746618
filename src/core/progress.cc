#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace deepinfer {
namespace {

constexpr auto kShowAfter = std::chrono::seconds(1);
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

std::string Amount(double bytes, double unit, const char* suffix) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%s", bytes / unit, suffix);
  return text;
}

// GB for large totals, MB below.
std::pair<double, const char*> UnitFor(uint64_t total) {
  return total >= 1000000000 ? std::pair{1e9, " GB"} : std::pair{1e6, " MB"};
}

}  // namespace

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes, std::FILE* out)
    : label_(std::move(label)), total_(total_bytes), out_(out), terminal_(::isatty(::fileno(out)) != 0) {}

ProgressBar::~ProgressBar() { Finish(); }

std::string ProgressBar::Line(std::string_view label, uint64_t done, uint64_t total, double seconds) {
  const auto [unit, suffix] = UnitFor(total);
  const double fraction = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  char text[160];
  std::snprintf(text, sizeof(text), "%-12.*s %3d%%  %s / %s  %s/s", static_cast<int>(label.size()), label.data(),
                static_cast<int>(std::floor(fraction * 100.0)), Amount(static_cast<double>(done), unit, "").c_str(),
                Amount(static_cast<double>(total), unit, suffix).c_str(), Amount(rate, 1e6, " MB").c_str());
  std::string line = text;
  if (rate > 0 && done < total) {
    line +=
        "  ETA " + std::to_string(static_cast<long long>(std::ceil(static_cast<double>(total - done) / rate))) + " s";
  }
  return line;
}

void ProgressBar::Add(uint64_t bytes) {
  const uint64_t done = done_ += bytes;
  if (!terminal_) return;
  const Clock::time_point now = Clock::now();
  if (now - start_ < kShowAfter) return;
  std::unique_lock lock(draw_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_ || now - last_draw_ < kRedrawEvery) return;
  last_draw_ = now;
  shown_ = true;
  const std::string line = Line(label_, done, total_, std::chrono::duration<double>(now - start_).count());
  std::fprintf(out_, "\r%s\x1b[K", line.c_str());
  std::fflush(out_);
}

void ProgressBar::Finish() {
  const std::lock_guard lock(draw_mutex_);
  if (finished_) return;
  finished_ = true;
  if (!shown_) return;
  const std::string line =
      Line(label_, done_.load(), total_, std::chrono::duration<double>(Clock::now() - start_).count());
  std::fprintf(out_, "\r%s\x1b[K\n", line.c_str());
  std::fflush(out_);
}

}  // namespace deepinfer
