// Hook modules out of process (module_host.h): a module in a helper of its
// own, crashing, hanging or slow to start, costs that helper, never the
// caller; and it is refused at load as an in-process one is.

#include "hooks/module/module_host.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "base/logging.h"
#include "confine/launcher.h"
#include "hooks/chain.h"
#include "test/hooks/module/module_test_input.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/process_stats.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

ModuleIsolation isolation() {
  ModuleIsolation m;
  m.host = MODULE_HOST;
  m.launcher = std::make_shared<confine::DirectLauncher>();
  return m;
}

// A DirectLauncher whose helpers write their standard error to `path`
// (crihookd's helpers share its own, the journal's stream).
class StderrToFileLauncher final : public confine::DirectLauncher {
 public:
  explicit StderrToFileLauncher(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) {}
  ~StderrToFileLauncher() override { ::close(fd_); }
  absl::StatusOr<pid_t> start(const confine::LaunchRequest& request, int channel) override {
    std::lock_guard lock(mu_);
    const int saved = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
    ::dup2(fd_, 2);  // inherited by the helper as its descriptor 2
    absl::StatusOr<pid_t> pid = DirectLauncher::start(request, channel);
    ::dup2(saved, 2);
    ::close(saved);
    return pid;
  }

 private:
  const int fd_;
  std::mutex mu_;
};

HookInput crashingInput() {
  HookInput in = createInput({{"test", "segv"}});  // the segv variant crashes on it
  in.deadline = Clock::now() + 5s;
  return in;
}

HookInput isolatedInput(std::chrono::milliseconds budget = 5000ms) {
  HookInput in = createInput();
  in.deadline = Clock::now() + budget;
  return in;
}

