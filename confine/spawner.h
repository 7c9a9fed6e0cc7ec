#pragma once

// The spawner: a small process crihookd forks early in main, before it has
// any thread and before its seccomp filter and capability drop, that runs the
// device-lifecycle actions' commands for it. A filter is inherited by every
// child and cannot be removed, and the actions (nvidia-smi, mlx tools, an
// operator's scripts) need the full syscall set and root's capabilities; so
// crihookd itself never forks a command once it is confined.
//
// Protocol (one SOCK_SEQPACKET socketpair, CLOEXEC, made before the fork):
// per command, the client makes a private SOCK_SEQPACKET pair and sends the
// request (one message: argv, env, timeout; bounded by launcher.h's kMaxArgs,
// kMaxEnv, kMaxRequestBytes) with one end of that pair attached
// (SCM_RIGHTS). The spawner validates it (validateRequest), forks a worker
// that runs it with a DirectLauncher and writes the one reply message
// (how it ended, the output's last kMaxOutputBytes) on the attached end, and
// goes back to reading. Commands therefore run concurrently, each with its
// own timeout, and a worker that dies is seen by its caller alone.
//
// Lifetime: the spawner has PR_SET_PDEATHSIG(SIGKILL) and exits on EOF of
// its socket, so it never outlives crihookd. If the spawner dies, crihookd
// notices at the next command: launch() fails UNAVAILABLE naming the spawner
// and its pid (the device-lifecycle hook then fails or retries the action as
// for any failure). It is not restarted: a spawner forked after the filter
// would inherit the filter and the dropped capabilities, i.e. be useless for
// its purpose. Restarting crihookd (systemctl restart; Restart=always when
// crihookd itself dies) brings a new spawner.

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "confine/launcher.h"
#include "confine/seccomp_filter.h"

namespace crihook::confine {

struct SpawnerOptions {
  // The spawner's own filter, installed in it right after the fork (and so
  // inherited by every command): kOff by default, since commands are
  // arbitrary programs. The allow-list is crihookd's plus what running
  // programs needs (execve, fork, wait, kill, ...).
  SeccompMode seccomp = SeccompMode::kOff;
  // Capabilities the spawner keeps (and so the commands it runs as root).
  // `all`: keep every capability it has.
  bool keep_all_capabilities = true;
  uint64_t capabilities = 0;  // bit per CAP_*, when !keep_all_capabilities
};

class SpawnerClient : public Launcher {
 public:
  // Forks the spawner. Must be called while the process has one thread
  // (FAILED_PRECONDITION otherwise: after fork only the calling thread
  // exists, and a lock held by another would never be released). The
  // spawner keeps file descriptors 0-2 and its socket and closes the rest.
  static absl::StatusOr<std::unique_ptr<SpawnerClient>> start(const SpawnerOptions& options);

  // Kills the spawner (SIGKILL) and reaps it.
  ~SpawnerClient() override;

  // See Launcher. UNAVAILABLE "spawner (pid N) is gone" once the spawner has
  // died, or "spawner worker ended without a reply" when the worker serving
  // this command died. Thread-safe; commands run concurrently.
  absl::StatusOr<LaunchResult> launch(const LaunchRequest& request) override;

  // See Launcher: the spawner forks and execs it (its child, reaped by it),
  // with the spawner's filter and capabilities. A request sent with a second
  // descriptor attached (the channel) is a start; the reply's code is the
  // pid. Thread-safe.
  absl::StatusOr<pid_t> start(const LaunchRequest& request, int channel) override;

  pid_t pid() const { return pid_; }

 private:
  SpawnerClient(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  pid_t pid_;
  int fd_;
  std::atomic<bool> gone_{false};
};

// Exposed for tests: the request and reply encodings, and the spawner's loop
// on `fd` (never returns).
std::string encodeRequest(const LaunchRequest& request);
absl::StatusOr<LaunchRequest> decodeRequest(std::string_view bytes);
std::string encodeReply(const absl::StatusOr<LaunchResult>& result);
absl::StatusOr<LaunchResult> decodeReply(std::string_view bytes);
// One message `bytes` on `sock` with `fd_to_pass` and `second_fd` attached
// (SCM_RIGHTS; -1: none), as client and spawner send them; sendmsg's result.
ssize_t sendWithFd(int sock, const std::string& bytes, int fd_to_pass, int second_fd = -1);
[[noreturn]] void spawnerMain(int fd, const SpawnerOptions& options);

}  // namespace crihook::confine
