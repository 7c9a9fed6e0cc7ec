// GrowingPool: a thread per blocked task up to the maximum, queued past it,
// idle threads ending, and every posted task run before the pool is gone.

#include "base/growing_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <system_error>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "test/support/eventually.h"

namespace crihook {
namespace {

using namespace std::chrono_literals;

// Tasks that block until let go, counting how many are in.
struct Gate {
  Mutex mu;
  CondVar opened;
  bool open ABSL_GUARDED_BY(mu) = false;
  std::atomic<int> in{0}, done{0};

  std::function<void()> task() {
    return [this] {
      in++;
      MutexLock lock(mu);
      while (!open) opened.wait(lock);
      done++;
    };
  }
  void letGo() {
    MutexLock lock(mu);
    open = true;
    opened.notifyAll();
  }
};

TEST(GrowingPool, StartsNoThreadUntilWorkArrives) {
  GrowingPool pool("test-pool", 8);
  EXPECT_EQ(pool.threads(), 0u);
}

TEST(GrowingPool, EveryBlockedTaskGetsAThreadOfItsOwnUpToTheMaximum) {
  GrowingPool pool("test-pool", 16);
  Gate gate;
  for (int i = 0; i < 16; ++i) pool.post(gate.task());
  // Sixteen in at once: none waits for another to end.
  EXPECT_TRUE(eventually([&] { return gate.in == 16; })) << gate.in;
  EXPECT_EQ(pool.threads(), 16u);
  EXPECT_EQ(pool.queued(), 0u);
  gate.letGo();
  EXPECT_TRUE(eventually([&] { return gate.done == 16; }));
}

TEST(GrowingPool, PastTheMaximumTasksWaitInOrderAndAllRun) {
  GrowingPool pool("test-pool", 3);
  Gate gate;
  for (int i = 0; i < 5; ++i) pool.post(gate.task());
  ASSERT_TRUE(eventually([&] { return gate.in == 3; }));
  EXPECT_EQ(pool.threads(), 3u);
  EXPECT_EQ(pool.queued(), 2u);
  gate.letGo();
  EXPECT_TRUE(eventually([&] { return gate.done == 5; }));
  EXPECT_EQ(pool.threads(), 3u);  // no more than the maximum, ever
}

TEST(GrowingPool, AnIdleThreadIsReusedNotDoubled) {
  GrowingPool pool("test-pool", 8);
  for (int i = 0; i < 20; ++i) {
    std::promise<void> ran;
    pool.post([&ran] { ran.set_value(); });
    ran.get_future().wait();
    ASSERT_TRUE(eventually([&] { return pool.idle() == pool.threads(); }));
    EXPECT_EQ(pool.threads(), 1u);  // the one idle thread took it
  }
}

TEST(GrowingPool, IdleThreadsEnd) {
  GrowingPool pool("test-pool", 4, 10ms);
  Gate gate;
  for (int i = 0; i < 4; ++i) pool.post(gate.task());
  ASSERT_TRUE(eventually([&] { return gate.in == 4; }));
  gate.letGo();
  EXPECT_TRUE(eventually([&] { return pool.threads() == 0; }));
  // And work arriving later starts one again.
  std::promise<void> ran;
  pool.post([&ran] { ran.set_value(); });
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
}

TEST(GrowingPool, DestructionRunsEveryPostedTask) {
  std::atomic<int> ran{0};
  {
    GrowingPool pool("test-pool", 1);
    Gate gate;
    pool.post(gate.task());
    for (int i = 0; i < 10; ++i) pool.post([&ran] { ran++; });
    ASSERT_TRUE(eventually([&] { return gate.in == 1; }));
    gate.letGo();
  }
  EXPECT_EQ(ran, 10);
}

// A thread the system will not give (std::thread throws, as it does at a
// task limit) leaves the task queued, not thrown at the caller: a running
// worker takes it, or the thread the next post() starts.
TEST(GrowingPool, ATaskNoThreadCanBeStartedForWaitsForTheNextOne) {
  std::atomic<bool> refuse{true};
  std::atomic<int> starts{0};
  GrowingPool pool("test-pool", 4, 30s, [&](const std::string&, std::function<void()> fn) {
    if (refuse) throw std::system_error(EAGAIN, std::generic_category(), "thread");
    starts++;
    return std::thread(std::move(fn));
  });
  std::atomic<int> ran{0};
  pool.post([&ran] { ran++; });
  EXPECT_EQ(pool.startFailures(), 1u);
  EXPECT_EQ(pool.threads(), 0u) << "no thread counted that never started";
  EXPECT_EQ(pool.queued(), 1u);

  // One worker running, busy: a task whose thread fails waits for it.
  refuse = false;
  Gate gate;
  pool.post(gate.task());
  ASSERT_TRUE(eventually([&] { return gate.in == 1 && ran == 1; }))
      << "the next start took the queued task first";
  refuse = true;
  pool.post([&ran] { ran++; });
  EXPECT_EQ(pool.startFailures(), 2u);
  EXPECT_EQ(pool.threads(), 1u);
  gate.letGo();
  EXPECT_TRUE(eventually([&] { return ran == 2; })) << "the running worker took it";
  EXPECT_EQ(starts, 1);
}

}  // namespace
}  // namespace crihook
