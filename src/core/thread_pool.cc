#include "core/thread_pool.h"

#include <algorithm>

#include "core/error.h"
#include "core/mapped_file.h"

namespace deepinfer {
namespace {

// About 0.1-0.3 ms of pause instructions before a thread blocks.
constexpr int kSpinIterations = 4096;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::pair<size_t, size_t> RangeOf(size_t total, int parts, int index) {
  const size_t base = total / parts;
  const size_t extra = total % parts;
  const size_t begin = index * base + std::min<size_t>(index, extra);
  return {begin, begin + base + (static_cast<size_t>(index) < extra ? 1 : 0)};
}

}  // namespace

int ThreadPool::MaxThreads() {
  return kMaxThreadsPerHardwareThread * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (num_threads > MaxThreads()) {
    throw MakeError("thread pool: ", num_threads, " threads is more than ", kMaxThreadsPerHardwareThread,
                    " per hardware thread (at most ", MaxThreads(), " here)");
  }
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  try {
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  } catch (const std::exception& e) {
    // The destructor does not run for a half-built object: stop and join the started workers
    // here, or their joinable std::threads would terminate the process (and the condition
    // variables would be destroyed under waiting threads).
    const size_t started = workers_.size();
    StopWorkers();
    throw MakeError("thread pool: cannot start ", num_threads - 1, " worker threads (started ", started,
                    "): ", e.what());
  }
}

ThreadPool::~ThreadPool() { StopWorkers(); }

void ThreadPool::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_release);
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

void ThreadPool::ParallelFor(size_t n, FunctionRef<void(size_t, size_t)> body) {
  ParallelForThreads(n, [&](size_t begin, size_t end, int) { body(begin, end); });
}

void ThreadPool::ParallelForThreads(size_t n, FunctionRef<void(size_t, size_t, int)> body) {
  ParallelForThreads(n, 1, body);
}

void ThreadPool::ParallelForThreads(size_t n, size_t min_per_part, FunctionRef<void(size_t, size_t, int)> body) {
  if (n == 0) return;
  const int parts =
      static_cast<int>(std::min<size_t>(size(), std::max<size_t>(1, n / std::max<size_t>(1, min_per_part))));
  if (parts == 1 || n == 1) {
    body(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    total_ = n;
    parts_ = parts;
    first_error_ = nullptr;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);  // every worker acknowledges
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  std::exception_ptr own_error;
  try {
    const std::pair<size_t, size_t> range = RangeOf(n, parts, 0);
    if (range.first < range.second) GuardMappedReads([&] { body(range.first, range.second, 0); });
  } catch (...) {
    own_error = std::current_exception();
  }
  for (int spin = 0; spin < kSpinIterations && pending_.load(std::memory_order_acquire) != 0; ++spin) CpuRelax();
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  body_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (first_error_) std::rethrow_exception(first_error_);
}

void ThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen_generation = 0;
  for (;;) {
    uint64_t generation = generation_.load(std::memory_order_acquire);
    for (int spin = 0;
         spin < kSpinIterations && generation == seen_generation && !stopping_.load(std::memory_order_acquire);
         ++spin) {
      CpuRelax();
      generation = generation_.load(std::memory_order_acquire);
    }
    if (generation == seen_generation) {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] {
        return stopping_.load(std::memory_order_acquire) ||
               generation_.load(std::memory_order_acquire) != seen_generation;
      });
      generation = generation_.load(std::memory_order_acquire);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen_generation = generation;
    const FunctionRef<void(size_t, size_t, int)>* body = body_;
    const size_t total = total_;
    const int parts = parts_;
    try {
      const std::pair<size_t, size_t> range =
          worker_index < parts ? RangeOf(total, parts, worker_index) : std::pair<size_t, size_t>{0, 0};
      if (range.first < range.second) GuardMappedReads([&] { (*body)(range.first, range.second, worker_index); });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_error_) first_error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      work_done_.notify_one();
    }
  }
}

}  // namespace deepinfer
