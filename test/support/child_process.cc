#include "test/support/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "test/support/eventually.h"

extern char** environ;

namespace crihook::testing {
namespace {

// The guard runs in a child forked from a test that has other threads: until
// it exits it uses system calls only (no allocation, no locks another thread
// may have held at the fork).

// Closes every descriptor from 3 up except `a` and `b`.
void closeAllBut(int a, int b) {
  if (a > b) std::swap(a, b);
  if (a > 3) ::close_range(3, static_cast<unsigned>(a - 1), 0);
  if (b > a + 1) ::close_range(static_cast<unsigned>(a + 1), static_cast<unsigned>(b - 1), 0);
  ::close_range(static_cast<unsigned>(b + 1), UINT_MAX, 0);
}

// The parent pid in /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may
// hold spaces and parentheses, so from the last ')'), or -1.
pid_t parentOf(const char* pid_text) {
  char path[64] = "/proc/";
  size_t at = 6;
  for (const char* c = pid_text; *c != '\0' && at < 40; ++c) path[at++] = *c;
  for (const char* c = "/stat"; *c != '\0'; ++c) path[at++] = *c;
  path[at] = '\0';
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr || close_paren[1] == '\0' || close_paren[2] == '\0') return -1;
  const char* p = close_paren + 3;  // past ") S"
  while (*p == ' ') ++p;
  pid_t ppid = 0;
  for (; *p >= '0' && *p <= '9'; ++p) ppid = ppid * 10 + (*p - '0');
  return ppid;
}

// SIGKILLs every process whose parent is `self`; returns how many.
int killChildrenOf(pid_t self) {
  const int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  int killed = 0;
  alignas(8) char buf[8192];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf + off);
      off += d->d_reclen;
      if (d->d_name[0] < '1' || d->d_name[0] > '9') continue;
      if (parentOf(d->d_name) != self) continue;
      pid_t pid = 0;
      for (const char* c = d->d_name; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (::kill(pid, SIGKILL) == 0) ++killed;
    }
  }
  ::close(dir);
  return killed;
}

// A bound on kill-and-reap rounds: each round kills one generation of
// orphans (a containerd, then its shims, then their containers' init).
// A round waits at most kKillRoundMs for one of its processes to end.
constexpr int kMaxKillRounds = 1000;
constexpr int kKillRoundMs = 100;

