// A persistent pool of worker threads with static partitioning and dynamic claiming.
//
// ParallelFor splits [0, n) into fixed contiguous parts (part k is always the same range for a
// given n and pool size), so nothing about the result depends on timing. There are several parts
// per thread (kPartsPerThread), claimed by whichever thread gets to them first, the caller
// included: a worker that the OS has not scheduled or runs slowly (a loaded machine, a vCPU that
// shares its core on the host) holds the call up by at most the one part it took, and the caller
// runs the rest itself. So a call is never much slower than running it on one thread.
// Work functions may throw: the first exception is captured and rethrown on the calling thread.
//
// A forward issues hundreds of ParallelFor calls microseconds apart, and waking a sleeping
// thread costs tens of microseconds here, so workers (and the caller, for completion) spin
// for about a millisecond before blocking on a condition variable.
//
// Each part runs inside GuardMappedReads (core/mapped_file.h): a SIGBUS from a truncated
// mapped file in a task becomes a MappedFileFault rethrown on the caller like any exception.
//
// Thread contract: one caller at a time (calls are not reentrant: a body must not call the pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace deepinfer {

class ThreadPool {
 public:
  // More threads than this many per hardware thread only add contention; the constructor and
  // the --threads flags refuse them.
  static constexpr int kMaxThreadsPerHardwareThread = 4;
  // Parts per thread of a large call: a part is what a stalled thread can hold the others up by.
  // Measured on 2-vCPU VMs whose second vCPU sometimes runs at a fraction of the first's speed:
  // with 1 part per thread a batch-16 decode step of the embedded model took up to 1.12x the
  // single-thread time, with 4 at most 1.03x (median 0.91x; the README's thread section).
  static constexpr int kPartsPerThread = 4;
  static int MaxThreads();  // kMaxThreadsPerHardwareThread x std::thread::hardware_concurrency()

  // num_threads <= 0 means one per hardware thread. Throws Error for more than MaxThreads(), or
  // when the system cannot start the threads (those already started are stopped first).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(begin, end) on disjoint ranges covering [0, n). Blocks until all are done.
  void ParallelFor(size_t n, FunctionRef<void(size_t begin, size_t end)> body);
  // The same, also passing the index of the thread that runs the part (< size(); the caller is 0):
  // a thread runs one part at a time, so the index selects that thread's scratch
  // (core/thread_scratch.h). Which thread runs which part depends on timing: bodies must not
  // let the index decide anything but where temporaries live.
  void ParallelForThreads(size_t n, FunctionRef<void(size_t begin, size_t end, int thread)> body);
  // The same, in as many parts as give each at least `min_per_part` items (at least 1, at most
  // size() x kPartsPerThread); one part runs inline on the caller. For work too small to pay for
  // a hand-off.
  void ParallelForThreads(size_t n, size_t min_per_part, FunctionRef<void(size_t begin, size_t end, int thread)> body);

  // Serial: every call runs its parts one after another on the calling thread, the same parts
  // as on all threads (so the same results), without a hand-off. StepParallelism
  // (core/step_parallelism.h) sets it for the steps where hand-offs cost more than they save.
  void SetSerial(bool serial) { serial_ = serial; }
  bool serial() const { return serial_; }
  // The calls handed to the other threads since the pool started, and their wall time (from
  // handing out the parts to the last part's end): how short a step's calls are.
  struct HandOffs {
    uint64_t calls = 0;
    double seconds = 0.0;
  };
  HandOffs hand_offs() const { return hand_offs_; }

  // Work below about this many bytes touched per part costs more in hand-off (waking, joining,
  // cold caches on the other core) than the second thread saves: measured on 2-core VMs, where
  // an idle vCPU's wake-up and the join cost a few microseconds each.
  static constexpr size_t kMinBytesPerPart = size_t{48} << 10;
  // The parts a call of `n` items, `bytes_per_item` each, should use, for ParallelForThreads.
  static size_t MinItemsPerPart(size_t bytes_per_item) {
    const size_t bytes = bytes_per_item == 0 ? 1 : bytes_per_item;
    return bytes >= kMinBytesPerPart ? 1 : (kMinBytesPerPart + bytes - 1) / bytes;
  }
  // Calls body(item, thread) for every item of [0, n), each touching about `bytes_per_item`, in
  // parts of at least kMinBytesPerPart (ParallelForThreads with MinItemsPerPart): the row-wise
  // ops' loop, so that a decode step's small rows stay on the caller.
  void ForEachItem(size_t n, size_t bytes_per_item, FunctionRef<void(size_t item, int thread)> body);

 private:
  void WorkerLoop(int thread);
  // Claims and runs parts of the call of `generation` on pool thread `thread` until none is left.
  void RunClaimedParts(uint32_t generation, int thread);
  void StopWorkers();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  // The current call: generation (high 32 bits), part count (16) and next unclaimed part (16).
  // A successful claim (acquire) sees body_ and total_, which the caller wrote before publishing
  // the generation (release), and they stay unchanged until that part is done.
  std::atomic<uint64_t> claim_{0};
  const FunctionRef<void(size_t, size_t, int)>* body_ = nullptr;
  size_t total_ = 0;
  std::atomic<int> parts_done_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr first_error_;  // guarded by mutex_
  // The caller's alone (the one-caller contract).
  bool serial_ = false;
  HandOffs hand_offs_;
};

}  // namespace deepinfer
