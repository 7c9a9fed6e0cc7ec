// The relay's event loop (proxy/event_loop.h): tasks from its own thread and
// others, timers, edge-triggered input, room to write, and stop; and a
// relayed connection driven on it by hand.

#include "proxy/event_loop.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "proxy/relay.h"

namespace crihook::relay {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<EventLoop> makeLoop() {
  auto loop = EventLoop::create();
  EXPECT_TRUE(loop.ok()) << loop.status();
  return std::move(*loop);
}

// A loop on a thread of its own, stopped and joined at the end.
struct RunningLoop {
  std::unique_ptr<EventLoop> loop = makeLoop();
  std::thread thread{[this] { loop->run(); }};
  ~RunningLoop() {
    loop->stop();
    thread.join();
  }
  // Runs `f` on the loop's thread and waits for it.
  template <class F>
  void on(F f) {
    std::promise<void> done;
    loop->post([&] {
      f();
      done.set_value();
    });
    ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
  }
};

struct SocketPair {
  int ours = -1, theirs = -1;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    ours = fds[0];
    theirs = fds[1];
  }
  ~SocketPair() {
    if (ours >= 0) ::close(ours);
    ::close(theirs);
  }
};

TEST(EventLoop, TasksPostedFromOtherThreadsRunOnTheLoopInOrder) {
  RunningLoop r;
  std::vector<int> seen;
  std::atomic<bool> all_on_loop{true};
  std::promise<void> done;
  for (int i = 0; i < 100; ++i) {
    r.loop->post([&, i] {
      if (!r.loop->inLoop()) all_on_loop = false;
      seen.push_back(i);
      if (i == 99) done.set_value();
    });
  }
  ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(all_on_loop);
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i);
  EXPECT_FALSE(r.loop->inLoop());
}

TEST(EventLoop, DispatchRunsAtOnceOnTheLoopAndIsPostedElsewhere) {
  RunningLoop r;
  std::vector<std::string> order;
  r.on([&] {
    r.loop->dispatch([&] { order.push_back("dispatched"); });
    order.push_back("after");
  });
  EXPECT_EQ(order, (std::vector<std::string>{"dispatched", "after"}));
  std::promise<bool> on_loop;
  r.loop->dispatch([&] { on_loop.set_value(r.loop->inLoop()); });
  EXPECT_TRUE(on_loop.get_future().get());
}

TEST(EventLoop, TimersRunInDeadlineOrderNotEarlyAndCancelledOnesNever) {
  RunningLoop r;
  std::mutex mu;
  std::vector<std::string> fired;
  std::promise<void> last;
  const auto start = EventLoop::Clock::now();
  EventLoop::Clock::time_point late_at{};
  r.on([&] {
    r.loop->runAfter(60ms, [&] {
      std::lock_guard lock(mu);
      fired.push_back("60");
    });
    const uint64_t cancelled = r.loop->runAfter(20ms, [&] {
      std::lock_guard lock(mu);
      fired.push_back("cancelled");
    });
    r.loop->runAfter(10ms, [&] {
      std::lock_guard lock(mu);
      fired.push_back("10");
    });
    r.loop->runAfter(100ms, [&] {
      late_at = EventLoop::Clock::now();
      last.set_value();
    });
    r.loop->cancel(cancelled);
  });
  ASSERT_EQ(last.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_GE(late_at - start, 100ms);
  std::lock_guard lock(mu);
  EXPECT_EQ(fired, (std::vector<std::string>{"10", "60"}));
}

TEST(EventLoop, ExpireTimersRunsThePendingOnesNowButNotThoseTheyArm) {
  auto loop = makeLoop();
  std::vector<std::string> ran;
  loop->poll();  // the calling thread is the loop's
  loop->runAfter(1h, [&] {
    ran.push_back("hour");
    loop->runAfter(1h, [&] { ran.push_back("armed by hour"); });
  });
  const uint64_t cancelled = loop->runAfter(1h, [&] { ran.push_back("cancelled"); });
  loop->runAfter(2h, [&] { ran.push_back("two hours"); });
  loop->cancel(cancelled);
  EXPECT_EQ(loop->expireTimers(), 2u);
  EXPECT_EQ(ran, (std::vector<std::string>{"hour", "two hours"}));
  EXPECT_EQ(loop->poll(), 0u);  // the one armed meanwhile is an hour away
  EXPECT_EQ(loop->expireTimers(), 1u);
  EXPECT_EQ(ran.back(), "armed by hour");
}

// The loop thread's voluntary context switches: each wait that ends (a
// wake-up) counts one.
long wakeupsOf(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
  }
  return -1;
}

TEST(EventLoop, AnIdleLoopDoesNotWakeForACancelledTimer) {
  // The relay arms and cancels a short timer for nearly every call (a PING
  // ACK's): an idle loop must not wake for each at its time. A live timer
  // due after the cancelled one is the event that tells: between arming the
  // two and running the live one, the idle loop waits once, for it.
  RunningLoop r;
  std::promise<std::pair<long, long>> counts;  // at arming, when the live timer runs
  r.on([&] {
    const auto tid = static_cast<pid_t>(::gettid());
    r.loop->cancel(r.loop->runAfter(10ms, [] {}));
    const long armed = wakeupsOf(tid);
    r.loop->runAfter(50ms, [&counts, tid, armed] { counts.set_value({armed, wakeupsOf(tid)}); });
  });
  auto ran = counts.get_future();
  ASSERT_EQ(ran.wait_for(10s), std::future_status::ready);
  const auto [armed, fired] = ran.get();
  ASSERT_GE(armed, 0);
  EXPECT_EQ(fired, armed + 1) << "the loop woke " << fired - armed << " times for one live timer";
}

