#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/mapped_file.h"

namespace deepinfer {
namespace {

// How long a thread spins before it blocks. A decode step of a small model makes its parallel
// calls hundreds of microseconds apart (the serial work between them), and waking a blocked
// thread costs more than that saves here: measured on the embedded model at batch 1 on a 2-vCPU
// Zen 4, a 0.15 ms spin made 2 threads 2-15% slower than 1, a 2 ms one 6% faster. After the
// last call of a burst the threads block within this time, so an idle engine costs nothing.
constexpr auto kSpinTime = std::chrono::microseconds(1500);
// A spinning thread gives its core away this often, and looks at the clock then: on a loaded
// machine (more runnable threads than cores) a waiting worker would otherwise take CPU time from
// the thread doing the work. On an idle core the yield returns at once.
constexpr int kSpinsPerYield = 64;

// Spins until done() or about kSpinTime has passed; returns done().
template <class Done>
bool SpinUntil(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int spin = 1;; ++spin) {
    if (done()) return true;
    if (spin % kSpinsPerYield == 0) {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() >= deadline) return done();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
}

// The claim word of ThreadPool: generation, part count, next unclaimed part.
constexpr uint64_t kPartBits = 16;
constexpr uint64_t kPartMask = (uint64_t{1} << kPartBits) - 1;
uint64_t PackClaim(uint32_t generation, int parts) {
  return uint64_t{generation} << 2 * kPartBits | static_cast<uint64_t>(parts) << kPartBits;
}
uint32_t GenerationOf(uint64_t claim) { return static_cast<uint32_t>(claim >> 2 * kPartBits); }
int PartsOf(uint64_t claim) { return static_cast<int>(claim >> kPartBits & kPartMask); }
int NextPartOf(uint64_t claim) { return static_cast<int>(claim & kPartMask); }

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
  if (num_threads > MaxThreads() || static_cast<uint64_t>(num_threads) * kPartsPerThread > kPartMask) {
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

void ThreadPool::ForEachItem(size_t n, size_t bytes_per_item, FunctionRef<void(size_t, int)> body) {
  ParallelForThreads(n, MinItemsPerPart(bytes_per_item), [&](size_t begin, size_t end, int thread) {
    for (size_t item = begin; item < end; ++item) body(item, thread);
  });
}

void ThreadPool::ParallelForThreads(size_t n, size_t min_per_part, FunctionRef<void(size_t, size_t, int)> body) {
  if (n == 0) return;
  const size_t most_parts = static_cast<size_t>(size()) * kPartsPerThread;
  const int parts =
      static_cast<int>(std::min<size_t>(most_parts, std::max<size_t>(1, n / std::max<size_t>(1, min_per_part))));
  if (parts == 1 || n == 1) {
    body(0, n, 0);
    return;
  }
  if (serial_) {
    for (int part = 0; part < parts; ++part) {
      const std::pair<size_t, size_t> range = RangeOf(n, parts, part);
      if (range.first < range.second) body(range.first, range.second, 0);
    }
    return;
  }
  const auto handed_out = std::chrono::steady_clock::now();
  uint32_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    total_ = n;
    first_error_ = nullptr;
    parts_done_.store(0, std::memory_order_relaxed);
    generation = GenerationOf(claim_.load(std::memory_order_relaxed)) + 1;
    claim_.store(PackClaim(generation, parts), std::memory_order_release);
  }
  work_ready_.notify_all();
  RunClaimedParts(generation, 0);
  const auto all_done = [&] { return parts_done_.load(std::memory_order_acquire) == parts; };
  SpinUntil(all_done);
  std::unique_lock<std::mutex> lock(mutex_);  // also orders first_error_
  work_done_.wait(lock, all_done);
  body_ = nullptr;
  ++hand_offs_.calls;
  hand_offs_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - handed_out).count();
  if (first_error_) std::rethrow_exception(std::exchange(first_error_, nullptr));
}

void ThreadPool::RunClaimedParts(uint32_t generation, int thread) {
  uint64_t claim = claim_.load(std::memory_order_acquire);
  while (GenerationOf(claim) == generation && NextPartOf(claim) < PartsOf(claim)) {
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;  // `claim` now holds the current word
    }
    const int part = NextPartOf(claim), parts = PartsOf(claim);
    try {
      const std::pair<size_t, size_t> range = RangeOf(total_, parts, part);
      if (range.first < range.second) GuardMappedReads([&] { (*body_)(range.first, range.second, thread); });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_error_) first_error_ = std::current_exception();
    }
    if (parts_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == parts) {
      std::lock_guard<std::mutex> lock(mutex_);
      work_done_.notify_one();
    }
    claim = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen_generation = 0;
  const auto has_news = [&] {
    return stopping_.load(std::memory_order_acquire) ||
           GenerationOf(claim_.load(std::memory_order_acquire)) != seen_generation;
  };
  for (;;) {
    if (!SpinUntil(has_news)) {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, has_news);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen_generation = GenerationOf(claim_.load(std::memory_order_acquire));
    RunClaimedParts(seen_generation, thread);
  }
}

}  // namespace deepinfer
