#include "confine/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "base/mutex.h"
#include "base/text.h"

extern char** environ;

namespace crihook::confine {
namespace {

using Clock = std::chrono::steady_clock;

Mutex g_mu;
// The launcher in force; made at first use and never destroyed (a hook may
// still run a command while the process exits).
std::shared_ptr<Launcher>* g_launcher ABSL_GUARDED_BY(g_mu) = nullptr;
std::shared_ptr<Launcher>& current() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  if (g_launcher == nullptr)
    g_launcher = new std::shared_ptr<Launcher>(std::make_shared<DirectLauncher>());
  return *g_launcher;
}

// What the output pipe is read in; kept to the last kMaxOutputBytes.
void keepTail(std::string& out) {
  if (out.size() > 2 * kMaxOutputBytes) out.erase(0, out.size() - kMaxOutputBytes);
}

// argv and envp as execve takes them, pointing into the request (which
// outlives them); env is the process's own when the request has none.
struct ExecArgs {
  explicit ExecArgs(const LaunchRequest& request) {
    for (const auto& a : request.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    env = request.env.empty() ? environ : envp.data();
  }
  ExecArgs(const ExecArgs&) = delete;  // env points into envp
  ExecArgs& operator=(const ExecArgs&) = delete;
  std::vector<char*> args;
  std::vector<char*> envp;
  char** env = nullptr;
};

// In a child before execve: no signal blocked (crihookd blocks those it
// waits for), and SIGPIPE, SIGTERM, SIGINT, SIGHUP at their default (crihookd
// or the spawner ignores them, and an ignored signal survives exec).
// Async-signal-safe.
void resetSignals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_DFL);
}

// The program to execute: `name` itself when it holds a '/', else the first
// executable of that name in PATH (looked up here, before fork: execvp may
// allocate). FAILED_PRECONDITION when PATH has none.
absl::StatusOr<std::string> programPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs =
      path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    const std::string candidate = cat(dir.empty() ? "." : dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::FailedPreconditionError(cat("cannot run ", name, ": not found in PATH"));
}

// A command forked in its own process group: its pid, the read end of its
// stdout and stderr, and that of the pipe its exec failure's errno comes on
// (EOF when exec succeeded). The caller closes both.
struct Child {
  pid_t pid = -1;
  int out = -1;
  int exec_error = -1;
};

absl::StatusOr<Child> forkCommand(const std::string& program, const ExecArgs& exec) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(cat("pipe: ", strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return absl::InternalError(cat("pipe: ", strerror(errno)));
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    resetSignals();
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execve(program.c_str(), exec.args.data(), exec.env);
    const int e = errno;
    (void)!::write(err[1], &e, sizeof(e));  // tells the parent why exec failed
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(out[1]);
  ::close(err[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return absl::ResourceExhaustedError(cat("cannot fork: ", strerror(fork_errno)));
  }
  ::setpgid(pid, pid);  // also from here: no race with the child's own call
  return Child{pid, out[0], err[0]};
}

// Reads the command's output from `fd` into `output` (its tail) until every
// writer closed it (true) or `until` passed (false).
bool readOutput(int fd, Clock::time_point until, std::string& output) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return true;  // every writer closed: the command (and its children) are done
    output.append(buf, static_cast<size_t>(n));
    keepTail(output);
  }
}

