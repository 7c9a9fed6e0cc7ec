#pragma once

// systemd socket activation (sd_listen_fds(3)), implemented directly: the
// listening socket crihookd.socket holds open across restarts, handed to
// crihookd as fd 3 with LISTEN_PID / LISTEN_FDS / LISTEN_FDNAMES.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook {

// The first fd systemd passes (SD_LISTEN_FDS_START).
inline constexpr int kListenFdsStart = 3;
// systemd passes at most a few sockets per unit; crihook.socket passes one.
// More than this is not an environment systemd made.
inline constexpr int kMaxListenFds = 64;

struct ActivatedSocket {
  int fd = -1;       // a listening AF_UNIX SOCK_STREAM socket, CLOEXEC, owned by the caller
  std::string path;  // the path it is bound to
};

// Takes the socket systemd passed, if any, and unsets LISTEN_PID,
// LISTEN_FDS and LISTEN_FDNAMES so no child sees them. Call before any
// thread or child is started (setenv/unsetenv are not thread-safe).
//
// No LISTEN_FDS, or LISTEN_PID naming another process (the variables were
// meant for a parent): nullopt, and the fds are left alone.
// Otherwise each passed fd is checked to be a listening AF_UNIX SOCK_STREAM
// socket bound to a path; the one bound to `listen_path` is taken, or, when
// none is, the only one passed (the caller says which path it serves).
// Every passed fd that is not taken is closed. Errors are
// FAILED_PRECONDITION and name the fd and what it is instead: a unit that
// passes the wrong thing must stop start-up, not be silently replaced by a
// socket of crihookd's own.
absl::StatusOr<std::optional<ActivatedSocket>> takeActivatedSocket(const std::string& listen_path);

}  // namespace crihook
