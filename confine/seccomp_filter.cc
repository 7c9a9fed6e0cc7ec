#include "confine/seccomp_filter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>

#include <memory>

#include "base/text.h"

namespace crihook::confine {
namespace {

// What crihookd calls once started, from its code and its libraries (glibc,
// libstdc++, Asio, nghttp2, gRPC's client, protobuf, spdlog, toml++, the
// dlopen'd NVML at a SIGHUP rediscovery, modules' ordinary code). Found by
// reading the code and checked with strace -f -c over the whole test suite
// and the demo, and with seccomp = "log" (docs/security.md "Confinement").
const std::vector<std::string_view> kDaemonCalls = {
    // files and directories: records, state, topology reads, sysfs writes
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "open", "openat", "openat2", "close", "close_range", "creat", "stat", "fstat",
    "lstat", "newfstatat", "statx", "statfs", "fstatfs", "lseek", "_llseek", "access",
    "faccessat", "faccessat2", "getdents", "getdents64", "readlink", "readlinkat", "rename",
    "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "link",
    "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchown", "chown",
    "lchown", "fchownat", "umask", "truncate", "ftruncate", "fallocate", "fadvise64", "fsync",
    "fdatasync", "sync_file_range", "flock", "fcntl", "dup", "dup2", "dup3", "pipe", "pipe2",
    "getcwd", "ioctl", "utimensat", "copy_file_range", "sendfile",
    // memory (allocators, thread stacks, dlopen of NVML at rediscovery)
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock",
    "munlock", "membarrier",
    // sockets: kubelet and runtime (Unix), remote hooks, gRPC clients
    "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname",
    "getpeername", "setsockopt", "getsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg",
    "sendmmsg", "recvmmsg", "shutdown",
    // event loops, timers, inotify (hookserver_dir, CDI specs)
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch",
    // threads and synchronisation
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq", "set_tid_address",
    "sched_yield", "sched_getaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "getcpu", "exit", "exit_group",
    // time
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    // signals: sigwait in main, gRPC's and abseil's handlers, abort()
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigtimedwait", "rt_sigpending",
    "rt_sigsuspend", "rt_sigqueueinfo", "sigaltstack", "restart_syscall", "tgkill", "tkill",
    "pause",
    // identity and limits
    "getpid", "gettid", "getppid", "getpgrp", "getpgid", "getsid", "getuid", "geteuid",
    "getgid", "getegid", "getresuid", "getresgid", "getgroups", "capget", "getrlimit",
    "prlimit64", "getrusage", "uname", "sysinfo", "getrandom", "prctl", "arch_prctl",
    "getpriority", "times",
    // a child the daemon made before it was confined (none today) can still be reaped
    "wait4", "waitid",
};

// The spawner, a worker and the command it runs: the daemon's list and what
// making and running processes takes.
const std::vector<std::string_view> kSpawnerExtra = {
    "execve", "execveat", "fork", "vfork", "kill", "setpgid", "setsid", "chdir", "fchdir",
    "setuid", "setgid", "setresuid", "setresgid", "setgroups", "capset", "sched_setaffinity",
    "setpriority", "setrlimit", "alarm", "getitimer", "setitimer", "memfd_create",
};

// Namespace flags a thread never needs; clone with any of them is refused.
constexpr uint64_t kCloneNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                                          CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                                          CLONE_NEWCGROUP;
// The daemon's clone must make a thread: CLONE_THREAD set (so no fork: a
// process it made could not exec anyway), no namespace flag.
constexpr uint64_t kCloneCheckedFlags = kCloneNamespaceFlags | CLONE_THREAD;

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

absl::Status fail(std::string_view what, int rc) {
  return absl::FailedPreconditionError(
      cat("seccomp: ", what, ": ", strerror(rc < 0 ? -rc : rc)));
}

}  // namespace

absl::StatusOr<SeccompMode> parseSeccompMode(std::string_view text) {
  if (text == "off") return SeccompMode::kOff;
  if (text == "errno") return SeccompMode::kErrno;
  if (text == "kill") return SeccompMode::kKill;
  if (text == "log") return SeccompMode::kLog;
  return absl::InvalidArgumentError(
      cat("expected \"errno\", \"kill\", \"log\" or \"off\", got \"", text.substr(0, 32), "\""));
}

std::string_view seccompModeName(SeccompMode mode) {
  switch (mode) {
    case SeccompMode::kOff:
      return "off";
    case SeccompMode::kErrno:
      return "errno";
    case SeccompMode::kKill:
      return "kill";
    case SeccompMode::kLog:
      return "log";
  }
  return "?";
}

const std::vector<std::string_view>& allowedSyscalls(FilterFor who) {
  if (who == FilterFor::kDaemon) return kDaemonCalls;
  static const auto* spawner = [] {
    auto* all = new std::vector<std::string_view>(kDaemonCalls);
    all->insert(all->end(), kSpawnerExtra.begin(), kSpawnerExtra.end());
    return all;
  }();
  return *spawner;
}

absl::StatusOr<size_t> installFilter(SeccompMode mode, FilterFor who) {
  uint32_t deflt = 0;
  switch (mode) {
    case SeccompMode::kOff:
      return 0;
    case SeccompMode::kErrno:
      deflt = SCMP_ACT_ERRNO(EPERM);
      break;
    case SeccompMode::kKill:
      deflt = SCMP_ACT_KILL_PROCESS;
      break;
    case SeccompMode::kLog:
      deflt = SCMP_ACT_LOG;
      break;
  }
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(deflt));
  if (!ctx) return absl::FailedPreconditionError("seccomp: seccomp_init failed");
  // NO_NEW_PRIVS is libseccomp's default; set it explicitly: the filter
  // must not be installable without it.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 1); rc != 0)
    return fail("no_new_privs", rc);
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1); rc != 0)
    return fail("thread sync", rc);
  size_t count = 0;
  for (std::string_view name : allowedSyscalls(who)) {
    const int nr = seccomp_syscall_resolve_name(std::string(name).c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0); rc != 0)
      return fail(cat("allow ", name), rc);
    ++count;
  }
  if (who == FilterFor::kDaemon) {
    // Threads only.
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, kCloneCheckedFlags, CLONE_THREAD));
        rc != 0)
      return fail("allow clone", rc);
  } else {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(clone), 0); rc != 0)
      return fail("allow clone", rc);
  }
  ++count;
  // clone3's flags sit behind a pointer the filter cannot read: ENOSYS makes
  // glibc fall back to clone, whose flags it can.
  if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0)
    return fail("clone3", rc);
  if (int rc = seccomp_load(ctx.get()); rc != 0) return fail("seccomp_load", rc);
  return count;
}

}  // namespace crihook::confine
