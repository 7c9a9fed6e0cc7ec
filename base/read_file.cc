#include "base/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/text.h"

namespace crihook {
namespace {

const char* kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a plain file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> readRegularFile(const std::string& path, size_t max_bytes,
                                            FileLinks links) {
  int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  if (links == FileLinks::kRefuse) flags |= O_NOFOLLOW;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError("does not exist");
    if (err == ELOOP && links == FileLinks::kRefuse)
      return absl::FailedPreconditionError("a symlink, not a regular file");
    return absl::UnavailableError(cat("cannot be opened: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return absl::UnavailableError(cat("cannot be examined: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return absl::FailedPreconditionError(cat(kindOf(st.st_mode), ", not a regular file"));
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::FailedPreconditionError(
        cat(st.st_size, " bytes, more than the ", max_bytes, " allowed"));
  }
  std::string text;
  // st_size is a hint (0 for /proc files, a page for sysfs attributes).
  text.resize(std::min<size_t>(static_cast<size_t>(st.st_size), max_bytes) + 1);
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (got > max_bytes) break;
      text.resize(std::min(max_bytes + 1, std::max<size_t>(text.size() * 2, 4096)));
    }
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(cat("cannot be read: ", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    return absl::FailedPreconditionError(
        cat("more than the ", max_bytes, " bytes allowed (it grew while read)"));
  }
  text.resize(got);
  return text;
}

}  // namespace crihook
