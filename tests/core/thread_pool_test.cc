#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnceOverManyCalls) {
  ThreadPool pool(3);
  for (size_t n : {1u, 2u, 3u, 7u, 64u, 1000u}) {
    for (int round = 0; round < 200; ++round) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " index " << i;
    }
  }
}

TEST(ThreadPool, PartitionIsStatic) {
  ThreadPool pool(2);
  std::vector<size_t> first, second;
  for (int round = 0; round < 2; ++round) {
    std::vector<size_t>& starts = round == 0 ? first : second;
    std::mutex mutex;
    pool.ParallelFor(11, [&](size_t begin, size_t) {
      std::lock_guard<std::mutex> lock(mutex);
      starts.push_back(begin);
    });
    std::sort(starts.begin(), starts.end());
  }
  // kPartsPerThread x 2 threads = 8 parts of 11 items: the first 3 get 2 items, the rest 1.
  static_assert(ThreadPool::kPartsPerThread == 4, "the expected starts below are for 8 parts");
  EXPECT_EQ(first, (std::vector<size_t>{0, 2, 4, 6, 7, 8, 9, 10}));
  EXPECT_EQ(first, second);
}

// Serial: the same parts as on all threads, in order, on the caller, and no hand-off counted.
TEST(ThreadPool, SerialRunsTheSamePartsOnTheCaller) {
  ThreadPool pool(2);
  for (size_t min_per_part : {size_t{1}, size_t{3}}) {
    std::vector<std::pair<size_t, size_t>> parallel, serial;
    std::mutex mutex;
    pool.ParallelForThreads(37, min_per_part, [&](size_t begin, size_t end, int) {
      std::lock_guard<std::mutex> lock(mutex);
      parallel.emplace_back(begin, end);
    });
    std::sort(parallel.begin(), parallel.end());
    const ThreadPool::HandOffs before = pool.hand_offs();
    EXPECT_GE(before.calls, 1u);
    pool.SetSerial(true);
    const std::thread::id caller = std::this_thread::get_id();
    pool.ParallelForThreads(37, min_per_part, [&](size_t begin, size_t end, int thread) {
      EXPECT_EQ(thread, 0);
      EXPECT_EQ(std::this_thread::get_id(), caller);
      serial.emplace_back(begin, end);
    });
    pool.SetSerial(false);
    EXPECT_EQ(serial, parallel) << "min per part " << min_per_part;  // already in order
    EXPECT_EQ(pool.hand_offs().calls, before.calls);
  }
}

// With a minimum per part, small calls run inline on the caller (part 0 only) and larger ones
// in as many parts as the minimum allows; every index still runs exactly once.
TEST(ThreadPool, MinimumPerPartBoundsTheParts) {
  ThreadPool pool(3);
  struct Expect {
    size_t n, min_per_part, parts;
  };
  for (const Expect& e :
       std::vector<Expect>{{10, 100, 1}, {10, 10, 1}, {10, 5, 2}, {10, 3, 3}, {10, 1, 10}, {40, 1, 12}, {1, 1, 1}}) {
    std::mutex mutex;
    std::vector<int> seen(e.n, 0);
    std::vector<int> threads;
    const std::thread::id caller = std::this_thread::get_id();
    bool inline_on_caller = true;
    pool.ParallelForThreads(e.n, e.min_per_part, [&](size_t begin, size_t end, int thread) {
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t i = begin; i < end; ++i) ++seen[i];
      threads.push_back(thread);
      if (std::this_thread::get_id() != caller) inline_on_caller = false;
    });
    SCOPED_TRACE("n " + std::to_string(e.n) + " min " + std::to_string(e.min_per_part));
    EXPECT_EQ(seen, std::vector<int>(e.n, 1));
    EXPECT_EQ(threads.size(), e.parts);
    if (e.parts == 1) {
      EXPECT_TRUE(inline_on_caller);
    }
    for (int t : threads) {
      EXPECT_GE(t, 0);
      EXPECT_LT(t, pool.size());
    }
  }
  EXPECT_EQ(ThreadPool::MinItemsPerPart(ThreadPool::kMinBytesPerPart), 1u);
  EXPECT_EQ(ThreadPool::MinItemsPerPart(ThreadPool::kMinBytesPerPart * 2), 1u);
  EXPECT_EQ(ThreadPool::MinItemsPerPart(ThreadPool::kMinBytesPerPart / 4), 4u);
  EXPECT_EQ(ThreadPool::MinItemsPerPart(0), ThreadPool::kMinBytesPerPart);
}

