// ChildProcess (child_process.h): exit codes, and that nothing a test starts
// outlives it — not the child, not what the child left in the background,
// whether the ChildProcess is destroyed or the test itself is SIGKILLed.

#include "test/support/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;

// A shell line that leaves a `sleep` orphaned in the background (as a start
// script leaves a daemon, or containerd-shim's `start` its shim) with its
// pid in bg.pid, then becomes a `sleep` itself.
constexpr const char* kOrphanThenSleep =
    "(sleep 1000 & echo $! > bg.pid.tmp && mv bg.pid.tmp bg.pid); exec sleep 1000";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/crihook-child-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string inDir(const std::string& dir, const char* line) {
  return "cd '" + dir + "' && " + line;
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

pid_t parentOf(pid_t pid) {
  const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 4 > stat.size()) return -1;
  return static_cast<pid_t>(std::atoi(stat.c_str() + paren + 4));
}

// The background sleep of kOrphanThenSleep, run in `dir`.
pid_t orphanIn(const TempDir& dir) {
  if (!waitForFile(dir.file("bg.pid"), 10s)) return -1;
  return static_cast<pid_t>(std::atoi(readFile(dir.file("bg.pid")).c_str()));
}

TEST(ChildProcessTest, ReportsExitCodesAndSignals) {
  TempDir dir;
  ChildProcess three("sh", {"-c", "exit 3"}, dir.file("log"));
  EXPECT_EQ(three.wait(10s), 3);
  ChildProcess absent("/nonexistent/binary", {}, dir.file("log"));
  EXPECT_EQ(absent.wait(10s), 127);
  ChildProcess sleeper("sleep", {"1000"}, dir.file("log"));
  EXPECT_EQ(sleeper.wait(0ms), -1);
  sleeper.signal(SIGTERM);
  EXPECT_EQ(sleeper.wait(10s), 128 + SIGTERM);
}

TEST(ChildProcessTest, OutputAndEnvironmentReachTheChild) {
  TempDir dir;
  ChildProcess echo("sh", {"-c", "echo \"$CRIHOOK_CHILD_TEST\"; echo err >&2"}, dir.file("log"),
                    {{"CRIHOOK_CHILD_TEST", "from the test"}});
  ASSERT_EQ(echo.wait(10s), 0);
  EXPECT_EQ(readFile(dir.file("log")), "from the test\nerr\n");
}

// PR_SET_PDEATHSIG fires when the *thread* that forked exits: the child's
// parent is the guard, so a ChildProcess made on a short-lived thread keeps
// its child (else it would end by SIGKILL as the thread ends, not by our
// SIGTERM).
TEST(ChildProcessTest, ChildOutlivesTheThreadThatStartedIt) {
  TempDir dir;
  std::unique_ptr<ChildProcess> child;
  std::thread([&] {
    child =
        std::make_unique<ChildProcess>("sleep", std::vector<std::string>{"1000"}, dir.file("log"));
  }).join();
  ASSERT_GT(child->pid(), 0);
  EXPECT_EQ(child->wait(0ms), -1);
  child->signal(SIGTERM);
  EXPECT_EQ(child->wait(10s), 128 + SIGTERM);
}

TEST(ChildProcessTest, DestructionTakesWhatTheChildLeftBehind) {
  TempDir dir;
  pid_t child = -1, orphan = -1;
  {
    ChildProcess sh("sh", {"-c", inDir(dir.path(), kOrphanThenSleep)}, dir.file("log"));
    child = sh.pid();
    orphan = orphanIn(dir);
    ASSERT_GT(orphan, 0) << readFile(dir.file("log"));
    // Orphaned, it comes to the guard (a subreaper), not to init: once the
    // subshell that wrote bg.pid has exited, which may be a moment later.
    pid_t parent = parentOf(orphan);
    for (auto until = std::chrono::steady_clock::now() + 5s;
         parent != sh.guardPid() && std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(10ms))
      parent = parentOf(orphan);
    EXPECT_EQ(parent, sh.guardPid());
  }
  // The destructor waited for the guard, which reaped both before it exited.
  EXPECT_TRUE(gone(child));
  EXPECT_TRUE(gone(orphan));
  if (!gone(orphan)) ::kill(orphan, SIGKILL);
}

// The proof for a test killed from outside (meson's timeout, a SIGKILL): an
// intermediate process stands for the test; it starts a child through
// ChildProcess and is SIGKILLed, destructors unrun. Its child and the
// child's orphan must be gone. We are a subreaper for the while, so the
// intermediate's orphans (the guard) come to us and we can tell when it is
// done.
TEST(ChildProcessTest, AKilledTestLeavesNothingBehind) {
  TempDir dir;
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pids[2];
  ASSERT_EQ(::pipe(pids), 0);
  const pid_t test = ::fork();
  ASSERT_GE(test, 0);
  if (test == 0) {
    ::close(pids[0]);
    auto* sh = new ChildProcess("sh", {"-c", inDir(dir.path(), kOrphanThenSleep)}, dir.file("log"));
    const pid_t both[2] = {sh->pid(), sh->guardPid()};
    (void)!::write(pids[1], both, sizeof(both));
    for (;;) ::pause();  // until SIGKILLed
  }
  ::close(pids[1]);
  pid_t both[2] = {-1, -1};
  ASSERT_EQ(::read(pids[0], both, sizeof(both)), static_cast<ssize_t>(sizeof(both)));
  ::close(pids[0]);
  const pid_t child = both[0], guard = both[1];
  const pid_t orphan = orphanIn(dir);
  ASSERT_GT(orphan, 0) << readFile(dir.file("log"));
  ASSERT_FALSE(gone(child));

  ASSERT_EQ(::kill(test, SIGKILL), 0);
  ASSERT_EQ(::waitpid(test, nullptr, 0), test);
  // The guard, orphaned, is ours now: it exits once it has killed and
  // reaped everything below it.
  bool guard_done = false;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       !guard_done && std::chrono::steady_clock::now() < until;) {
    guard_done = ::waitpid(guard, nullptr, WNOHANG) == guard;
    if (!guard_done) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(guard_done);
  EXPECT_TRUE(gone(child));
  EXPECT_TRUE(gone(orphan)) << readFile("/proc/" + std::to_string(orphan) + "/stat");
  for (pid_t p : {child, orphan, guard}) {
    if (!gone(p)) ::kill(p, SIGKILL);
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace crihook::testing
