#include "base/unix_listener.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/text.h"

namespace crihook {

bool unixSocketAddress(const std::string& path, sockaddr_un& addr) {
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr = {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

absl::StatusOr<int> listenUnixSocket(const std::string& path, const UnixListenerOptions& options) {
  const std::filesystem::path p(path);
  const std::string tmp =
      (p.parent_path() / cat(".", p.filename().string(), ".", ::getpid(), ".tmp")).string();
  sockaddr_un addr;
  if (path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(
        cat(options.what, " ", path, ": longer than a Unix socket path may be"));
  if (!unixSocketAddress(tmp, addr))
    return absl::InvalidArgumentError(cat(options.what, " ", path, ": its temporary name ", tmp,
                                          " is longer than a Unix socket path may be"));
  gid_t gid = static_cast<gid_t>(-1);
  if (!options.group.empty()) {
    // getgrnam_r: the daemon's other threads may be resolving names too.
    std::vector<char> buf(16384);
    struct group g;
    struct group* found = nullptr;
    if (::getgrnam_r(options.group.c_str(), &g, buf.data(), buf.size(), &found) != 0 ||
        found == nullptr)
      return absl::InvalidArgumentError(cat("socket group ", options.group, ": no such group"));
    gid = found->gr_gid;
  }

  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return absl::FailedPreconditionError(
        cat(options.what, " ", path, ": socket: ", std::strerror(errno)));
  ::unlink(tmp.c_str());
  auto fail = [&](std::string_view step) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        cat(options.what, " ", path, ": ", step, ": ", std::strerror(e)));
  };
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return fail("bind");
  if (::listen(fd, SOMAXCONN) != 0) return fail("listen");
  if (::chmod(tmp.c_str(), options.mode) != 0) return fail("chmod");
  if (gid != static_cast<gid_t>(-1) && ::chown(tmp.c_str(), static_cast<uid_t>(-1), gid) != 0)
    return fail("chown");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");
  return fd;
}

bool unixSocketIsLive(const std::string& path) {
  sockaddr_un addr;
  if (!unixSocketAddress(path, addr)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

}  // namespace crihook
