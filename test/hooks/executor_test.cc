#include "hooks/executor.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/logging.h"
#include "metrics/hook_metrics.h"
#include "metrics/metric_registry.h"
#include "test/support/eventually.h"
#include "test/support/process_stats.h"

namespace crihook {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using How = HookExecutor::How;

// Holds the tasks that wait on it until opened. Shared by the tasks, so a
// task abandoned by a finished test still has it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int waiting = 0;
  void wait() {
    std::unique_lock lock(mu);
    ++waiting;
    cv.wait(lock, [&] { return open; });
    --waiting;
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

HookExecutor::Task blockOn(std::shared_ptr<Gate> gate) {
  return [gate] {
    gate->wait();
    return HookDecision::proceed();
  };
}

HookExecutor::Task answer(const char* env) {
  return [env] {
    Adjustment a;
    a.env = {{env, "1"}};
    return HookDecision::proceed(a);
  };
}

class ExecutorTest : public ::testing::Test {
 protected:
  metrics::Registry registry_;
  metrics::HookMetrics hook_metrics_{registry_};
  metrics::HookExecutorMetrics& m_ = hook_metrics_.executor("h");
};

TEST_F(ExecutorTest, AnAnswerInTimeIsTheTasksDecision) {
  HookExecutor ex("h", 2, 4, logger("hook"), &m_);
  auto r = ex.run(answer("A"), 1000ms);
  EXPECT_EQ(r.how, How::kAnswered);
  ASSERT_EQ(r.decision.adjustment.env.size(), 1u);
  EXPECT_EQ(r.decision.adjustment.env[0].name, "A");
  EXPECT_TRUE(ex.healthy());
}

TEST_F(ExecutorTest, ACallPastItsBudgetIsAnsweredAtOnceAndItsWorkerCountedStuck) {
  auto gate = std::make_shared<Gate>();
  HookExecutor ex("h", 2, 4, logger("hook"), &m_);
  const auto t0 = Clock::now();
  auto r = ex.run(blockOn(gate), 50ms);
  EXPECT_LT(Clock::now() - t0, 500ms);
  EXPECT_EQ(r.how, How::kTimedOut);
  EXPECT_EQ(r.decision.kind, HookDecision::Kind::kError);
  EXPECT_EQ(r.decision.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.decision.status.message(), "timed out after 50ms");
  EXPECT_EQ(ex.stuckWorkers(), 1u);
  EXPECT_EQ(m_.stuck_workers.value(), 1);

  // The other worker still serves.
  EXPECT_EQ(ex.run(answer("B"), 1000ms).how, How::kAnswered);

  gate->release();  // the stuck call returns; its answer is dropped
  EXPECT_TRUE(eventually([&] { return ex.stuckWorkers() == 0; }));
  EXPECT_EQ(m_.stuck_workers.value(), 0);
}

// A stuck worker's return is said, with how late it was and how many are
// still stuck: the line that closes the "stuck" warning for an operator.
TEST_F(ExecutorTest, AStuckWorkersReturnIsLogged) {
  std::ostringstream text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  auto log = std::make_shared<spdlog::logger>("hook", sink);
  auto gate = std::make_shared<Gate>();
  HookExecutor ex("h", 1, 0, log, &m_);
  EXPECT_EQ(ex.run(blockOn(gate), 10ms).how, How::kTimedOut);
  gate->release();
  // The line is written under the lock stuckWorkers() takes, before it
  // says 0: it is complete once that is seen.
  ASSERT_TRUE(eventually([&] { return ex.stuckWorkers() == 0; }));
  EXPECT_THAT(text.str(), HasSubstr("hook h: a worker returned "));
  EXPECT_THAT(text.str(), HasSubstr("ms after its call timed out (0 still stuck)"));
}

TEST_F(ExecutorTest, EveryWorkerBusyAndTheQueueFullIsAnsweredAtOnceWithoutANewThread) {
  auto gate = std::make_shared<Gate>();
  HookExecutor ex("h", 1, 1, logger("hook"), &m_);
  // The one worker runs a call that does not return; a second call waits in
  // the queue (on another thread, with a long budget).
  std::thread first([&] { ex.run(blockOn(gate), 10000ms); });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(gate->mu);
    return gate->waiting == 1;
  }));
  std::thread second([&] { ex.run(answer("Q"), 10000ms); });
  ASSERT_TRUE(eventually([&] { return ex.queued() == 1; }));
  const size_t threads = threadCount();
  const auto t0 = Clock::now();
  auto r = ex.run(answer("X"), 10000ms);
  EXPECT_LT(Clock::now() - t0, 100ms) << "a refusal waits for nothing";
  EXPECT_EQ(r.how, How::kQueueFull);
  EXPECT_EQ(r.decision.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.decision.status.message(),
            "all 1 workers busy (0 stuck) and 1 calls queued, the most allowed");
  EXPECT_EQ(threadCount(), threads);
  EXPECT_EQ(m_.refused_queue_full.value(), 1u);
  gate->release();
  first.join();
  second.join();
}

