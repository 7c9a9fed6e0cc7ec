// The launcher in this process (confine/launcher.h): a DirectLauncher's
// commands (PATH, output, exit, signal, timeout of the whole group), the
// long-lived processes it starts with their channel, the request bounds
// every launcher checks, and the process's launcher. The same commands
// through the spawner are spawner_test.cc's.

#include "confine/launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "test/support/eventually.h"

namespace crihook::confine {
namespace {

using namespace std::chrono_literals;
using ::testing::EndsWith;
using ::testing::HasSubstr;

LaunchRequest command(std::vector<std::string> argv, std::chrono::milliseconds timeout = 5s) {
  LaunchRequest r;
  r.argv = std::move(argv);
  r.timeout = timeout;
  return r;
}

// Whether `pid` is gone (no such process, or a zombie nobody reaped yet).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

TEST(DirectLauncherTest, RunsACommandAndReportsHowItEndedAndItsOutput) {
  DirectLauncher direct;
  auto r = direct.launch(command({"/bin/sh", "-c", "echo warming up; echo busy >&2; exit 3"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kExited);
  EXPECT_EQ(r->code, 3);
  EXPECT_EQ(r->output, "warming up\nbusy\n");
  r = direct.launch(command({"sh", "-c", "exit 0"}));  // looked up in PATH
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kExited);
  EXPECT_EQ(r->code, 0);
  r = direct.launch(command({"/bin/sh", "-c", "kill -TERM $$"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kSignaled);
  EXPECT_EQ(r->code, SIGTERM);
}

TEST(DirectLauncherTest, PassesTheEnvironmentItIsGivenAndNoStdin) {
  DirectLauncher direct;
  LaunchRequest r = command({"/bin/sh", "-c", "echo \"$GREETING\"; cat; echo end"});
  r.env = {"GREETING=hello from crihookd", "PATH=/usr/bin:/bin"};
  auto out = direct.launch(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output, "hello from crihookd\nend\n");
}

TEST(DirectLauncherTest, KeepsOnlyTheTailOfALongOutput) {
  DirectLauncher direct;
  auto r = direct.launch(
      command({"/bin/sh", "-c", "i=0; while [ $i -lt 5000 ]; do echo line $i; i=$((i+1)); done"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output.size(), kMaxOutputBytes);
  EXPECT_THAT(r->output, EndsWith("line 4998\nline 4999\n"));
}

// The command and what it left running in its group: none outlives the
// timeout.
TEST(DirectLauncherTest, ATimeoutKillsTheCommandsWholeProcessGroup) {
  DirectLauncher direct;
  auto r = direct.launch(command({"/bin/sh", "-c", "sleep 30 & echo $!; sleep 30"}, 300ms));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->end, LaunchResult::End::kTimedOut);
  const pid_t background = std::atoi(r->output.c_str());
  ASSERT_GT(background, 0) << r->output;
  EXPECT_TRUE(eventually([&] { return gone(background); }))
      << "the background sleep of the group survived";
}

TEST(DirectLauncherTest, AProgramThatCannotRunIsNamed) {
  DirectLauncher direct;
  auto r = direct.launch(command({"/nonexistent/tool"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "cannot run /nonexistent/tool: No such file or directory");
  r = direct.launch(command({"no-such-tool-here"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "cannot run no-such-tool-here: not found in PATH");
}

// start(): the process outlives the call, with `channel` as its fd 3, and is
// the caller's to reap.
TEST(DirectLauncherTest, StartsAProcessWithItsChannelAsFd3) {
  DirectLauncher direct;
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  auto pid = direct.start(command({"/bin/sh", "-c", "echo ready >&3; read line <&3"}), pair[1]);
  ::close(pair[1]);
  ASSERT_TRUE(pid.ok()) << pid.status();
  char buf[16] = {};
  ASSERT_EQ(::read(pair[0], buf, sizeof(buf)), 6);
  EXPECT_EQ(std::string(buf, 6), "ready\n");
  ASSERT_EQ(::write(pair[0], "go\n", 3), 3);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::close(pair[0]);
  EXPECT_EQ(direct.start(command({"sh", "-c", "true"}), 3).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a relative program";
}

TEST(LaunchRequestTest, RequestsOutOfBoundsAreRefusedNamingTheEntry) {
  EXPECT_TRUE(validateRequest(command({"/bin/true"})).ok());
  EXPECT_EQ(validateRequest(command({})).message(), "argv: empty");
  EXPECT_EQ(validateRequest(command({""})).message(), "argv[0]: empty program");
  LaunchRequest many = command({"/bin/true"});
  many.argv.resize(kMaxArgs + 1, "x");
  EXPECT_EQ(validateRequest(many).message(), "argv: 257 arguments, at most 256");
  LaunchRequest envs = command({"/bin/true"});
  envs.env.resize(kMaxEnv + 1, "A=1");
  EXPECT_EQ(validateRequest(envs).message(), "env: 257 entries, at most 256");
  EXPECT_THAT(
      std::string(
          validateRequest(command({"/bin/true", std::string(kMaxRequestBytes, 'x')})).message()),
      HasSubstr("bytes, at most 65536"));
  // Counted as execve counts them, each string with its NUL: exactly the
  // bound passes, one byte more is refused.
  const std::string fits(kMaxRequestBytes - 10 - 1, 'x');  // "/bin/true" and its NUL: 10
  EXPECT_TRUE(validateRequest(command({"/bin/true", fits})).ok());
  EXPECT_EQ(validateRequest(command({"/bin/true", fits + "x"})).message(),
            "argv and env: 65537 bytes, at most 65536");
  EXPECT_EQ(validateRequest(command({"/bin/echo", std::string("a\0b", 3)})).message(),
            "argv[1]: holds a NUL byte");
  for (const char* bad : {"NOEQUALS", "=value"}) {
    LaunchRequest env = command({"/bin/true"});
    env.env = {"A=1", bad};
    EXPECT_EQ(validateRequest(env).message(), "env[1]: expected NAME=value") << bad;
  }
  EXPECT_EQ(validateRequest(command({"/bin/true"}, 0ms)).message(),
            "timeout: 0ms, expected 1ms..3600000ms");
  EXPECT_EQ(validateRequest(command({"/bin/true"}, kMaxTimeout + 1ms)).code(),
            absl::StatusCode::kInvalidArgument);
  DirectLauncher direct;
  EXPECT_EQ(direct.launch(many).status().message(), "argv: 257 arguments, at most 256");
}

// A launcher that runs nothing, to tell it from the default.
class NoLauncher : public Launcher {
 public:
  absl::StatusOr<LaunchResult> launch(const LaunchRequest&) override {
    return absl::UnavailableError("no launcher");
  }
};

TEST(ProcessLauncherTest, IsADirectLauncherUntilReplaced) {
  const std::shared_ptr<Launcher> first = processLauncher();
  ASSERT_NE(first, nullptr);
  EXPECT_NE(dynamic_cast<DirectLauncher*>(first.get()), nullptr);
  EXPECT_EQ(processLauncher(), first) << "one launcher for the process";
  auto none = std::make_shared<NoLauncher>();
  setProcessLauncher(none);
  EXPECT_EQ(processLauncher(), none);
  EXPECT_EQ(processLauncher()->start(command({"/bin/true"}), 3).status().code(),
            absl::StatusCode::kUnimplemented);
  setProcessLauncher(first);
  EXPECT_EQ(processLauncher(), first);
}

}  // namespace
}  // namespace crihook::confine