TEST(ModuleTest, ASegfaultingModuleOutOfProcessLeavesTheCallerServing) {
  auto hook = loadIsolatedModuleHook("segv", variant("segv"), "{}", isolation(), logger("hook"));
  ASSERT_TRUE(hook.ok()) << hook.status();
  EXPECT_TRUE((*hook)->honoursDeadline());
  EXPECT_EQ((*hook)->run(isolatedInput()).kind, HookDecision::Kind::kContinue);

  // The crash costs the call (its failure policy decides) ...
  HookChain chain(logger("hook"));
  chain.add(*hook, {});
  ChainOutcome out = chain.run(crashingInput(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook segv failed in PreCreateContainer: its helper (pid "));
  EXPECT_THAT(std::string(out.status.message()), HasSubstr("ended during the call"));

  // ... and the helper is restarted after its backoff: the next calls work.
  HookDecision d;
  EXPECT_TRUE(eventually([&] {
    d = (*hook)->run(isolatedInput());
    if (d.kind == HookDecision::Kind::kContinue) return true;
    EXPECT_THAT(std::string(d.status.message()), HasSubstr("restarting in"));
    return false;
  })) << d.status;
  EXPECT_TRUE(chain.run(createInput(), Clock::time_point::max()).status.ok());
}

// The ms a call refused during a restart's backoff says are left ("its
// helper died; restarting in Nms"), or -1.
long restartingIn(const absl::Status& status) {
  const std::string m(status.message());
  const size_t at = m.find("restarting in ");
  if (at == std::string::npos) return -1;
  return std::stol(m.substr(at + 14));
}

// A helper that crashes now and then, answering in between, is restarted
// after the first backoff each time: deaths count only in a row.
TEST(ModuleTest, AHelperThatAnswersBetweenCrashesIsRestartedAfterTheFirstBackoff) {
  auto hook = loadIsolatedModuleHook("segv", variant("segv"), "{}", isolation(), logger("hook"));
  ASSERT_TRUE(hook.ok()) << hook.status();
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    ASSERT_EQ((*hook)->run(crashingInput()).status.code(), absl::StatusCode::kUnavailable);
    HookDecision d = (*hook)->run(isolatedInput());
    if (d.kind != HookDecision::Kind::kContinue) {
      // (No figure when the backoff passed before this call: a slow machine.)
      EXPECT_LE(restartingIn(d.status), kHostFirstRestart.count())
          << "the backoff grew across good answers";
      ASSERT_TRUE(eventually(
          [&] { return (*hook)->run(isolatedInput()).kind == HookDecision::Kind::kContinue; }));
    }
  }
}

// The helper's pid a call's status names ("its helper (pid N) ...").
std::string helperPid(const absl::Status& status) {
  const std::string m(status.message());
  const size_t at = m.find("(pid ");
  if (at == std::string::npos) return "";
  return m.substr(at + 5, m.find(')', at) - at - 5);
}

// The state letter of process `pid` (/proc/PID/stat: R, S, Z ...); NUL when
// there is no such process.
char processState(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(") ");
  return name_end == std::string::npos || name_end + 2 >= stat.size() ? '\0' : stat[name_end + 2];
}

TEST(ModuleTest, AHungModuleOutOfProcessIsCutAtItsDeadlineAndReplaced) {
  TempDir dir;
  ModuleIsolation iso = isolation();
  iso.launcher = std::make_shared<StderrToFileLauncher>(dir.file("helpers.err"));
  auto hook = loadIsolatedModuleHook("hang", variant("hang"), "{}", iso, logger("hook"));
  ASSERT_TRUE(hook.ok()) << hook.status();
  const size_t threads = threadCount();
  std::set<std::string> helpers;
  std::string first;
  for (int i = 0; i < 3; ++i) {
    // Every call is cut at its deadline. One that finds the replacement
    // still starting (a start can take longer than 50 ms on a loaded
    // machine) leaves it starting for the next, which reaches the module.
    HookDecision d;
    const auto until = Clock::now() + kHostStartTimeout;
    for (;;) {
      const auto t0 = Clock::now();
      d = (*hook)->run(isolatedInput(50ms));
      EXPECT_LT(Clock::now() - t0, 1s);
      ASSERT_EQ(d.status.code(), absl::StatusCode::kDeadlineExceeded) << d.status;
      if (absl::StrContains(d.status.message(), "did not answer in time") || Clock::now() > until)
        break;
      EXPECT_THAT(std::string(d.status.message()), HasSubstr("starting"));
    }
    EXPECT_THAT(std::string(d.status.message()),
                HasSubstr("did not answer in time; it is replaced"));
    helpers.insert(helperPid(d.status));
    if (i == 0) first = helperPid(d.status);
  }
  EXPECT_EQ(helpers.size(), 3u) << "a new helper each time";
  // (Fewer, not more: other tests' abandoned workers may end meanwhile.)
  EXPECT_LE(threadCount(), threads) << "no thread of crihookd's waits on a hung helper";
  // A cut helper ends a grace after its call (its watchdog), while its
  // replacements run: it was still running when the next one started. The
  // next start reaps it (crihookd started it), so no zombie is left.
  ASSERT_TRUE(eventually([&] { return processState(first) == 'Z'; }, 10s))
      << "helper " << first << " ended, unreaped";
  // Its watchdog said why, a whole line of its own on the standard error it
  // shares with crihookd's log.
  EXPECT_THAT(readFile(dir.file("helpers.err")),
              HasSubstr("crihook-module-host: the module overran its call; exiting\n"));
  (void)(*hook)->run(isolatedInput(50ms));  // a start, which reaps what ended first
  EXPECT_EQ(processState(first), '\0') << "helper " << first << " is left a zombie";
}

// Starts helpers behind a relay the test steers, so that events, not time,
// decide when crihookd sees a helper become ready and whether a query is
// answered in time. The first helper (the one the load waits for) passes
// freely; from the second on, the relay holds a helper's ready frame until
// passReady() and its answers until passAnswers().
class RelayLauncher final : public confine::DirectLauncher {
 public:
  ~RelayLauncher() override {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
  }

  absl::StatusOr<pid_t> start(const confine::LaunchRequest& request, int channel) override {
    const int crihookd = ::fcntl(channel, F_DUPFD_CLOEXEC, 0);  // `channel` is borrowed
    if (crihookd < 0) return absl::InternalError("fcntl F_DUPFD_CLOEXEC");
    int helper[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, helper) != 0) {
      ::close(crihookd);
      return absl::InternalError("socketpair");
    }
    absl::StatusOr<pid_t> pid = DirectLauncher::start(request, helper[1]);
    ::close(helper[1]);
    std::lock_guard lock(mu_);
    fds_.insert(fds_.end(), {helper[0], crihookd});
    if (!pid.ok()) return pid;
    const bool held = !pids_.empty();
    pids_.push_back(*pid);
    threads_.emplace_back([=] { copy(crihookd, helper[0]); });
    threads_.emplace_back(
        [=, this] { held ? relayHeld(helper[0], crihookd) : copy(helper[0], crihookd); });
    return pid;
  }

  // Waits (kHostStartTimeout) for the held helper to say ready, passes that
  // on and returns once it waits in crihookd's end of the channel.
  bool passReady() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, kHostStartTimeout, [&] { return holding_ready_; })) return false;
    pass_ready_ = true;
    cv_.notify_all();
    return cv_.wait_for(lock, kHostStartTimeout, [&] { return ready_passed_ || closing_; }) &&
           ready_passed_;
  }
  void passAnswers() {
    std::lock_guard lock(mu_);
    pass_answers_ = true;
    cv_.notify_all();
  }
  // Every helper started, in order.
  std::vector<pid_t> pids() {
    std::lock_guard lock(mu_);
    return pids_;
  }

 private:
  static bool sendAll(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0 && errno != EINTR) return false;
      if (n > 0) bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  static bool readFrame(int fd, std::string& frame) {
    frame.assign(4, '\0');
    if (::recv(fd, frame.data(), 4, MSG_WAITALL) != 4) return false;
    uint32_t len = 0;
    std::memcpy(&len, frame.data(), 4);
    frame.resize(4 + size_t{len});
    return ::recv(fd, frame.data() + 4, len, MSG_WAITALL) == static_cast<ssize_t>(len);
  }
  // Bytes as they come, until either end closes.
  static void copy(int from, int to) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(from, buf, sizeof(buf), 0)) > 0 || (n < 0 && errno == EINTR);)
      if (n > 0 && !sendAll(to, std::string_view(buf, static_cast<size_t>(n)))) break;
    ::shutdown(to, SHUT_WR);
  }
  // A held helper's frames: its ready frame at passReady(), the rest (its
  // answers) from passAnswers() on.
  void relayHeld(int helper, int crihookd) {
    std::string frame;
    for (bool first = true; readFrame(helper, frame); first = false) {
      {
        std::unique_lock lock(mu_);
        holding_ready_ = holding_ready_ || first;
        cv_.notify_all();
        cv_.wait(lock, [&] { return (first ? pass_ready_ : pass_answers_) || closing_; });
        if (closing_) break;
      }
      if (!sendAll(crihookd, frame)) break;
      if (first) {
        std::lock_guard lock(mu_);
        ready_passed_ = true;
        cv_.notify_all();
      }
    }
    ::shutdown(crihookd, SHUT_WR);
  }

  std::mutex mu_;  // guards the rest
  std::condition_variable cv_;
  std::vector<pid_t> pids_;
  std::vector<std::thread> threads_;
  std::vector<int> fds_;        // the relay's ends, closed when it goes
  bool holding_ready_ = false;  // a held helper said ready
  bool pass_ready_ = false;
  bool ready_passed_ = false;  // ... and crihookd can read it
  bool pass_answers_ = false;
  bool closing_ = false;
};

