#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <queue>

#include "base/env.h"
#include "base/inotify_events.h"
#include "base/quote.h"
#include "base/text.h"

namespace crihook {
namespace {

namespace fs = std::filesystem;

class RealClock final : public MonotonicClock {
 public:
  using MonotonicClock::waitUntil;  // the CondVar form too
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

// An inotify watch on one directory, and an eventfd that stop() makes
// readable so that a wait ends at once.
class InotifyWatch final : public DirectoryWatch {
 public:
  InotifyWatch(std::string dir, std::chrono::milliseconds poll)
      : dir_(std::move(dir)),
        poll_(poll),
        fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)),
        stop_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~InotifyWatch() override {
    if (fd_ >= 0) ::close(fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  bool wait(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!stopped_.load()) {
      if (fd_ < 0) return !pause(std::min(timeout, poll_));  // no inotify: every poll a change
      if (wd_ < 0) {
        wd_ = ::inotify_add_watch(fd_, dir_.c_str(), kEvents);
        // Watched from now on: what happened before is unknown, so a change.
        if (wd_ >= 0) return true;
        // Not there (yet): looked for again every poll, quietly.
        if (errno != ENOENT && errno != ENOTDIR) return !pause(std::min(timeout, poll_));
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || pause(std::min(left, poll_))) return false;
        continue;
      }
      pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      const int r = ::poll(p, 2, static_cast<int>(std::min<int64_t>(timeout.count(), INT32_MAX)));
      if (r < 0) return true;  // an interrupted poll: re-read, harmless
      if (r == 0 || (p[1].revents & POLLIN)) return false;
      drainEvents();
      return true;
    }
    return false;
  }

  void stop() override {
    stopped_.store(true);
    const uint64_t one = 1;
    if (stop_fd_ >= 0) (void)!::write(stop_fd_, &one, sizeof(one));
  }

 private:
  // The events that change what a reader of the directory sees.
  static constexpr uint32_t kEvents = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                      IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;

  // Sleeps `d` or until stopped; true when stopped.
  bool pause(std::chrono::milliseconds d) {
    pollfd p{stop_fd_, POLLIN, 0};
    ::poll(&p, stop_fd_ >= 0 ? 1 : 0, static_cast<int>(d.count()));
    return stopped_.load();
  }

  // Reads every queued event; a directory removed or moved away is watched
  // again once it exists.
  void drainEvents() {
    alignas(inotify_event) char buf[4096];
    bool gone = false;
    for (ssize_t n; (n = ::read(fd_, buf, sizeof(buf))) > 0;) {
      if (inotifyWatchGone(std::string_view(buf, static_cast<size_t>(n)))) gone = true;
    }
    if (gone) {
      ::inotify_rm_watch(fd_, wd_);
      wd_ = -1;
    }
  }

