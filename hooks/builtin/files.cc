#include "hooks/builtin/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/text.h"

namespace crihook {
namespace {

bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

absl::Status replaceFileDurably(const std::string& path, const std::string& tmp,
                                std::string_view text) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(cat("cannot write ", tmp, ": ", strerror(errno)));
  const bool ok = writeAll(fd, text) && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = ok ? errno : e;
    ::unlink(tmp.c_str());
    return absl::UnavailableError(cat("cannot write ", path, ": ", strerror(why)));
  }
  syncDirectory(std::filesystem::path(path).parent_path().string());
  return absl::OkStatus();
}

}  // namespace crihook
