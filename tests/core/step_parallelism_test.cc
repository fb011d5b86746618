#include "core/step_parallelism.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace deepinfer {
namespace {

// Runs steps of one shape on a fake clock: a step costs `serial_cost` when the pool runs it on
// the caller, `parallel_cost` on all threads. Each step makes a few real parallel calls, so the
// policy sees handed-off calls (their real time is short; the tests that need them short set no
// threshold).
class FakeSteps {
 public:
  explicit FakeSteps(ThreadPool& pool, double probe_below = 1e9)
      : pool_(pool), policy_(pool, {.probe_below_call_seconds = probe_below, .clock = [this] { return now_; }}) {}

  // Runs one step; returns whether it ran serial.
  bool Step(uint64_t shape, double serial_cost, double parallel_cost) {
    policy_.Begin(shape);
    const bool serial = pool_.serial();
    for (int call = 0; call < 3; ++call) {
      pool_.ParallelFor(64, [&](size_t begin, size_t end) { sum_.fetch_add(end - begin); });
    }
    now_ += serial ? serial_cost : parallel_cost;
    policy_.End(true);
    return serial;
  }
  StepParallelism& policy() { return policy_; }

 private:
  ThreadPool& pool_;
  double now_ = 1.0;
  std::atomic<size_t> sum_{0};
  StepParallelism policy_;
};

TEST(StepParallelism, ShapeWhereSerialIsFasterSettlesOnSerialAndProbesLessAndLess) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  std::vector<int> parallel_steps;
  for (int i = 0; i < 400; ++i) {
    if (!steps.Step(7, 1.0, 1.5)) parallel_steps.push_back(i);
  }
  EXPECT_TRUE(steps.policy().serial(7));
  // Steps 0 and 1 run parallel, step 2 probes serial and wins; after that only parallel probes,
  // each at twice the last interval up to the cap.
  ASSERT_GE(parallel_steps.size(), 3u);
  EXPECT_EQ(parallel_steps[0], 0);
  EXPECT_EQ(parallel_steps[1], 1);
  for (size_t k = 3; k < parallel_steps.size(); ++k) {
    const int gap = parallel_steps[k] - parallel_steps[k - 1];
    EXPECT_GE(gap, parallel_steps[k - 1] - parallel_steps[k - 2]) << "probe " << k;
    EXPECT_LE(gap, static_cast<int>(StepParallelism::kMaxInterval) + 1);
  }
  EXPECT_LE(parallel_steps.size(), 12u);  // 400 steps: 2 + probes at doubling intervals
  const StepParallelism::Stats stats = steps.policy().stats();
  EXPECT_EQ(stats.steps, 400u);
  EXPECT_EQ(stats.serial_steps, 400u - parallel_steps.size());
}

TEST(StepParallelism, ShapeWhereParallelIsFasterStaysParallel) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  int serial_steps = 0;
  for (int i = 0; i < 400; ++i) serial_steps += steps.Step(3, 2.0, 1.0) ? 1 : 0;
  EXPECT_FALSE(steps.policy().serial(3));
  EXPECT_GE(serial_steps, 1);   // it did look
  EXPECT_LE(serial_steps, 10);  // and less and less often
  EXPECT_EQ(steps.policy().stats().probes, static_cast<uint64_t>(serial_steps));
}

TEST(StepParallelism, FollowsTheMachineWhenTheFasterWayChanges) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  for (int i = 0; i < 300; ++i) steps.Step(1, 1.0, 1.3);
  EXPECT_TRUE(steps.policy().serial(1));
  // The host gets better: the next probe (at most kMaxInterval + 1 steps away) sees it.
  for (int i = 0; i < 2 * static_cast<int>(StepParallelism::kMaxInterval) + 2; ++i) steps.Step(1, 1.0, 0.7);
  EXPECT_FALSE(steps.policy().serial(1));
}

