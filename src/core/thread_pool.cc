#include "core/thread_pool.h"

#include <algorithm>

namespace deepinfer {
namespace {

std::pair<size_t, size_t> RangeOf(size_t total, int parts, int index) {
  const size_t base = total / parts;
  const size_t extra = total % parts;
  const size_t begin = index * base + std::min<size_t>(index, extra);
  return {begin, begin + base + (static_cast<size_t>(index) < extra ? 1 : 0)};
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  const int parts = size();
  if (parts == 1 || n == 1) {
    body(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    total_ = n;
    pending_ = parts - 1;
    first_error_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  std::exception_ptr own_error;
  try {
    const auto [begin, end] = RangeOf(n, parts, 0);
    if (begin < end) body(begin, end);
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (first_error_) std::rethrow_exception(first_error_);
}

void ThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen_generation = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* body;
    size_t total;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      body = body_;
      total = total_;
    }
    try {
      const auto [begin, end] = RangeOf(total, size(), worker_index);
      if (begin < end) (*body)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_error_) first_error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace deepinfer
