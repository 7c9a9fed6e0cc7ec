#pragma once

// How crihookd runs a command (a device-lifecycle action): the contract, and
// the one launcher in force for the process.
//
// Two implementations:
//  - DirectLauncher (this file): fork + execve from the calling process. Used
//    by the spawner itself (single-threaded) and by the unit tests that do not
//    run crihookd's main (tests of actions, of the lifecycle hook).
//  - SpawnerClient (spawner.h): hands the command to the spawner process that
//    crihookd forks before it has threads and before its seccomp filter and
//    capability drop, so a command runs with the full syscall set and the
//    capabilities the spawner kept. crihookd's main installs it with
//    setProcessLauncher().
// Tests that want the real path start a SpawnerClient themselves
// (test/confine/spawner_test.cc).

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook::confine {

struct LaunchRequest {
  // argv[0]: an absolute path, or a name looked up in the launcher's PATH.
  std::vector<std::string> argv;
  // "NAME=value" entries; empty: the launcher's own environment.
  std::vector<std::string> env;
  // The command and every process of its process group are killed (SIGKILL)
  // when it passes; 1 ms .. kMaxTimeout.
  std::chrono::milliseconds timeout{10000};
};

// A command's end.
struct LaunchResult {
  enum class End { kExited, kSignaled, kTimedOut };
  End end = End::kExited;
  int code = 0;        // exit status (kExited) or signal number (kSignaled)
  std::string output;  // stdout and stderr together, the last kMaxOutputBytes of them
};

// Longest a command may be given. An action's timeout is operator-set and
// normally seconds; an hour bounds a typo ("10000s") without refusing a slow
// firmware tool.
inline constexpr std::chrono::milliseconds kMaxTimeout{3600 * 1000};
// What is kept of a command's output: the reason of a failure is its last
// line; 8 KiB holds the tail of any tool's error report without letting a
// chatty one fill memory or the spawner's reply.
inline constexpr size_t kMaxOutputBytes = 8192;
// A request's size. Actions are short command lines (a tool, a device, a few
// flags); 256 arguments, 256 environment entries and 64 KiB in all is far
// above any of them and keeps one spawner message small (the whole request
// is one SOCK_SEQPACKET message, read into a fixed buffer).
inline constexpr size_t kMaxArgs = 256;
inline constexpr size_t kMaxEnv = 256;
inline constexpr size_t kMaxRequestBytes = 64 * 1024;

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Runs the command in its own process group, stdin from /dev/null, and
  // blocks until it ends or its timeout passes (then the group is killed and
  // the result is kTimedOut). Thread-safe. Errors: INVALID_ARGUMENT a request
  // out of bounds; FAILED_PRECONDITION the program cannot be found or
  // executed (the message names it and says why); RESOURCE_EXHAUSTED no
  // fork; UNAVAILABLE the launcher itself is gone (the spawner died).
  virtual absl::StatusOr<LaunchResult> launch(const LaunchRequest& request) = 0;

  // Starts a process that outlives the call (an out-of-process module's
  // helper): argv[0] an absolute path, env as for launch(), timeout unused
  // (it must still be valid). `channel` (borrowed) becomes its fd 3; stdin
  // is /dev/null, stdout and stderr the launcher's own, every other fd
  // closed. Returns its pid once forked; an exec that fails shows as EOF on
  // the caller's end of the channel. The process is the launcher's child: a
  // DirectLauncher's caller reaps it (waitpid), the spawner reaps its own.
  // Errors as launch(); UNIMPLEMENTED for a launcher that cannot.
  virtual absl::StatusOr<pid_t> start(const LaunchRequest& request, int channel);
};

// fork + execve from the calling process. Everything the child needs is made
// before the fork (program looked up in PATH first), so it is safe in a
// multithreaded process.
class DirectLauncher : public Launcher {
 public:
  absl::StatusOr<LaunchResult> launch(const LaunchRequest& request) override;
  absl::StatusOr<pid_t> start(const LaunchRequest& request, int channel) override;
};

// Checks a request against the bounds above and the spawner's message limits
// (spawner.h): argv non-empty, no empty program, no NUL inside a string,
// every env entry NAME=value. INVALID_ARGUMENT naming the entry.
absl::Status validateRequest(const LaunchRequest& request);

// The launcher in force for the process: a DirectLauncher until
// setProcessLauncher() replaces it (crihookd's main, once, before any hook
// runs). Thread-safe; the returned pointer stays valid for the process.
std::shared_ptr<Launcher> processLauncher();
void setProcessLauncher(std::shared_ptr<Launcher> launcher);

}  // namespace crihook::confine