// Crashes the helper of `hook` (the segv variant), and returns the first
// 50 ms call past the restart's backoff: the one that starts the next helper.
HookDecision crashAndRestart(Hook& hook) {
  EXPECT_EQ(hook.run(crashingInput()).status.code(), absl::StatusCode::kUnavailable);
  HookDecision d;
  EXPECT_TRUE(eventually([&] {
    d = hook.run(isolatedInput(50ms));
    return !absl::StrContains(d.status.message(), "restarting in");
  })) << d.status;
  return d;
}

// A segv module behind a RelayLauncher, crashed once: the first 50 ms call
// past the backoff (first_) has started its second helper (helper_), which
// the relay keeps starting until passReady().
class HeldRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ModuleIsolation held = isolation();
    held.launcher = relay_;
    auto hook = loadIsolatedModuleHook("segv", variant("segv"), "{}", held, logger("hook"));
    ASSERT_TRUE(hook.ok()) << hook.status();
    hook_ = *hook;
    first_ = crashAndRestart(*hook_);
    ASSERT_THAT(std::string(first_.status.message()), HasSubstr("is still starting"));
    helper_ = helperPid(first_.status);
  }

  std::shared_ptr<RelayLauncher> relay_ = std::make_shared<RelayLauncher>();
  std::shared_ptr<Hook> hook_;
  HookDecision first_;
  std::string helper_;
};

TEST_F(HeldRestartTest, AHelperSlowerToStartThanACallsBudgetServesTheCallsAfterIt) {
  // The first call past the backoff starts a new helper; its 50 ms end
  // before the helper says ready (the relay holds that back) ...
  EXPECT_EQ(first_.status.code(), absl::StatusCode::kDeadlineExceeded) << first_.status;
  ASSERT_EQ(relay_->pids().size(), 2u);
  EXPECT_EQ(helper_, std::to_string(relay_->pids().back()));

  // ... and so do those of the calls after it, which leave it starting: a
  // start cut at each call's deadline would never finish ...
  HookDecision d;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    d = hook_->run(isolatedInput(50ms));
    EXPECT_LT(Clock::now() - t0, 1s);
    EXPECT_THAT(std::string(d.status.message()), HasSubstr("is still starting"));
    ASSERT_EQ(helperPid(d.status), helper_) << d.status << ": the same helper, still starting";
  }

  // ... and once it is ready, it serves.
  ASSERT_TRUE(relay_->passReady());
  relay_->passAnswers();
  d = hook_->run(isolatedInput());
  EXPECT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(relay_->pids().size(), 2u) << "the helper that was starting serves, not a new one";
}