// The guard: reports the child's wait status when it ends, reaps orphans,
// and when the lifeline closes kills whatever is left below it.
[[noreturn]] void guard(int lifeline, int report, int sigchld, pid_t child) {
  bool reported = false;
  auto reap = [&](int flags) {
    int status = 0;
    const pid_t w = ::waitpid(-1, &status, flags);
    if (w == child && !reported) {
      (void)!::write(report, &status, sizeof(status));
      reported = true;
    }
    return w;
  };
  for (;;) {
    struct pollfd p[2] = {{lifeline, POLLIN, 0}, {sigchld, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      (void)!::read(sigchld, &info, sizeof(info));
      while (reap(WNOHANG) > 0) {
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char b;
      if (::read(lifeline, &b, 1) <= 0) break;  // closed: the test is done or dead
    }
  }
  const pid_t self = ::getpid();
  for (int round = 0; round < kMaxKillRounds; ++round) {
    const int killed = killChildrenOf(self);
    while (reap(WNOHANG) > 0) {
    }
    // Nothing was left to kill and nothing is left to reap: done.
    if (killed == 0 && reap(WNOHANG) < 0 && errno == ECHILD) break;
    // Until one of the killed ends (its orphans then come to us, and are
    // killed in the next round); bounded, since an orphan that arrived
    // after the scan is not dying yet.
    struct pollfd p = {sigchld, POLLIN, 0};
    if (::poll(&p, 1, kKillRoundMs) > 0) {
      struct signalfd_siginfo info;
      (void)!::read(sigchld, &info, sizeof(info));
    }
  }
  ::_exit(0);
}

}  // namespace

ChildProcess::ChildProcess(const std::string& binary, const std::vector<std::string>& args,
                           const std::string& log_path,
                           const std::map<std::string, std::string>& env) {
  // Everything the child needs is made before the fork.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    if (!env.count(key)) env_text.push_back(std::move(kv));
  }
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& kv : env_text) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int lifeline[2], report[2];
  if (::pipe2(lifeline, O_CLOEXEC) != 0) return;
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ::close(lifeline[0]);
    ::close(lifeline[1]);
    return;
  }
  guard_ = ::fork();
  if (guard_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    closeAllBut(lifeline[0], report[1]);
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, &old);
    const int sigchld = ::signalfd(-1, &chld, SFD_CLOEXEC);
    const pid_t me = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != me) ::_exit(127);  // the guard is gone already
      ::sigprocmask(SIG_SETMASK, &old, nullptr);
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::close_range(3, UINT_MAX, 0);
      ::execvpe(binary.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    // The test may be gone when the child's status is reported: a write
    // to the closed pipe must not kill the guard before it has cleaned up.
    ::signal(SIGPIPE, SIG_IGN);
    (void)!::write(report[1], &child, sizeof(child));
    if (child < 0 || sigchld < 0) ::_exit(1);
    guard(lifeline[0], report[1], sigchld, child);
  }
  ::close(lifeline[0]);
  ::close(report[1]);
  lifeline_ = lifeline[1];
  report_ = report[0];
  if (guard_ < 0) return;
  pid_t child = -1;
  if (::read(report_, &child, sizeof(child)) == sizeof(child)) pid_ = child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_) ::kill(pid_, SIGKILL);
  if (lifeline_ >= 0) ::close(lifeline_);
  if (guard_ > 0) ::waitpid(guard_, nullptr, 0);
  if (report_ >= 0) ::close(report_);
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (exited_ || report_ < 0) return code_;
  struct pollfd p = {report_, POLLIN, 0};
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r > 0) break;
    if (r == 0) return -1;
    if (errno != EINTR) return -1;
  }
  int status = 0;
  exited_ = true;
  if (::read(report_, &status, sizeof(status)) != sizeof(status)) {
    code_ = 128 + SIGKILL;  // the guard died without a word: so did the child
    return code_;
  }
  code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return code_;
}

void ChildProcess::signal(int sig) {
  if (!exited_ && pid_ > 0) ::kill(pid_, sig);
}

pid_t startGuardedDaemon(std::unique_ptr<ChildProcess>& guard, const std::string& script,
                         const std::vector<std::string>& args, const std::string& log_path,
                         std::chrono::milliseconds timeout) {
  guard = std::make_unique<ChildProcess>(script, args, log_path);
  const int rc = guard->wait(timeout);
  const std::string out = readFile(log_path);
  if (rc != 0) {
    throw std::runtime_error(
        script + (rc < 0 ? " did not finish in time" : " failed (" + std::to_string(rc) + ")") +
        ": " + out);
  }
  // The last line is the pid (the script's other output went to its logs).
  std::string last;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  char* end = nullptr;
  const long pid = std::strtol(last.c_str(), &end, 10);
  if (last.empty() || *end != '\0' || pid <= 0 || pid > INT_MAX)
    throw std::runtime_error(script + " printed no pid last: " + out);
  return static_cast<pid_t>(pid);
}

ShellResult runShell(const std::string& command) {
  ShellResult r;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = status < 0            ? -1
           : WIFEXITED(status)   ? WEXITSTATUS(status)
           : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                 : -1;
  return r;
}

std::string runShellOrThrow(const std::string& command) {
  ShellResult r = runShell(command);
  if (r.code != 0)
    throw std::runtime_error(command + " failed (exit " + std::to_string(r.code) + "): " + r.out);
  return std::move(r.out);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool waitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  return eventually([&] { return std::filesystem::exists(path); }, timeout);
}

bool terminateDaemon(pid_t pid, std::chrono::milliseconds timeout) {
  if (pid <= 0) return true;
  ::kill(pid, SIGTERM);
  return eventually([&] { return ::kill(pid, 0) != 0 && errno == ESRCH; }, timeout);
}

}  // namespace crihook::testing