  std::string dir_;
  std::chrono::milliseconds poll_;
  int fd_ = -1, wd_ = -1;
  int stop_fd_ = -1;
  std::atomic<bool> stopped_{false};
};

// The folder `dir` itself, opened without following a link (the path above
// it is followed: an operator's state_dir may sit behind one). A folder
// crihookd writes its records into is its own; a link there would send
// them elsewhere. -1 and errno on failure (ELOOP or ENOTDIR for a link).
int openOwnFolder(const std::string& dir) {
  const int parent = ::open(parentOf(dir).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return -1;
  const std::string name = fs::path(dir).filename().string();
  const int fd = ::openat(parent, name.empty() ? "." : name.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int e = errno;
  ::close(parent);
  errno = e;
  return fd;
}

bool isLink(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// Why `dir` could not be opened as a folder of crihook's own (errno as
// openOwnFolder left it).
std::string folderError(const std::string& dir) {
  if (isLink(dir)) {
    return cat("its folder ", dir,
               " is a symbolic link; crihookd writes only into a folder of its own");
  }
  return strerror(errno);
}

}  // namespace

bool inotifyWatchGone(std::string_view events) {
  bool gone = false;
  for (size_t at = 0; sizeof(inotify_event) <= events.size() - at;) {
    inotify_event ev;
    std::memcpy(&ev, events.data() + at, sizeof(ev));
    if (ev.len > events.size() - at - sizeof(ev)) break;  // cut short
    gone = gone || (ev.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) != 0;
    at += sizeof(ev) + ev.len;
  }
  return gone;
}

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
  const std::string dir = parentOf(path);
  const int folder = openOwnFolder(dir);
  if (folder < 0) return absl::UnavailableError(cat("cannot write ", path, ": ", folderError(dir)));
  const std::string name = fs::path(path).filename().string();
  const std::string tmp = cat(".", name, ".tmp");
  const int fd =
      ::openat(folder, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  int why = fd < 0 ? errno : 0;
  for (std::string_view left = text; fd >= 0 && !left.empty() && why == 0;) {
    const long n = writeSome(fd, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = n < 0 ? errno : EIO;
      break;
    }
    left.remove_prefix(static_cast<size_t>(n));
  }
  if (fd >= 0) {
    if (why == 0 && sync == Sync::kDurable && ::fsync(fd) != 0) why = errno;
    // close reports a deferred write error (NFS, a full disk seen late).
    if (::close(fd) != 0 && why == 0) why = errno;
    if (why == 0 && ::renameat(folder, tmp.c_str(), folder, name.c_str()) != 0) why = errno;
    if (why != 0) ::unlinkat(folder, tmp.c_str(), 0);
  }
  if (why == 0 && sync == Sync::kDurable) ::fsync(folder);
  ::close(folder);
  if (why != 0) return absl::UnavailableError(cat("cannot write ", path, ": ", strerror(why)));
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
  const std::string dir = parentOf(path);
  const int folder = openOwnFolder(dir);
  if (folder < 0) {
    if (errno == ENOENT) return absl::OkStatus();  // nor its folder: nothing to remove
    return absl::UnavailableError(cat("cannot remove ", path, ": ", folderError(dir)));
  }
  const std::string name = fs::path(path).filename().string();
  const int why = ::unlinkat(folder, name.c_str(), 0) != 0 && errno != ENOENT ? errno : 0;
  if (why == 0 && sync == Sync::kDurable) ::fsync(folder);
  ::close(folder);
  if (why != 0) return absl::UnavailableError(cat("cannot remove ", path, ": ", strerror(why)));
  return absl::OkStatus();
}

absl::Status PosixEnv::renameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return absl::UnavailableError(cat("cannot rename ", from, " to ", to, ": ", strerror(errno)));
  return absl::OkStatus();
}

absl::Status PosixEnv::makeDirectories(const std::string& path, unsigned mode) {
  auto refused = [&] {
    std::error_code ec;
    const fs::path to = fs::read_symlink(path, ec);
    return absl::FailedPreconditionError(
        cat("cannot create ", path, ": it is a symbolic link",
            ec ? std::string() : cat(" to ", quote(to.string(), 200)),
            "; crihookd keeps its records only in a folder of its own: remove the link"));
  };
  std::error_code ec;
  const bool made = fs::create_directories(path, ec);
  if (isLink(path)) return refused();  // dangling or not, or made meanwhile
  if (ec) return absl::FailedPreconditionError(cat("cannot create ", path, ": ", ec.message()));
  if (made) ::chmod(path.c_str(), mode);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DirEntry>> Env::listDirectory(const std::string& path) {
  auto listed = listDirectoryFirst(path, std::numeric_limits<size_t>::max());
  if (!listed.ok()) return listed.status();
  return std::move(listed->entries);
}

absl::StatusOr<DirListing> PosixEnv::listDirectoryFirst(const std::string& path,
                                                        size_t max_entries) {
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec == std::errc::no_such_file_or_directory) return absl::NotFoundError("does not exist");
  if (ec) return absl::UnavailableError(cat("cannot read ", path, ": ", ec.message()));
  // The first names so far, the last of them on top: a directory of a
  // million entries costs max_entries names, not a million.
  std::priority_queue<std::string> first;
  DirListing out;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    ++out.total;
    std::string name = it->path().filename().string();
    if (first.size() < max_entries) {
      first.push(std::move(name));
    } else if (max_entries > 0 && name < first.top()) {
      first.pop();
      first.push(std::move(name));
    }
  }
  if (ec) return absl::UnavailableError(cat("cannot read ", path, ": ", ec.message()));
  for (; !first.empty(); first.pop()) {
    const fs::path entry = fs::path(path) / first.top();
    std::error_code gone;  // an entry removed meanwhile reads as neither kind
    const fs::file_status st = fs::symlink_status(entry, gone);
    DirEntry e{first.top(), fs::is_regular_file(st), fs::is_directory(st), fs::is_symlink(st)};
    struct stat target {};
    if (::stat(entry.c_str(), &target) == 0)
      e.mtime_ns = target.st_mtim.tv_sec * 1000000000LL + target.st_mtim.tv_nsec;
    out.entries.push_back(std::move(e));
  }
  std::reverse(out.entries.begin(), out.entries.end());
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