TEST_F(HeldRestartTest, AHelperReadyInACallsLastMillisecondsIsKeptForTheNextCall) {
  // Its ready frame waits in crihookd's end of the channel: a call with less
  // than kMinQueryAfterStart left sees it become ready at once. The relay
  // holds answers back, as a helper too slow for those last ms would: a query
  // now would go unanswered, and the helper be replaced, its start lost.
  ASSERT_TRUE(relay_->passReady());
  HookDecision d = hook_->run(isolatedInput(kMinQueryAfterStart / 2));
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDeadlineExceeded) << d.status;
  EXPECT_EQ(helperPid(d.status), helper_) << d.status;
  EXPECT_THAT(std::string(d.status.message()), HasSubstr("it is kept")) << d.status;

  // The next call asks that helper.
  relay_->passAnswers();
  d = hook_->run(isolatedInput());
  EXPECT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  EXPECT_EQ(relay_->pids().size(), 2u) << "a new helper replaced the one that became ready";
}

TEST(ModuleTest, AnIsolatedModuleIsRefusedAsAnInProcessOneIs) {
  auto hook = loadIsolatedModuleHook("example", EXAMPLE_MODULE, R"({"colour": "blue"})",
                                     isolation(), logger("hook"));
  ASSERT_FALSE(hook.ok());
  EXPECT_THAT(std::string(hook.status().message()),
              HasSubstr(std::string("module ") + EXAMPLE_MODULE +
                        ": init failed (1): settings.colour: expected env or value"));
  EXPECT_THAT(
      std::string(loadIsolatedModuleHook("v", variant("abi99"), "{}", isolation(), logger("hook"))
                      .status()
                      .message()),
      HasSubstr("built for module ABI version 99"));

  auto example = loadIsolatedModuleHook(
      "example", EXAMPLE_MODULE, R"({"env": "TEAM", "value": "ml"})", isolation(), logger("hook"));
  ASSERT_TRUE(example.ok()) << example.status();
  HookDecision d = (*example)->run(isolatedInput());
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  ASSERT_EQ(d.adjustment.env.size(), 1u);
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"TEAM", "ml"}));
}

// DirectLauncher's start(), each helper's pid kept.
class PidRecordingLauncher final : public confine::DirectLauncher {
 public:
  absl::StatusOr<pid_t> start(const confine::LaunchRequest& request, int channel) override {
    auto pid = DirectLauncher::start(request, channel);
    std::lock_guard lock(mu_);
    if (pid.ok()) pids_.push_back(*pid);
    return pid;
  }
  std::vector<pid_t> pids() {
    std::lock_guard lock(mu_);
    return pids_;
  }

 private:
  std::mutex mu_;  // guards pids_
  std::vector<pid_t> pids_;
};

// A reply over 4 MiB from a helper is refused as over the bound, as one
// from a module in crihookd is: the helper passes one byte more than the
// bound, never a reply cut to fit.
TEST(ModuleTest, AHelpersReplyOverTheBoundIsRefusedNotCut) {
  auto hook = loadIsolatedModuleHook("huge", variant("huge"), "{}", isolation(), logger("hook"));
  ASSERT_TRUE(hook.ok()) << hook.status();
  HookDecision d = (*hook)->run(isolatedInput());
  ASSERT_EQ(d.kind, HookDecision::Kind::kError);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("reply of hook huge: 4194305 bytes, more than the 4194304 allowed"));
}

// An operator reading ps or top tells a module's helper by its name, not by
// its program's cut to 15 characters ("crihook-module-").
TEST(ModuleTest, AHelperIsNamedCrihookModule) {
  auto launcher = std::make_shared<PidRecordingLauncher>();
  ModuleIsolation m = isolation();
  m.launcher = launcher;
  auto hook = loadIsolatedModuleHook("ok", variant("ok"), "{}", m, logger("hook"));
  ASSERT_TRUE(hook.ok()) << hook.status();
  ASSERT_EQ(launcher->pids().size(), 1u);
  // Loaded: the helper has said it is ready, after naming itself.
  std::ifstream comm("/proc/" + std::to_string(launcher->pids()[0]) + "/comm");
  std::string name;
  ASSERT_TRUE(std::getline(comm, name));
  EXPECT_EQ(name, "crihook-module");
}

}  // namespace
}  // namespace crihook::testing