TEST_F(ExecutorTest, TimeoutsInARowMarkItUnhealthyUntilAProbeAnswers) {
  auto gate = std::make_shared<Gate>();
  HookExecutor ex("h", kUnhealthyAfterTimeouts, 0, logger("hook"), &m_);
  for (int i = 0; i < kUnhealthyAfterTimeouts; ++i) {
    EXPECT_TRUE(ex.healthy()) << "after " << i << " timeouts";
    EXPECT_EQ(ex.run(blockOn(gate), 20ms).how, How::kTimedOut);
  }
  EXPECT_FALSE(ex.healthy());
  EXPECT_EQ(m_.unhealthy.value(), 1);

  // Every worker is stuck: refused at once, nothing runs.
  std::atomic<bool> ran{false};
  const auto t0 = Clock::now();
  auto r = ex.run(
      [&] {
        ran = true;
        return HookDecision::proceed();
      },
      5000ms);
  EXPECT_LT(Clock::now() - t0, 100ms);
  EXPECT_EQ(r.how, How::kUnhealthy);
  EXPECT_EQ(r.decision.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.decision.status.message()),
              HasSubstr("unhealthy (3 or more timeouts in a row, 3 of 3 workers stuck); refused "
                        "until it answers again"));
  EXPECT_EQ(m_.refused_unhealthy.value(), 1u);

  // The workers come back; the next call is the probe, answers, and the hook
  // is healthy again.
  gate->release();
  ASSERT_TRUE(eventually([&] { return ex.stuckWorkers() == 0; }));
  EXPECT_FALSE(ex.healthy()) << "a late answer is no proof of health";
  EXPECT_EQ(ex.run(answer("P"), 1000ms).how, How::kAnswered);
  EXPECT_TRUE(ex.healthy());
  EXPECT_EQ(m_.unhealthy.value(), 0);
  EXPECT_FALSE(ran.load());
}

// Timeouts count only in a row: a hook that misses a deadline now and then
// over days, answering in between, is never marked unhealthy.
TEST_F(ExecutorTest, AnAnswerBetweenTimeoutsStartsTheCountAgain) {
  auto gate = std::make_shared<Gate>();
  HookExecutor ex("h", 2 * kUnhealthyAfterTimeouts + 1, 0, logger("hook"), &m_);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i + 1 < kUnhealthyAfterTimeouts; ++i)
      EXPECT_EQ(ex.run(blockOn(gate), 10ms).how, How::kTimedOut);
    EXPECT_TRUE(ex.healthy());
    EXPECT_EQ(ex.run(answer("A"), 5000ms).how, How::kAnswered);
  }
  EXPECT_TRUE(ex.healthy()) << 2 * (kUnhealthyAfterTimeouts - 1) << " timeouts, not in a row";
  EXPECT_EQ(m_.unhealthy.value(), 0);
  for (int i = 0; i < kUnhealthyAfterTimeouts; ++i) ex.run(blockOn(gate), 10ms);
  EXPECT_FALSE(ex.healthy()) << kUnhealthyAfterTimeouts << " in a row";
  gate->release();
  EXPECT_TRUE(eventually([&] { return ex.stuckWorkers() == 0; }));
}

TEST_F(ExecutorTest, AProbeThatTimesOutKeepsItUnhealthy) {
  auto gate = std::make_shared<Gate>();
  HookExecutor ex("h", kUnhealthyAfterTimeouts + 1, 0, logger("hook"), &m_);
  for (int i = 0; i < kUnhealthyAfterTimeouts; ++i) ex.run(blockOn(gate), 10ms);
  ASSERT_FALSE(ex.healthy());
  // One worker is idle: the probe runs, and hangs as well.
  EXPECT_EQ(ex.run(blockOn(gate), 10ms).how, How::kTimedOut);
  EXPECT_FALSE(ex.healthy());
  EXPECT_EQ(ex.run(answer("N"), 1000ms).how, How::kUnhealthy);
  gate->release();
  EXPECT_TRUE(eventually([&] { return ex.stuckWorkers() == 0; }));
}

TEST_F(ExecutorTest, DestroyingItWithStuckWorkersDoesNotWaitForThem) {
  auto gate = std::make_shared<Gate>();  // never released while the executor lives
  const size_t threads = threadCount();
  auto ex = std::make_unique<HookExecutor>("h", 2, 0, logger("hook"), &m_);
  EXPECT_EQ(threadCount(), threads + 2);
  ex->run(blockOn(gate), 10ms);
  ex->run(blockOn(gate), 10ms);
  ASSERT_EQ(ex->stuckWorkers(), 2u);
  const auto t0 = Clock::now();
  ex.reset();
  EXPECT_LT(Clock::now() - t0, 100ms);
  // The detached workers end when their calls return.
  gate->release();
  EXPECT_TRUE(eventually([&] { return threadCount() == threads; }));
}

TEST_F(ExecutorTest, DestroyingAnIdleOneJoinsItsWorkers) {
  const size_t threads = threadCount();
  {
    HookExecutor ex("h", 4, 0, logger("hook"), &m_);
    EXPECT_EQ(ex.run(answer("I"), 1000ms).how, How::kAnswered);
    EXPECT_EQ(threadCount(), threads + 4);
  }
  // Joined: a joined thread may still be listed in /proc/self/task for a
  // moment (pthread_join returns when the kernel clears its tid, before the
  // task is released), longer on a loaded machine.
  EXPECT_TRUE(eventually([&] { return threadCount() == threads; }));
}

}  // namespace
}  // namespace crihook
