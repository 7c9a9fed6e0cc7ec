#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/env.h"
#include "base/text.h"

namespace crihook {
namespace {

namespace fs = std::filesystem;

class RealClock final : public MonotonicClock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 time_point deadline) const override {
    cv.wait_until(lock, deadline);
  }
};

std::string parentOf(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// An inotify watch on one directory; until the directory exists (or without
// inotify) every `poll` is a change, so the caller re-reads.
class InotifyWatch final : public DirectoryWatch {
 public:
  InotifyWatch(std::string dir, std::chrono::milliseconds poll)
      : dir_(std::move(dir)), poll_(poll), fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}
  ~InotifyWatch() override {
    if (fd_ >= 0) ::close(fd_);
  }

  bool wait(std::chrono::milliseconds timeout) override {
    // The events that change what a reader of the directory sees.
    constexpr uint32_t kEvents = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                 IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
    if (fd_ >= 0 && wd_ < 0) {
      wd_ = ::inotify_add_watch(fd_, dir_.c_str(), kEvents);
      // Watched from now on: what happened before is unknown, so a change.
      if (wd_ >= 0) return true;
    }
    if (fd_ < 0 || wd_ < 0) {
      ::usleep(static_cast<useconds_t>(std::min(timeout, poll_).count() * 1000));
      return true;
    }
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(timeout.count(), INT32_MAX)));
    if (r <= 0) return r < 0;  // an interrupted poll: re-read, harmless
    alignas(inotify_event) char buf[4096];
    bool gone = false;
    for (ssize_t n; (n = ::read(fd_, buf, sizeof(buf))) > 0;) {
      for (char* q = buf; q < buf + n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(q);
        gone = gone || (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) != 0;
        q += sizeof(inotify_event) + ev->len;
      }
    }
    if (gone) {
      ::inotify_rm_watch(fd_, wd_);
      wd_ = -1;  // watched again once it exists
    }
    return true;
  }

 private:
  std::string dir_;
  std::chrono::milliseconds poll_;
  int fd_ = -1, wd_ = -1;
};

}  // namespace

MonotonicClock& steadyClock() {
  static RealClock* clock = new RealClock;
  return *clock;
}

void syncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

absl::StatusOr<std::string> PosixEnv::readFile(const std::string& path, size_t max_bytes,
                                               FileLinks links) {
  return readRegularFile(path, max_bytes, links);
}

long PosixEnv::writeSome(int fd, const char* data, size_t size) { return ::write(fd, data, size); }

absl::Status PosixEnv::writeFileAtomic(const std::string& path, std::string_view text, Sync sync) {
  const fs::path p(path);
  const std::string dir = parentOf(path);
  const std::string tmp = cat(dir, "/.", p.filename().string(), ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(cat("cannot write ", path, ": ", strerror(errno)));
  int why = 0;
  for (std::string_view left = text; !left.empty() && why == 0;) {
    const long n = writeSome(fd, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = n < 0 ? errno : EIO;
      break;
    }
    left.remove_prefix(static_cast<size_t>(n));
  }
  if (why == 0 && sync == Sync::kDurable && ::fsync(fd) != 0) why = errno;
  // close reports a deferred write error (NFS, a full disk seen late).
  if (::close(fd) != 0 && why == 0) why = errno;
  if (why == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) why = errno;
  if (why != 0) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(cat("cannot write ", path, ": ", strerror(why)));
  }
  if (sync == Sync::kDurable) syncDirectory(dir);
  return absl::OkStatus();
}

absl::Status PosixEnv::writeExisting(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return absl::FailedPreconditionError(cat("cannot write ", path, ": ", strerror(errno)));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return absl::FailedPreconditionError(
        cat("cannot write ", path, ": ", n < 0 ? strerror(e) : "short write"));
  return absl::OkStatus();
}

absl::Status PosixEnv::removeFile(const std::string& path, Sync sync) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return absl::UnavailableError(cat("cannot remove ", path, ": ", strerror(errno)));
  if (sync == Sync::kDurable) syncDirectory(parentOf(path));
  return absl::OkStatus();
}

absl::Status PosixEnv::renameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return absl::UnavailableError(cat("cannot rename ", from, " to ", to, ": ", strerror(errno)));
  return absl::OkStatus();
}

absl::Status PosixEnv::makeDirectories(const std::string& path, unsigned mode) {
  std::error_code ec;
  const bool made = fs::create_directories(path, ec);
  if (ec) return absl::FailedPreconditionError(cat("cannot create ", path, ": ", ec.message()));
  if (made) ::chmod(path.c_str(), mode);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DirEntry>> PosixEnv::listDirectory(const std::string& path) {
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec == std::errc::no_such_file_or_directory) return absl::NotFoundError("does not exist");
  if (ec) return absl::UnavailableError(cat("cannot read ", path, ": ", ec.message()));
  std::vector<DirEntry> out;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code gone;  // an entry removed meanwhile reads as neither kind
    const fs::file_status st = it->symlink_status(gone);
    DirEntry e{it->path().filename().string(), fs::is_regular_file(st), fs::is_directory(st),
               fs::is_symlink(st)};
    struct stat target {};
    if (::stat(it->path().c_str(), &target) == 0)
      e.mtime_ns = target.st_mtim.tv_sec * 1000000000LL + target.st_mtim.tv_nsec;
    out.push_back(std::move(e));
  }
  if (ec) return absl::UnavailableError(cat("cannot read ", path, ": ", ec.message()));
  std::sort(out.begin(), out.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

bool PosixEnv::exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::unique_ptr<DirectoryWatch> PosixEnv::watchDirectory(const std::string& dir,
                                                         std::chrono::milliseconds poll) {
  return std::make_unique<InotifyWatch>(dir, poll);
}

absl::StatusOr<ExecResult> PosixEnv::exec(const ExecRequest& request) {
  if (!executor_) return absl::FailedPreconditionError("no executor to run commands with");
  return executor_->run(request);
}

}  // namespace crihook
