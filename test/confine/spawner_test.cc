// The spawner (confine/spawner.h) as crihookd uses it: a real forked spawner
// process, commands through it, its bounds, its death and its parent's.

#include "confine/spawner.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "confine/capabilities.h"
#include "test/support/eventually.h"

namespace crihook::confine {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Whether `pid` is gone (no such process, or a zombie nobody reaped yet).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

bool waitGone(pid_t pid, std::chrono::milliseconds bound) {
  return eventually([pid] { return gone(pid); }, bound);
}

LaunchRequest command(std::vector<std::string> argv, std::chrono::milliseconds timeout = 5s) {
  LaunchRequest r;
  r.argv = std::move(argv);
  r.timeout = timeout;
  return r;
}

std::unique_ptr<SpawnerClient> startSpawner(const SpawnerOptions& options = {}) {
  auto s = SpawnerClient::start(options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(SpawnerTest, RunsACommandAndReportsItsExitStatusAndOutput) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  EXPECT_NE(spawner->pid(), ::getpid());
  auto r = spawner->launch(command({"/bin/sh", "-c", "echo warming up; echo busy >&2; exit 3"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kExited);
  EXPECT_EQ(r->code, 3);
  EXPECT_EQ(r->output, "warming up\nbusy\n");
  r = spawner->launch(command({"true"}));  // looked up in PATH
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code, 0);
  r = spawner->launch(command({"/bin/sh", "-c", "kill -9 $$"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kSignaled);
  EXPECT_EQ(r->code, SIGKILL);
}

TEST(SpawnerTest, PassesTheEnvironmentItIsGiven) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  LaunchRequest r = command({"/bin/sh", "-c", "echo \"$GREETING\""});
  r.env = {"GREETING=hello from crihookd", "PATH=/usr/bin:/bin"};
  auto out = spawner->launch(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output, "hello from crihookd\n");
}

TEST(SpawnerTest, KeepsOnlyTheTailOfALongOutput) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  auto r = spawner->launch(
      command({"/bin/sh", "-c", "i=0; while [ $i -lt 5000 ]; do echo line $i; i=$((i+1)); done"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(r->output.size(), kMaxOutputBytes);
  EXPECT_THAT(r->output, ::testing::EndsWith("line 4999\n"));
}

TEST(SpawnerTest, ATimeoutKillsTheCommandsWholeProcessGroup) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  char dir[] = "/tmp/spawner-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string pidfile = std::string(dir) + "/bg";
  const auto start = Clock::now();
  auto r = spawner->launch(
      command({"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile + "; sleep 30"}, 300ms));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kTimedOut);
  EXPECT_LT(Clock::now() - start, 5s);
  pid_t background = 0;
  std::ifstream(pidfile) >> background;
  ASSERT_GT(background, 0);
  EXPECT_TRUE(waitGone(background, 5s)) << "the background sleep of the group survived";
  std::remove(pidfile.c_str());
  ::rmdir(dir);
}

TEST(SpawnerTest, CommandsRunConcurrently) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  const auto start = Clock::now();
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      auto r = spawner->launch(command({"/bin/sh", "-c", "sleep 1"}));
      if (r.ok() && r->end == LaunchResult::End::kExited && r->code == 0) ++ok;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok, 4);
  // Four one-second commands one after the other would take 4 s.
  EXPECT_LT(Clock::now() - start, 3s);
}

// start(): the process runs with the channel crihookd passed as its fd 3,
// the one a module host talks on.
TEST(SpawnerTest, StartsAProcessWithItsChannelAsFd3) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  auto pid = spawner->start(
      command({"/bin/sh", "-c", "echo ready >&3; read line <&3; echo \"got $line\" >&3"}), pair[1]);
  ::close(pair[1]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto readLine = [&] {
    std::string line;
    char c;
    while (line.size() < 200 && ::read(pair[0], &c, 1) == 1 && c != '\n') line += c;
    return line;
  };
  EXPECT_EQ(readLine(), "ready");
  ASSERT_EQ(::write(pair[0], "go\n", 3), 3);
  EXPECT_EQ(readLine(), "got go");
  ::close(pair[0]);
}

// start(): the process is the spawner's child, and the spawner reaps it when
// it ends, even one that left the spawner's process group (setsid): no
// zombie is left under crihookd.
TEST(SpawnerTest, AStartedProcessIsReapedWhenItEndsEvenInASessionOfItsOwn) {
  if (::access("/usr/bin/setsid", X_OK) != 0) GTEST_SKIP() << "needs util-linux's setsid";
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  const std::vector<std::vector<std::string>> programs = {
      {"/bin/sh", "-c", "echo ready >&3"}, {"/usr/bin/setsid", "/bin/sh", "-c", "echo ready >&3"}};
  for (const auto& argv : programs) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    auto pid = spawner->start(command(argv), pair[1]);
    ::close(pair[1]);
    ASSERT_TRUE(pid.ok()) << pid.status();
    char buf[16] = {};
    EXPECT_EQ(::read(pair[0], buf, sizeof(buf)), 6) << argv[0] << " did not run";
    ::close(pair[0]);
    const std::string proc = "/proc/" + std::to_string(*pid);
    EXPECT_TRUE(eventually([&] { return ::access(proc.c_str(), F_OK) != 0; }, 10s))
        << argv[0] << ": pid " << *pid << " ended but was never reaped";
  }
}

// The spawner keeps stdio and its socket, and none of the descriptors its
// parent had open: crihookd's lock file, listening socket or records would
// otherwise stay open as long as the spawner lives.
TEST(SpawnerTest, HoldsNoneOfItsParentsDescriptors) {
  char lock[] = "/tmp/spawner-lock-XXXXXX";
  const int held = ::mkstemp(lock);  // not close-on-exec, as the lock file is not
  ASSERT_GE(held, 0);
  auto spawner = startSpawner();
  ::close(held);
  ASSERT_TRUE(spawner);
  const std::string dir = "/proc/" + std::to_string(spawner->pid()) + "/fd";
  std::vector<std::string> above_stdio;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string target = std::filesystem::read_symlink(e.path()).string();
    EXPECT_NE(target, lock) << "the spawner holds its parent's file as fd " << e.path().filename();
    if (std::stoi(e.path().filename().string()) > 2) above_stdio.push_back(target);
  }
  EXPECT_EQ(above_stdio.size(), 1u) << "more than its socket: " << above_stdio.size();
  std::remove(lock);
}

// Whatever number its socket has: at 4, the one descriptor below it (3,
// the parent's file here) is closed as well as those above.
TEST(SpawnerTest, HoldsNoneOfItsParentsDescriptorsBelowItsSocket) {
  char file[] = "/tmp/spawner-held-XXXXXX";
  const int held = ::mkstemp(file);
  ASSERT_GE(held, 0);
  int sock[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int high = ::fcntl(sock[1], F_DUPFD, 10);
    if (high < 0 || ::dup2(held, 3) != 3 || ::dup2(high, 4) != 4) ::_exit(1);
    spawnerMain(4, SpawnerOptions{});
    ::_exit(0);
  }
  ::close(sock[1]);
  ::close(held);
  std::remove(file);
  char hello[64];
  ASSERT_EQ(::recv(sock[0], hello, sizeof(hello), 0), 1) << "ready";
  std::vector<std::string> above_stdio;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    if (std::stoi(e.path().filename().string()) > 2) above_stdio.push_back(e.path().filename());
  }
  ::close(sock[0]);  // EOF: the spawner exits
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_THAT(above_stdio, ::testing::ElementsAre("4")) << "its socket only";
}

TEST(SpawnerTest, AProgramThatCannotRunIsNamed) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  auto r = spawner->launch(command({"/nonexistent/tool"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "cannot run /nonexistent/tool: No such file or directory");
  r = spawner->launch(command({"no-such-tool-here"}));
  EXPECT_EQ(r.status().message(), "cannot run no-such-tool-here: not found in PATH");
}

TEST(SpawnerTest, RequestsOutOfBoundsAreRefusedBeforeTheyAreSent) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  LaunchRequest many = command({"/bin/true"});
  many.argv.resize(kMaxArgs + 1, "x");
  EXPECT_EQ(spawner->launch(many).status().message(), "argv: 257 arguments, at most 256");
  LaunchRequest big = command({"/bin/true", std::string(kMaxRequestBytes, 'x')});
  EXPECT_THAT(big.argv.size(), 2u);
  EXPECT_THAT(std::string(spawner->launch(big).status().message()),
              HasSubstr("bytes, at most 65536"));
  LaunchRequest nul = command({"/bin/echo", std::string("a\0b", 3)});
  EXPECT_EQ(spawner->launch(nul).status().message(), "argv[1]: holds a NUL byte");
  LaunchRequest env = command({"/bin/true"});
  env.env = {"NOEQUALS"};
  EXPECT_EQ(spawner->launch(env).status().message(), "env[0]: expected NAME=value");
  EXPECT_EQ(spawner->launch(command({"/bin/true"}, 0ms)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The spawner itself checks what it gets (a client other than ours, or a
// bug in ours): raw messages on its socket.
class RawSpawner : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock_), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(sock_[0]);
      spawnerMain(sock_[1], SpawnerOptions{});
    }
    ::close(sock_[1]);
    char hello[64];
    ASSERT_EQ(::recv(sock_[0], hello, sizeof(hello), 0), 1);
    ASSERT_EQ(hello[0], 'R') << "ready";
  }
  void TearDown() override {
    ::close(sock_[0]);  // EOF: the spawner exits by itself
    int status = 0;
    ASSERT_EQ(::waitpid(pid_, &status, 0), pid_);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  // Sends `bytes` with a reply socket attached; returns the decoded reply.
  absl::StatusOr<LaunchResult> ask(const std::string& bytes) {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    EXPECT_GE(sendWithFd(sock_[0], bytes, pair[1]), 0) << strerror(errno);
    ::close(pair[1]);
    timeval tv{10, 0};
    ::setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string reply(64 * 1024, '\0');
    const ssize_t n = ::recv(pair[0], reply.data(), reply.size(), 0);
    ::close(pair[0]);
    if (n <= 0) return absl::UnknownError("no reply");
    reply.resize(static_cast<size_t>(n));
    return decodeReply(reply);
  }
  int sock_[2];
  pid_t pid_ = -1;
};

TEST_F(RawSpawner, RefusesMalformedAndOutOfBoundsRequestsAndKeepsServing) {
  EXPECT_EQ(ask("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  std::string header = encodeRequest(command({"/bin/true"}));
  EXPECT_EQ(ask(header.substr(0, header.size() - 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An argument count over the bound, whatever follows.
  std::string many = header;
  const uint32_t argc = kMaxArgs + 1;
  std::memcpy(many.data() + 8, &argc, 4);
  EXPECT_THAT(std::string(ask(many).status().message()), HasSubstr("request header"));
  // What a well-formed message may still carry wrong: the checks of the client.
  EXPECT_EQ(ask(encodeRequest(command({""}))).status().message(), "argv[0]: empty program");
  EXPECT_EQ(ask(encodeRequest(command({"/bin/true"}, 0ms))).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A message larger than any request is cut by the socket and refused.
  EXPECT_EQ(ask(std::string(kMaxRequestBytes * 2, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto r = ask(encodeRequest(command({"/bin/sh", "-c", "exit 7"})));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code, 7);
}

// Each 32-bit field is read whole: a high byte set makes another value,
// refused, not the value of its low bytes.
TEST(SpawnerTest, EveryFieldOfAMessageIsReadWhole) {
  const std::string request = encodeRequest(command({"/bin/true"}));
  ASSERT_TRUE(decodeRequest(request).ok());
  // The bounds the client checks are the spawner's: a request at them is read.
  LaunchRequest most = command({"/bin/true"});
  most.argv.resize(kMaxArgs, "x");
  most.env.resize(kMaxEnv, "A=1");
  auto read = decodeRequest(encodeRequest(most));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->argv.size(), kMaxArgs);
  EXPECT_EQ(read->env.size(), kMaxEnv);
  std::string bad = request;
  bad[3] = 1;  // the version, 1 + 2^24
  EXPECT_THAT(std::string(decodeRequest(bad).status().message()), HasSubstr("request version"));
  const std::string reply = encodeReply(LaunchResult{});
  ASSERT_TRUE(decodeReply(reply).ok());
  bad = reply;
  bad[3] = 1;
  EXPECT_FALSE(decodeReply(bad).ok());
}

TEST(SpawnerTest, ADeadSpawnerMakesCommandsUnavailableNamingIt) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  ASSERT_TRUE(spawner->launch(command({"/bin/true"})).ok());
  ::kill(spawner->pid(), SIGKILL);
  ASSERT_TRUE(waitGone(spawner->pid(), 5s));
  auto r = spawner->launch(command({"/bin/true"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("spawner (pid " + std::to_string(spawner->pid()) + ") is gone"));
  // And stays so, without trying again.
  EXPECT_EQ(spawner->launch(command({"/bin/true"})).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(SpawnerTest, OutlivesTheServicesSigtermButItsCommandsDoNot) {
  auto spawner = startSpawner();
  ASSERT_TRUE(spawner);
  // systemd signals the whole cgroup at stop; crihookd may still be
  // finishing calls that run actions.
  ASSERT_EQ(::kill(spawner->pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(spawner->pid(), SIGHUP), 0);
  auto r = spawner->launch(command({"/bin/sh", "-c", "kill -TERM $$; sleep 5"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kSignaled) << "SIGTERM is not ignored in a command";
  EXPECT_EQ(r->code, SIGTERM);
}

TEST(SpawnerTest, TheSpawnerDiesWithTheProcessThatForkedIt) {
  // This test process reaps orphans, so the spawner is waited for here.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t parent = ::fork();
  if (parent == 0) {
    auto s = SpawnerClient::start({});
    pid_t pid = s.ok() ? (*s)->pid() : -1;
    (void)!::write(report[1], &pid, sizeof(pid));
    ::_exit(0);  // without the client's destructor: as a crashed crihookd
  }
  ::close(report[1]);
  pid_t spawner = -1;
  ASSERT_EQ(::read(report[0], &spawner, sizeof(spawner)), static_cast<ssize_t>(sizeof(spawner)));
  ::close(report[0]);
  ASSERT_GT(spawner, 0);
  ASSERT_EQ(::waitpid(parent, nullptr, 0), parent);
  int status = 0;
  pid_t w = 0;
  eventually([&] { return (w = ::waitpid(spawner, &status, WNOHANG)) != 0; });
  EXPECT_EQ(w, spawner) << "the spawner outlived its parent";
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
}

// Not only by the EOF of its socket: a process crihookd forked may still
// hold crihookd's end, and the spawner is killed with crihookd all the same
// (PR_SET_PDEATHSIG), not left running commands for nobody.
TEST(SpawnerTest, TheSpawnerDiesWithItsParentWhileAnotherProcessHoldsItsSocket) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  int report[2], hold[2];
  ASSERT_EQ(::pipe(report), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t parent = ::fork();
  if (parent == 0) {
    ::close(hold[1]);
    auto s = SpawnerClient::start({});
    pid_t pids[2] = {s.ok() ? (*s)->pid() : -1, ::fork()};
    if (pids[1] == 0) {
      // The holder: keeps every descriptor of the parent, the spawner's
      // socket among them, until the test lets it go.
      char c;
      (void)!::read(hold[0], &c, 1);
      ::_exit(0);
    }
    (void)!::write(report[1], pids, sizeof(pids));
    ::_exit(0);  // without the client's destructor: as a crashed crihookd
  }
  ::close(report[1]);
  ::close(hold[0]);
  pid_t pids[2] = {-1, -1};
  ASSERT_EQ(::read(report[0], pids, sizeof(pids)), static_cast<ssize_t>(sizeof(pids)));
  ::close(report[0]);
  const pid_t spawner = pids[0], holder = pids[1];
  ASSERT_GT(spawner, 0);
  ASSERT_GT(holder, 0);
  ASSERT_EQ(::waitpid(parent, nullptr, 0), parent);
  int status = 0;
  pid_t w = 0;
  eventually([&] { return (w = ::waitpid(spawner, &status, WNOHANG)) != 0; }, 10s);
  ::close(hold[1]);  // the holder goes
  ::waitpid(holder, nullptr, 0);
  if (w == 0) {
    ::kill(spawner, SIGKILL);
    ::waitpid(spawner, nullptr, 0);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  ASSERT_EQ(w, spawner) << "the spawner outlived its parent";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST(SpawnerTest, IsOnlyForkedWhileTheProcessHasOneThread) {
  std::promise<void> stop;
  std::thread other([done = stop.get_future()] { done.wait(); });
  auto s = SpawnerClient::start({});
  stop.set_value();
  other.join();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("one thread, it has 2"));
}

TEST(SpawnerTest, KeepsOnlyTheCapabilitiesItIsGiven) {
  auto self = readCapStatus();
  ASSERT_TRUE(self.ok()) << self.status();
  if (!(self->effective & (CapSet{1} << 8)))
    GTEST_SKIP() << "needs CAP_SETPCAP to drop from the bounding set";
  SpawnerOptions options;
  options.keep_all_capabilities = false;
  options.capabilities = CapSet{1} << 12;  // CAP_NET_ADMIN
  auto spawner = startSpawner(options);
  ASSERT_TRUE(spawner);
  auto caps = readCapStatus(std::to_string(spawner->pid()));
  ASSERT_TRUE(caps.ok()) << caps.status();
  EXPECT_EQ(caps->effective, (CapSet{1} << 12) & self->effective);
  EXPECT_EQ(caps->bounding, (CapSet{1} << 12) & self->bounding);
  // A command run as root gets no more than the spawner's bounding set.
  auto r = spawner->launch(command({"/bin/sh", "-c", "grep CapEff /proc/self/status"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "CapEff:\t0000000000001000\n");
}

TEST(SpawnerTest, ItsOwnFilterIsInheritedByItsCommands) {
  SpawnerOptions options;
  options.seccomp = SeccompMode::kErrno;
  auto spawner = startSpawner(options);
  ASSERT_TRUE(spawner);
  // Ordinary programs run; unshare is not on the list.
  auto r = spawner->launch(command({"/bin/sh", "-c", "echo ok"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "ok\n");
  r = spawner->launch(command({"unshare", "--uts", "true"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->code, 0);
  EXPECT_THAT(r->output, HasSubstr("Operation not permitted"));
}

}  // namespace
}  // namespace crihook::confine
