#pragma once

// A listening Unix socket at a path, made the way a client that dials as
// soon as the file exists is never refused: bound, listening and given its
// mode and group under a temporary name in the same directory, then renamed
// into place. Used for the CRI socket (proxy/server.cc) and the metrics
// socket (metrics/http_endpoint.cc).

#include <sys/types.h>
#include <sys/un.h>

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

}  // namespace crihook
