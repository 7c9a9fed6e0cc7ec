// crihookd's seccomp filter (confine/seccomp_filter.h), installed in a forked
// child each time (it cannot be removed): what it refuses, what it lets
// through, and each mode's action.

#include "confine/seccomp_filter.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace crihook::confine {
namespace {

using ::testing::HasSubstr;

// Runs `body` in a child that first installs `mode`'s daemon filter; the
// child's exit status is what body returns (or 128 + the signal that killed it).
int inFilteredChild(SeccompMode mode, const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto n = installFilter(mode, FilterFor::kDaemon);
    if (!n.ok()) ::_exit(100);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// errno of a call that returned -1, 0 when it succeeded.
int errnoOf(long rc) { return rc == 0 ? 0 : errno; }

TEST(SeccompFilterTest, ModesByName) {
  EXPECT_EQ(*parseSeccompMode("errno"), SeccompMode::kErrno);
  EXPECT_EQ(*parseSeccompMode("kill"), SeccompMode::kKill);
  EXPECT_EQ(*parseSeccompMode("log"), SeccompMode::kLog);
  EXPECT_EQ(*parseSeccompMode("off"), SeccompMode::kOff);
  EXPECT_EQ(parseSeccompMode("strict").status().message(),
            "expected \"errno\", \"kill\", \"log\" or \"off\", got \"strict\"");
  for (auto m : {SeccompMode::kErrno, SeccompMode::kKill, SeccompMode::kLog, SeccompMode::kOff})
    EXPECT_EQ(*parseSeccompMode(seccompModeName(m)), m);
}

// The number crihookd logs ("seccomp errno (N system calls allowed)") is the
// list's calls this architecture has, and clone for threads.
TEST(SeccompFilterTest, TheCountLoggedIsTheCallsAllowed) {
  size_t expected = 1;  // clone, allowed apart (threads only)
  for (std::string_view name : allowedSyscalls(FilterFor::kDaemon)) {
    if (seccomp_syscall_resolve_name(std::string(name).c_str()) != __NR_SCMP_ERROR) ++expected;
  }
  ASSERT_GT(expected, 100u);
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto n = installFilter(SeccompMode::kErrno, FilterFor::kDaemon);
    ::_exit(!n.ok() ? 100 : *n == expected ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// The spawner's filter lets it start processes: clone without CLONE_THREAD
// (fork), which the daemon's refuses.
TEST(SeccompFilterTest, TheSpawnersFilterLetsItFork) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!installFilter(SeccompMode::kErrno, FilterFor::kSpawner).ok()) ::_exit(100);
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    if (child < 0) ::_exit(errno == EPERM ? 1 : 2);
    int status = 0;
    ::waitpid(child, &status, 0);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << status << " (exit 1: fork refused EPERM)";
}

TEST(SeccompFilterTest, ErrnoRefusesCallsOffTheListWithEperm) {
  EXPECT_EQ(inFilteredChild(SeccompMode::kErrno, [] { return errnoOf(::unshare(0)); }), EPERM);
  // A process is not a thread: the daemon never forks once confined.
  EXPECT_EQ(inFilteredChild(SeccompMode::kErrno,
                            [] {
                              const pid_t p = ::fork();
                              if (p == 0) ::_exit(0);
                              return p < 0 ? errno : 0;
                            }),
            EPERM);
  // No exec either (nor ptrace, mount, ...).
  EXPECT_EQ(inFilteredChild(SeccompMode::kErrno,
                            [] {
                              char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
                              return errnoOf(::execve("/bin/true", argv, environ));
                            }),
            EPERM);
}

TEST(SeccompFilterTest, WhatTheDaemonDoesStillWorks) {
  EXPECT_EQ(inFilteredChild(SeccompMode::kErrno,
                            [] {
                              // Threads (clone3 answers ENOSYS, glibc falls back to clone).
                              int seen = 0;
                              std::thread t([&] { seen = 1; });
                              t.join();
                              if (seen != 1) return 1;
                              // Files, pipes, time, random.
                              int p[2];
                              if (::pipe2(p, O_CLOEXEC) != 0) return 2;
                              if (::write(p[1], "x", 1) != 1) return 3;
                              char c;
                              if (::read(p[0], &c, 1) != 1) return 4;
                              timespec ts;
                              if (::clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 5;
                              FILE* f = std::fopen("/proc/self/status", "r");
                              if (!f) return 6;
                              std::fclose(f);
                              return 0;
                            }),
            0);
}

TEST(SeccompFilterTest, KillEndsTheProcessOnACallOffTheList) {
  EXPECT_EQ(inFilteredChild(SeccompMode::kKill, [] { return errnoOf(::unshare(0)); }),
            128 + SIGSYS);
}

TEST(SeccompFilterTest, LogAndOffAllowTheCall) {
  EXPECT_EQ(inFilteredChild(SeccompMode::kLog, [] { return errnoOf(::unshare(0)); }), 0);
  EXPECT_EQ(inFilteredChild(SeccompMode::kOff, [] { return errnoOf(::unshare(0)); }), 0);
}

TEST(SeccompFilterTest, TheSpawnersListAddsProcessesAndExec) {
  const auto& daemon = allowedSyscalls(FilterFor::kDaemon);
  const auto& spawner = allowedSyscalls(FilterFor::kSpawner);
  auto has = [](const std::vector<std::string_view>& l, std::string_view n) {
    return std::find(l.begin(), l.end(), n) != l.end();
  };
  EXPECT_FALSE(has(daemon, "execve"));
  EXPECT_TRUE(has(spawner, "execve"));
  EXPECT_TRUE(has(spawner, "futex"));
  for (std::string_view never : {"unshare", "setns", "mount", "ptrace", "bpf", "init_module",
                                 "kexec_load", "reboot", "pivot_root", "chroot"}) {
    EXPECT_FALSE(has(daemon, never)) << never;
    EXPECT_FALSE(has(spawner, never)) << never;
  }
}

}  // namespace
}  // namespace crihook::confine
