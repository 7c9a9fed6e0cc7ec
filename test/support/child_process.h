#pragma once

// A child process for tests that drive real binaries (crihookd, containerd):
// output to a log file, killed on destruction if still running — and never
// left behind, whatever its test does.
//
// Each ChildProcess runs under a guard: a process forked from the test that
// makes itself a child subreaper (so every orphan of the child's tree comes
// to it: a containerd a start script left in the background, containerd's
// shims, their containers' init processes) and holds the read end of a pipe
// whose write end only the test holds. When that pipe closes — on
// destruction, or when the test dies in any way, SIGKILL included (meson's
// timeout) — the guard SIGKILLs every process left below it and exits. The
// guard is in a process group of its own, so a signal to the test's group
// reaches the test and not the guard that must clean up after it. The child
// itself also has PR_SET_PDEATHSIG(SIGKILL) towards the guard (single
// threaded, so the signal cannot fire early when the test thread that made
// the ChildProcess ends).

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace crihook::testing {

class ChildProcess {
 public:
  // Starts `binary` (looked up on PATH like execvp) with `args`, stdout and
  // stderr appended to `log_path`, the test's environment plus `env`.
  // Returns once the child exists (its pid is known); a binary that cannot be
  // executed exits 127.
  ChildProcess(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path, const std::map<std::string, std::string>& env = {});
  // SIGKILLs the child and everything left below it (see above), and waits
  // for the guard to have reaped them all.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The exit code (128+signal when killed), or -1 if still running after
  // `timeout`. Processes the child left in the background stay (under the
  // guard) until destruction.
  int wait(std::chrono::milliseconds timeout);
  // Sends `sig` to the child (not to what it started), unless it has exited.
  void signal(int sig);
  pid_t pid() const { return pid_; }
  // The guard's pid (the parent of the child and of its orphans).
  pid_t guardPid() const { return guard_; }

 private:
  pid_t pid_ = -1;
  pid_t guard_ = -1;
  int lifeline_ = -1;  // write end: closed, the guard kills what is left
  int report_ = -1;    // read end: the child's pid, then its wait status
  bool exited_ = false;
  int code_ = -1;
};

// Runs `script` with `args` (a start script that leaves a daemon running in
// the background and prints its pid last on stdout, as
// test/e2e/containerd-private.sh does) as a ChildProcess stored in `guard`,
// and waits up to `timeout` for it to exit. The daemon, and what it starts
// (containerd's shims and their containers), stay under that guard: they die
// when `guard` is destroyed or the test dies. Returns the pid printed;
// throws std::runtime_error naming the script and its output when it fails.
// `log_path` gets the script's output (use a new one for each start).
pid_t startGuardedDaemon(std::unique_ptr<ChildProcess>& guard, const std::string& script,
                         const std::vector<std::string>& args, const std::string& log_path,
                         std::chrono::milliseconds timeout);

// A shell command (`sh -c`) run to its end: what it wrote on stdout (its
// own redirections apply, e.g. "2>&1") and its exit code (128+signal when
// killed, -1 when it could not be started).
struct ShellResult {
  std::string out;
  int code = -1;
};
ShellResult runShell(const std::string& command);

// runShell's output; throws std::runtime_error naming the command, its exit
// code and its output unless it exits 0.
std::string runShellOrThrow(const std::string& command);

std::string readFile(const std::string& path);

// Whether `path` exists within `timeout`.
bool waitForFile(const std::string& path, std::chrono::milliseconds timeout);

// Sends a daemon that is not this process's child (startGuardedDaemon's)
// SIGTERM and waits up to `timeout` for it to be gone; false if it is still
// there (its guard kills it at the end).
bool terminateDaemon(pid_t pid, std::chrono::milliseconds timeout);

}  // namespace crihook::testing