// A probe that loses by a lot (here 16x, a serial probe on 16 threads) waits until its cost is
// under kProbeCostBudget of the steps since.
TEST(StepParallelism, AProbeThatLosesByALotWaitsLonger) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  std::vector<int> serial_steps;
  for (int i = 0; i < 4000; ++i) {
    if (steps.Step(4, 16.0, 1.0)) serial_steps.push_back(i);
  }
  ASSERT_EQ(serial_steps.size(), 3u);  // steps 2, 2 + 1501 and 2 + 2 * 1501
  EXPECT_EQ(serial_steps[0], 2);
  EXPECT_EQ(serial_steps[1] - serial_steps[0], 1501);
  EXPECT_EQ(serial_steps[2] - serial_steps[1], 1501);
}

TEST(StepParallelism, ShapesAreLearnedApart) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  for (int i = 0; i < 50; ++i) {
    steps.Step(1, 1.0, 2.0);
    steps.Step(2, 2.0, 1.0);
  }
  EXPECT_TRUE(steps.policy().serial(1));
  EXPECT_FALSE(steps.policy().serial(2));
  EXPECT_FALSE(steps.policy().serial(99));  // never seen
}

TEST(StepParallelism, NoiseWithinTheMarginDoesNotFlipTheWay) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  // Serial 1% slower: inside kSwitchMargin, so the way stays parallel.
  for (int i = 0; i < 300; ++i) {
    steps.Step(5, 1.01, 1.0);
    ASSERT_FALSE(steps.policy().serial(5)) << "step " << i;
  }
}

TEST(StepParallelism, ShapesWithLongCallsNeverRunSerial) {
  ThreadPool pool(2);
  StepParallelism policy(pool);  // the real threshold and clock
  for (int i = 0; i < 40; ++i) {
    policy.Begin(11);
    EXPECT_FALSE(pool.serial()) << "step " << i;
    // Each part sleeps 2 * the threshold, so a handed-off call takes at least that long.
    pool.ParallelFor(2, [](size_t, size_t) {
      std::this_thread::sleep_for(std::chrono::duration<double>(2 * StepParallelism::kProbeBelowCallSeconds));
    });
    policy.End(true);
  }
  EXPECT_EQ(policy.stats().serial_steps, 0u);
  EXPECT_EQ(policy.stats().probes, 0u);
}

TEST(StepParallelism, OneThreadPoolNeverProbes) {
  ThreadPool pool(1);
  FakeSteps steps(pool);
  for (int i = 0; i < 50; ++i) steps.Step(1, 1.0, 5.0);
  EXPECT_EQ(steps.policy().stats().probes, 0u);
}

TEST(StepParallelism, ForcedWaysNeverProbe) {
  for (StepParallelism::Way way : {StepParallelism::Way::kAllThreads, StepParallelism::Way::kOneThread}) {
    ThreadPool pool(2);
    StepParallelism policy(pool, {.way = way, .probe_below_call_seconds = 1e9});
    for (int i = 0; i < 30; ++i) {
      policy.Begin(1);
      EXPECT_EQ(pool.serial(), way == StepParallelism::Way::kOneThread);
      pool.ParallelFor(8, [](size_t, size_t) {});
      policy.End(true);
    }
    EXPECT_EQ(policy.stats().probes, 0u);
    EXPECT_EQ(policy.stats().serial_steps, way == StepParallelism::Way::kOneThread ? 30u : 0u);
  }
}

TEST(StepParallelism, AStepThatThrowsTeachesNothingAndRestoresTheThreads) {
  ThreadPool pool(2);
  FakeSteps steps(pool);
  for (int i = 0; i < 20; ++i) steps.Step(1, 1.0, 2.0);
  ASSERT_TRUE(steps.policy().serial(1));
  const StepParallelism::Stats before = steps.policy().stats();
  steps.policy().Begin(1);
  EXPECT_TRUE(pool.serial());
  steps.policy().End(false);
  EXPECT_FALSE(pool.serial());  // calls outside a step run on all threads
  EXPECT_EQ(steps.policy().stats().steps, before.steps);
}

}  // namespace
}  // namespace deepinfer