// Reaps the command and returns its wait status. Its group is killed when
// `timed_out`, or when the command is still running at `until` (then
// `timed_out` is set).
int reap(pid_t pid, Clock::time_point until, bool& timed_out) {
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  if (!timed_out) {
    // Output closed; the command itself may still be finishing.
    for (;;) {
      const pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      if (Clock::now() >= until) {
        timed_out = true;
        ::kill(-pid, SIGKILL);
        break;
      }
      ::usleep(2000);
    }
  }
  if (timed_out) ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

absl::Status validateRequest(const LaunchRequest& r) {
  if (r.argv.empty()) return absl::InvalidArgumentError("argv: empty");
  if (r.argv.size() > kMaxArgs)
    return absl::InvalidArgumentError(
        cat("argv: ", r.argv.size(), " arguments, at most ", kMaxArgs));
  if (r.env.size() > kMaxEnv)
    return absl::InvalidArgumentError(cat("env: ", r.env.size(), " entries, at most ", kMaxEnv));
  if (r.argv[0].empty()) return absl::InvalidArgumentError("argv[0]: empty program");
  size_t bytes = 0;
  for (size_t i = 0; i < r.argv.size(); ++i) {
    bytes += r.argv[i].size() + 1;
    if (r.argv[i].find('\0') != std::string::npos)
      return absl::InvalidArgumentError(cat("argv[", i, "]: holds a NUL byte"));
  }
  for (size_t i = 0; i < r.env.size(); ++i) {
    bytes += r.env[i].size() + 1;
    const size_t eq = r.env[i].find('=');
    if (eq == 0 || eq == std::string::npos)
      return absl::InvalidArgumentError(cat("env[", i, "]: expected NAME=value"));
    if (r.env[i].find('\0') != std::string::npos)
      return absl::InvalidArgumentError(cat("env[", i, "]: holds a NUL byte"));
  }
  if (bytes > kMaxRequestBytes)
    return absl::InvalidArgumentError(
        cat("argv and env: ", bytes, " bytes, at most ", kMaxRequestBytes));
  if (r.timeout.count() < 1 || r.timeout > kMaxTimeout)
    return absl::InvalidArgumentError(
        cat("timeout: ", r.timeout.count(), "ms, expected 1ms..", kMaxTimeout.count(), "ms"));
  return absl::OkStatus();
}

std::shared_ptr<Launcher> processLauncher() {
  MutexLock lock(g_mu);
  return current();
}

void setProcessLauncher(std::shared_ptr<Launcher> launcher) {
  MutexLock lock(g_mu);
  current() = std::move(launcher);
}

absl::StatusOr<pid_t> Launcher::start(const LaunchRequest&, int) {
  return absl::UnimplementedError("this launcher cannot start long-lived processes");
}

absl::StatusOr<pid_t> DirectLauncher::start(const LaunchRequest& request, int channel) {
  if (auto s = validateRequest(request); !s.ok()) return s;
  if (request.argv[0][0] != '/')
    return absl::InvalidArgumentError(cat("argv[0]: ", request.argv[0], ": not an absolute path"));
  // As in launch(): all made before fork, only async-signal-safe calls after.
  const ExecArgs exec(request);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid == 0) {
    resetSignals();
    if (devnull >= 0) ::dup2(devnull, 0);
    if (channel == 3) {
      ::fcntl(3, F_SETFD, 0);  // dup2 onto itself would keep CLOEXEC
    } else {
      ::dup2(channel, 3);
    }
    ::close_range(4, ~0u, 0);
    ::execve(exec.args[0], exec.args.data(), exec.env);
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) return absl::ResourceExhaustedError(cat("cannot fork: ", strerror(fork_errno)));
  return pid;
}

absl::StatusOr<LaunchResult> DirectLauncher::launch(const LaunchRequest& request) {
  if (auto s = validateRequest(request); !s.ok()) return s;
  // Everything the child needs is made before fork: after it, only
  // async-signal-safe calls (crihookd is multithreaded).
  absl::StatusOr<std::string> program = programPath(request.argv[0]);
  if (!program.ok()) return program.status();
  const ExecArgs exec(request);
  absl::StatusOr<Child> child = forkCommand(*program, exec);
  if (!child.ok()) return child.status();

  LaunchResult result;
  const Clock::time_point until = Clock::now() + request.timeout;
  bool timed_out = !readOutput(child->out, until, result.output);
  const int status = reap(child->pid, until, timed_out);
  int exec_errno = 0;
  const bool exec_failed =
      ::read(child->exec_error, &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno);
  ::close(child->out);
  ::close(child->exec_error);
  if (exec_failed)
    return absl::FailedPreconditionError(
        cat("cannot run ", request.argv[0], ": ", strerror(exec_errno)));
  if (result.output.size() > kMaxOutputBytes)
    result.output.erase(0, result.output.size() - kMaxOutputBytes);
  if (timed_out) {
    result.end = LaunchResult::End::kTimedOut;
  } else if (WIFEXITED(status)) {
    result.end = LaunchResult::End::kExited;
    result.code = WEXITSTATUS(status);
  } else {
    result.end = LaunchResult::End::kSignaled;
    result.code = WTERMSIG(status);
  }
  return result;
}

}  // namespace crihook::confine
