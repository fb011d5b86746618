#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
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
  EXPECT_EQ(first, (std::vector<size_t>{0, 6}));
  EXPECT_EQ(first, second);
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

}  // namespace
}  // namespace deepinfer