// Records what the loop tells it, and reads what it is told to.
class Reader final : public IoHandler {
 public:
  explicit Reader(int fd) : fd_(fd) {}
  void onReadable(bool hangup) override {
    ++wakeups;
    hangups += hangup;
    char buf[4];  // small: a long input takes several reads
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) {
        eof = eof || n == 0;
        return;
      }
      got.append(buf, static_cast<size_t>(n));
    }
  }
  void onWritable() override { ++writable; }

  int fd_;
  int wakeups = 0, hangups = 0, writable = 0;
  bool eof = false;
  std::string got;
};

TEST(EventLoop, InputIsReportedOncePerEdgeAndAHangupSaysSo) {
  SocketPair p;
  auto loop = makeLoop();
  auto reader = std::make_shared<Reader>(p.ours);
  ASSERT_TRUE(loop->watch(p.ours, reader).ok());
  EXPECT_EQ(loop->poll(), 0u);  // nothing yet
  ASSERT_EQ(::send(p.theirs, "hello world", 11, 0), 11);
  EXPECT_EQ(loop->poll(), 1u);
  EXPECT_EQ(reader->got, "hello world");
  EXPECT_EQ(loop->poll(), 0u);  // drained: no second report without new input
  EXPECT_EQ(reader->wakeups, 1);
  ::shutdown(p.theirs, SHUT_WR);
  loop->poll();
  EXPECT_EQ(reader->hangups, 1);
  EXPECT_TRUE(reader->eof);
}

TEST(EventLoop, RoomToWriteIsToldOnlyWhileAsked) {
  SocketPair p;
  auto loop = makeLoop();
  auto handler = std::make_shared<Reader>(p.ours);
  ASSERT_TRUE(loop->watch(p.ours, handler).ok());
  loop->poll();
  EXPECT_EQ(handler->writable, 0);  // writable all along, not asked
  // Fill the socket, then ask.
  const std::string chunk(65536, 'x');
  while (::send(p.ours, chunk.data(), chunk.size(), MSG_DONTWAIT) > 0) {
  }
  loop->wantWritable(p.ours, true);
  loop->poll();
  EXPECT_EQ(handler->writable, 0);  // still full
  char buf[65536];
  while (::recv(p.theirs, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  loop->poll();
  EXPECT_EQ(handler->writable, 1);
  loop->wantWritable(p.ours, false);
  ::send(p.ours, "y", 1, MSG_DONTWAIT);
  while (::recv(p.theirs, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  loop->poll();
  EXPECT_EQ(handler->writable, 1);
}

TEST(EventLoop, AnUnwatchedHandlerIsReleasedAfterItsTurnAndHearsNoMore) {
  SocketPair p;
  auto loop = makeLoop();
  auto reader = std::make_shared<Reader>(p.ours);
  std::weak_ptr<Reader> weak = reader;
  ASSERT_TRUE(loop->watch(p.ours, std::move(reader)).ok());
  loop->unwatch(p.ours);
  EXPECT_FALSE(weak.expired());  // held until the loop's next task
  // A descriptor no longer watched is not known: asking for room to write,
  // or to stop watching it again, is ignored.
  loop->wantWritable(p.ours, true);
  loop->unwatch(p.ours);
  ::send(p.theirs, "late", 4, 0);
  loop->poll();
  EXPECT_TRUE(weak.expired());
}

TEST(EventLoop, StopRunsWhatWasPostedBeforeItThenRunReturns) {
  auto loop = makeLoop();
  std::atomic<int> ran{0};
  std::thread t([&] { loop->run(); });
  for (int i = 0; i < 10; ++i) {
    loop->post([&, l = loop.get()] {
      ++ran;
      l->post([&] { ++ran; });  // and what those post on the loop
    });
  }
  loop->stop();
  t.join();
  EXPECT_EQ(ran.load(), 20);
}

// One edge can carry a client's last bytes and its hang-up together; no
// other edge follows. The connection must read on to the end and close,
// not sit on a dead socket until a timeout.
TEST(EventLoop, AConnectionWhosePeerSentAndHungUpAtOnceIsClosedOnThatEdge) {
  RelayContext ctx;
  ctx.backend_path = "/nonexistent/crihook-event-loop-test.sock";
  ctx.log = std::make_shared<spdlog::logger>("proxy");
  PassThroughInterceptor pass;
  ctx.interceptor = &pass;
  auto loop = makeLoop();
  SocketPair p;
  Connection conn(*loop, p.ours, ctx);
  p.ours = -1;  // the connection's now
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  ASSERT_EQ(::send(p.theirs, preface.data(), preface.size(), 0),
            static_cast<ssize_t>(preface.size()));
  ::shutdown(p.theirs, SHUT_WR);
  for (int i = 0; i < 10 && conn.alive(); ++i) loop->poll();
  EXPECT_FALSE(conn.alive());
  EXPECT_EQ(ctx.open_connections.load(), 0);
}

}  // namespace
}  // namespace crihook::relay