// ForEachItem: every item once, each on the thread its part ran on; items smaller than
// kMinBytesPerPart together stay on the caller, large ones are handed out in parts.
TEST(ThreadPool, ForEachItemSplitsByBytes) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (const size_t bytes : {size_t{64}, ThreadPool::kMinBytesPerPart}) {
    std::mutex mutex;
    std::vector<int> seen(20, 0);
    std::set<int> threads;
    bool all_on_caller = true;
    const uint64_t hand_offs_before = pool.hand_offs().calls;
    pool.ForEachItem(seen.size(), bytes, [&](size_t item, int thread) {
      std::lock_guard<std::mutex> lock(mutex);
      ++seen[item];
      threads.insert(thread);
      if (std::this_thread::get_id() != caller) all_on_caller = false;
      EXPECT_LT(thread, pool.size());
    });
    SCOPED_TRACE("bytes per item " + std::to_string(bytes));
    EXPECT_EQ(seen, std::vector<int>(seen.size(), 1));
    if (bytes < ThreadPool::kMinBytesPerPart) {
      EXPECT_TRUE(all_on_caller);
      EXPECT_EQ(threads, std::set<int>{0});
      EXPECT_EQ(pool.hand_offs().calls, hand_offs_before);
    } else {
      EXPECT_EQ(pool.hand_offs().calls, hand_offs_before + 1);
    }
  }
  int calls = 0;
  pool.ForEachItem(0, 1 << 20, [&](size_t, int) { ++calls; });
  EXPECT_EQ(calls, 0);
}

std::set<long> ThreadIdsOfThisProcess() {
  std::set<long> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    ids.insert(std::stol(entry.path().filename().string()));
  }
  return ids;
}

// A signal handler is the one way to stop a single thread from outside, so it needs these.
std::atomic<bool> worker_parked{false};
std::atomic<bool> release_worker{false};
void ParkUntilReleased(int) {
  worker_parked.store(true);
  while (!release_worker.load()) {
  }
}

// A worker that is not running (here parked in a signal handler; in practice a vCPU the host took
// away or a loaded machine) does not hold the call up: the caller runs every part itself, with
// the same ranges, all as thread 0.
TEST(ThreadPool, APartNoWorkerHasTakenRunsOnTheCaller) {
  const std::set<long> before = ThreadIdsOfThisProcess();
  ThreadPool pool(2);
  std::vector<long> started;
  for (long id : ThreadIdsOfThisProcess()) {
    if (!before.count(id)) started.push_back(id);
  }
  ASSERT_EQ(started.size(), 1u) << "expected the pool's one worker thread";
  struct sigaction park {
  }, previous{};
  park.sa_handler = ParkUntilReleased;
  sigemptyset(&park.sa_mask);
  ASSERT_EQ(::sigaction(SIGUSR1, &park, &previous), 0);
  worker_parked = false;
  release_worker = false;
  ASSERT_EQ(::syscall(SYS_tgkill, ::getpid(), started[0], SIGUSR1), 0);
  while (!worker_parked.load()) std::this_thread::yield();

  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::vector<std::pair<size_t, int>> parts;
  bool all_on_caller = true;
  pool.ParallelForThreads(11, 1, [&](size_t begin, size_t, int thread) {
    std::lock_guard<std::mutex> lock(mutex);
    parts.emplace_back(begin, thread);
    if (std::this_thread::get_id() != caller) all_on_caller = false;
  });
  release_worker = true;
  std::sort(parts.begin(), parts.end());
  EXPECT_EQ(parts,
            (std::vector<std::pair<size_t, int>>{{0, 0}, {2, 0}, {4, 0}, {6, 0}, {7, 0}, {8, 0}, {9, 0}, {10, 0}}));
  EXPECT_TRUE(all_on_caller);
  // The pool works as before once the worker is back.
  std::atomic<int> count{0};
  for (int round = 0; round < 100; ++round) {
    pool.ParallelFor(10, [&](size_t begin, size_t end) { count += static_cast<int>(end - begin); });
  }
  EXPECT_EQ(count.load(), 1000);
  ::sigaction(SIGUSR1, &previous, nullptr);
}

