#include "proxy/socket_activation.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "base/text.h"

namespace crihook {
namespace {

// A decimal number of at most 9 digits; anything else (a sign, spaces, an
// overflow) is not what systemd writes.
std::optional<long> smallNumber(const char* text) {
  if (text == nullptr || *text == '\0' || std::strlen(text) > 9) return std::nullopt;
  long v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return std::nullopt;
    v = v * 10 + (*p - '0');
  }
  return v;
}

// Cut and quoted: the environment is not ours.
std::string shown(const char* text) {
  std::string s = text ? text : "";
  std::string out = "\"";
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f && c != '"') ? c : '?';
  return out + (s.size() > 64 ? "\"..." : "\"");
}

// Why `fd` is not a listening Unix stream socket bound to a path, or "".
std::string problemOf(int fd, std::string& path) {
  int value = 0;
  socklen_t len = sizeof(value);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &len) != 0)
    return cat("not a socket (", std::strerror(errno), ")");
  if (value != AF_UNIX) return cat("a socket of address family ", value, ", not AF_UNIX");
  len = sizeof(value);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &value, &len) != 0 || value != SOCK_STREAM)
    return "not a SOCK_STREAM socket";
  len = sizeof(value);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) != 0 || value == 0)
    return "not listening";
  sockaddr_un addr{};
  socklen_t alen = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0)
    return cat("getsockname: ", std::strerror(errno));
  const size_t n =
      alen > offsetof(sockaddr_un, sun_path) ? alen - offsetof(sockaddr_un, sun_path) : 0;
  if (n == 0 || addr.sun_path[0] == '\0') return "not bound to a path (unnamed or abstract)";
  path.assign(addr.sun_path, strnlen(addr.sun_path, n));
  return "";
}

}  // namespace

absl::StatusOr<std::optional<ActivatedSocket>> takeActivatedSocket(const std::string& listen_path) {
  const char* pid_text = std::getenv("LISTEN_PID");
  const char* fds_text = std::getenv("LISTEN_FDS");
  if (fds_text == nullptr) return std::nullopt;
  const std::optional<long> pid = smallNumber(pid_text);
  const std::optional<long> fds = smallNumber(fds_text);
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  // Meant for another process (a wrapper that did not clear them): not ours
  // to take or close.
  if (!pid || *pid != ::getpid()) return std::nullopt;
  if (!fds || *fds < 1 || *fds > kMaxListenFds) {
    return absl::FailedPreconditionError(
        cat("socket activation: LISTEN_FDS ", shown(fds_text), ": expected 1..", kMaxListenFds));
  }
  std::optional<ActivatedSocket> taken;
  std::string problems;
  std::vector<ActivatedSocket> usable;
  for (int fd = kListenFdsStart; fd < kListenFdsStart + *fds; ++fd) {
    std::string path;
    if (std::string why = problemOf(fd, path); !why.empty()) {
      problems += cat(problems.empty() ? "" : "; ", "fd ", fd, ": ", why);
      continue;
    }
    usable.push_back({fd, path});
  }
  for (const ActivatedSocket& s : usable) {
    if (s.path == listen_path) taken = s;
  }
  if (!taken && usable.size() == 1 && problems.empty()) taken = usable[0];
  for (int fd = kListenFdsStart; fd < kListenFdsStart + *fds; ++fd) {
    if (!taken || fd != taken->fd) ::close(fd);
  }
  if (!taken) {
    std::string paths;
    for (const ActivatedSocket& s : usable) paths += cat(paths.empty() ? "" : ", ", s.path);
    return absl::FailedPreconditionError(cat("socket activation: none of the ", *fds,
                                             " sockets passed is a listening Unix socket "
                                             "on ",
                                             listen_path,
                                             problems.empty() ? "" : cat(" (", problems, ")"),
                                             paths.empty() ? "" : cat(" (bound: ", paths, ")")));
  }
  // systemd passes its fds without close-on-exec; hook actions must not inherit it.
  const int flags = ::fcntl(taken->fd, F_GETFD);
  if (flags < 0 || ::fcntl(taken->fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    ::close(taken->fd);
    return absl::FailedPreconditionError(cat("socket activation: fd ", taken->fd,
                                             ": cannot set close-on-exec: ", std::strerror(errno)));
  }
  return taken;
}

}  // namespace crihook
