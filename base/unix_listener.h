#pragma once

// A listening Unix socket at a path, made the way a client that dials as
// soon as the file exists is never refused: bound, listening and given its
// mode and group under a temporary name in the same directory, then renamed
// into place. Used for the CRI socket (proxy/server.cc) and the metrics
// socket (metrics/http_endpoint.cc).

#include <sys/types.h>
#include <sys/un.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace crihook {

struct UnixListenerOptions {
  mode_t mode = 0660;
  std::string group;  // empty: the process's own group
  // For messages: "listen on", "metrics listen" ...
  std::string what = "listen on";
};

// The listening socket's descriptor (SOCK_CLOEXEC), owned by the caller.
// Whatever stood at `path` is replaced by the rename: callers first check
// that no live process serves it (unixSocketIsLive). Errors name the path
// and the step (bind, listen, chmod, chown, rename); a missing group is
// INVALID_ARGUMENT, every other failure FAILED_PRECONDITION. The temporary
// name is removed on every failure.
absl::StatusOr<int> listenUnixSocket(const std::string& path, const UnixListenerOptions& options);

// True when something accepts connections on `path` right now.
bool unixSocketIsLive(const std::string& path);

// Fills `addr` with `path` (AF_UNIX); false, `addr` untouched, when the path
// is too long for a Unix socket address.
bool unixSocketAddress(const std::string& path, sockaddr_un& addr);

// Backing off accept() after it failed, most often out of descriptors
// (EMFILE, ENFILE) or kernel memory (ENOBUFS, ENOMEM): the pending connection
// stays in the backlog and accept fails again at once, so retrying at once
// spins a core. 10 ms lets a descriptor freed by a closing call be used soon;
// 1 s bounds how long a recovered daemon waits. Both listeners' accept loops
// (proxy/server.cc, metrics/http_endpoint.cc) wait so.
inline constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
inline constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};
// The wait after one more failure, `last` the wait before it (0 after a success).
inline std::chrono::milliseconds nextAcceptBackoff(std::chrono::milliseconds last) {
  return std::clamp(last * 2, kAcceptBackoffMin, kAcceptBackoffMax);
}

}  // namespace crihook