// The index a body gets is the thread running it: one OS thread, one index, whatever parts it
// runs, and the caller's is 0. So scratch indexed by it is never shared by two running parts.
TEST(ThreadPool, TheIndexNamesTheRunningThread) {
  ThreadPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::vector<std::pair<std::thread::id, int>> runs;
  for (int round = 0; round < 50; ++round) {
    pool.ParallelForThreads(1000, 1, [&](size_t, size_t, int thread) {
      std::lock_guard<std::mutex> lock(mutex);
      runs.emplace_back(std::this_thread::get_id(), thread);
    });
  }
  std::vector<std::set<std::thread::id>> threads_of_index(static_cast<size_t>(pool.size()));
  for (const auto& [id, index] : runs) {
    ASSERT_GE(index, 0);
    ASSERT_LT(index, pool.size());
    threads_of_index[static_cast<size_t>(index)].insert(id);
    if (id == caller) {
      EXPECT_EQ(index, 0);
    }
  }
  for (const std::set<std::thread::id>& ids : threads_of_index) EXPECT_LE(ids.size(), 1u);
  EXPECT_EQ(runs.size(), 50u * 3 * ThreadPool::kPartsPerThread);
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.ParallelFor(10,
                                [](size_t begin, size_t) {
                                  if (begin > 0) throw std::runtime_error("worker");
                                }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> count{0};
  pool.ParallelFor(10, [&](size_t begin, size_t end) { count += static_cast<int>(end - begin); });
  EXPECT_EQ(count.load(), 10);
}

TEST(ThreadPool, RefusesMoreThanFourThreadsPerHardwareThread) {
  EXPECT_EQ(ThreadPool::MaxThreads(), ThreadPool::kMaxThreadsPerHardwareThread *
                                          static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  try {
    ThreadPool pool(ThreadPool::MaxThreads() + 1);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4 per hardware thread"), std::string::npos) << e.what();
  }
  ThreadPool pool(ThreadPool::MaxThreads());
  EXPECT_EQ(pool.size(), ThreadPool::MaxThreads());
}

// In a fresh process (a death test run "threadsafe": re-executed), so that no stack cached from
// an earlier pool can satisfy the new threads.
void StartAPoolUnderAnAddressSpaceLimit() {
  // Thread stacks (8 MB each) need address space: allow 32 MB more than is in use now, so that a
  // pool of 8 threads fails to start its 4th or 5th. The started ones must be stopped and joined.
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  rlimit limit{};
  ::getrlimit(RLIMIT_AS, &limit);
  limit.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (32u << 20);
  ::setrlimit(RLIMIT_AS, &limit);
  try {
    ThreadPool pool(8);
    std::fputs("started", stderr);
  } catch (const Error& e) {
    std::fputs(e.what(), stderr);
  }
  std::_Exit(0);
}

TEST(ThreadPool, AThreadThatCannotStartIsAnErrorNotAHang) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory does not fit under an address-space limit";
#else
  if (ThreadPool::MaxThreads() < 8) GTEST_SKIP() << "fewer than 8 threads allowed here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(StartAPoolUnderAnAddressSpaceLimit(), ::testing::ExitedWithCode(0),
              "thread pool: cannot start 7 worker threads \\(started [0-9]+\\): ");
#endif
}

}  // namespace
}  // namespace deepinfer
