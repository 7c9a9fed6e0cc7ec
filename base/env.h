#pragma once

// The operating system as crihook's state keepers see it: files they own or
// read (pod records, device records, CDI specs, hookserver.d registrations),
// directories, a directory watch, commands run with a deadline, and a clock.
// One small interface, so that tests can hand in a FaultEnv
// (test/support/fault_env.h) and produce what only a real machine produces
// otherwise: a full disk while a record is written, a clock that jumps during
// a backoff, a command that never exits. Sysfs is behind its own seam
// (topology/sysfs.h SysRoot).
//
// Ownership: callers hold an `Env&` that outlives them; processEnv() lives
// for the process. Threading: every method of PosixEnv is thread-safe; a
// fake documents its own. Errors carry the reason and name the path (except
// readFile, which keeps base/read_file.h's contract: the caller names it).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "base/read_file.h"

namespace crihook {

// The steady (monotonic) time every deadline and backoff of crihook is
// measured in. Not the wall clock: setting the date never moves it.
class MonotonicClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~MonotonicClock() = default;
  virtual time_point now() const = 0;
  // Waits on `cv` (with `lock` held, as condition_variable::wait_until)
  // until notified, `deadline` passes by this clock, or spuriously; the
  // caller re-checks its condition and now(). A fake clock may return early
  // (it polls its own time), never later than a notification.
  virtual void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         time_point deadline) const = 0;
  // On base/mutex.h's annotated types: CondVar::waitUntilBy.
};

// std::chrono::steady_clock.
MonotonicClock& steadyClock();

// A command to run, as confine/launcher.h's LaunchRequest (base does not
// include confine; the implementation that forwards to the process's
// launcher is hooks/process_env.h).
struct ExecRequest {
  std::vector<std::string> argv;  // argv[0]: absolute path or a name in PATH
  std::chrono::milliseconds timeout{10000};
};
struct ExecResult {
  enum class End { kExited, kSignaled, kTimedOut };
  End end = End::kExited;
  int code = 0;        // exit status or signal number
  std::string output;  // stdout and stderr, the tail of them
};
class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the command in its own process group and blocks until it ends or
  // its timeout passes; then the group is killed and the result is
  // kTimedOut. Never blocks much beyond the timeout (the launcher's reply
  // grace). Thread-safe. Errors as confine::Launcher::launch.
  virtual absl::StatusOr<ExecResult> run(const ExecRequest& request) = 0;
};

// One entry of a directory listing.
struct DirEntry {
  std::string name;                                          // without the directory
  bool regular = false, directory = false, symlink = false;  // lstat's view
  // Modification time of what it leads to (stat, links followed), in ns;
  // -1 when that cannot be examined (a dangling link, removed meanwhile).
  int64_t mtime_ns = -1;
};

// A directory's first entries by name, and how many it holds.
struct DirListing {
  std::vector<DirEntry> entries;  // sorted by name
  size_t total = 0;               // entries in the directory, listed or not
};

// What watchDirectory returns: tells that the directory (its entries or a
// file in it) may have changed. Owned by the caller; one thread waits on it,
// any thread may stop it.
class DirectoryWatch {
 public:
  virtual ~DirectoryWatch() = default;
  // Blocks up to `timeout`; true when something changed (or the directory
  // appeared or disappeared, or cannot be watched: the caller re-reads),
  // false when nothing did within the timeout or the watch is stopped.
  virtual bool wait(std::chrono::milliseconds timeout) = 0;
  // Ends a wait in progress and every later one at once (false): how the
  // waiting thread's owner shuts it down. Thread-safe.
  virtual void stop() = 0;
};

enum class Sync {
  kNone,     // rename only: a crash leaves the old or the new file; a power cut may lose both
  kDurable,  // fsync of the file and of the directory: a power cut too
};

class Env {
 public:
  virtual ~Env() = default;

  // base/read_file.h's readRegularFile: a regular file of at most max_bytes,
  // never blocking on a FIFO; its error codes.
  virtual absl::StatusOr<std::string> readFile(const std::string& path, size_t max_bytes,
                                               FileLinks links = FileLinks::kFollow) = 0;
  // Replaces `path` with `text`: written to <dir>/.<name>.tmp (mode 0600, a
  // symlink there is not followed), synced as `sync` says, renamed over
  // `path`. <dir> itself is opened without following a link (the path
  // above it is followed): crihookd writes only into folders of its own, and
  // a link put in place of one is refused, nothing written through it. On
  // any failure the temporary file is removed and `path` is left as it was,
  // never truncated. Blocking (disk I/O): call off event loops. UNAVAILABLE
  // "cannot write <path>: <reason>" (ENOSPC reads "No space left on
  // device"; a link "its folder <dir> is a symbolic link; ...").
  virtual absl::Status writeFileAtomic(const std::string& path, std::string_view text,
                                       Sync sync) = 0;
  // Writes `text` into an existing file in place (no create, no truncate,
  // no rename): a sysfs attribute such as a PCI function's reset.
  // FAILED_PRECONDITION "cannot write <path>: <reason>".
  virtual absl::Status writeExisting(const std::string& path, std::string_view text) = 0;
  // Unlinks a file; OK when it (or its folder) does not exist. Its folder is
  // opened as writeFileAtomic opens it: a link there is refused. UNAVAILABLE
  // "cannot remove <path>: <reason>". With Sync::kDurable the directory is
  // synced after.
  virtual absl::Status removeFile(const std::string& path, Sync sync = Sync::kNone) = 0;
  // Renames a file within a filesystem. UNAVAILABLE naming both.
  virtual absl::Status renameFile(const std::string& from, const std::string& to) = 0;
  // Creates `path` and its parents; `mode` for the last one when it is made
  // (an existing directory keeps its own). FAILED_PRECONDITION "cannot
  // create <path>: <reason>", and when `path` itself is a symbolic link
  // (a folder crihookd makes is its own; the parents may be links).
  virtual absl::Status makeDirectories(const std::string& path, unsigned mode) = 0;
  // The first `max_entries` entries of a directory by name (not "." and
  // ".."), sorted, and how many it holds; its memory is bounded by
  // `max_entries` whatever the directory holds. NOT_FOUND when it does not
  // exist; UNAVAILABLE "cannot read <path>: <reason>" otherwise.
  virtual absl::StatusOr<DirListing> listDirectoryFirst(const std::string& path,
                                                        size_t max_entries) = 0;
  // Every entry of a directory, sorted by name (listDirectoryFirst unbounded:
  // for folders crihookd owns, whose every entry matters).
  absl::StatusOr<std::vector<DirEntry>> listDirectory(const std::string& path);
  // Whether `path` exists (any kind; a dangling symlink does not).
  virtual bool exists(const std::string& path) = 0;
  // A watch on `dir` (which need not exist yet). Never fails. While `dir`
  // does not exist it is looked for every `poll`, and its appearance is a
  // change; without inotify every `poll` is a change, so the caller re-reads.
  virtual std::unique_ptr<DirectoryWatch> watchDirectory(const std::string& dir,
                                                         std::chrono::milliseconds poll) = 0;

  // Runs a command (Executor::run's contract).
  virtual absl::StatusOr<ExecResult> exec(const ExecRequest& request) = 0;
  virtual MonotonicClock& clock() = 0;
};

// The real system. `executor` runs commands (null: exec is
// FAILED_PRECONDITION "no executor"); the clock is steadyClock().
class PosixEnv : public Env {
 public:
  explicit PosixEnv(std::shared_ptr<Executor> executor) : executor_(std::move(executor)) {}

  absl::StatusOr<std::string> readFile(const std::string& path, size_t max_bytes,
                                       FileLinks links) override;
  absl::Status writeFileAtomic(const std::string& path, std::string_view text, Sync sync) override;
  absl::Status writeExisting(const std::string& path, std::string_view text) override;
  absl::Status removeFile(const std::string& path, Sync sync) override;
  absl::Status renameFile(const std::string& from, const std::string& to) override;
  absl::Status makeDirectories(const std::string& path, unsigned mode) override;
  absl::StatusOr<DirListing> listDirectoryFirst(const std::string& path,
                                                size_t max_entries) override;
  bool exists(const std::string& path) override;
  std::unique_ptr<DirectoryWatch> watchDirectory(const std::string& dir,
                                                 std::chrono::milliseconds poll) override;
  absl::StatusOr<ExecResult> exec(const ExecRequest& request) override;
  MonotonicClock& clock() override { return steadyClock(); }

 protected:
  // One write(2) of a file being written by writeFileAtomic: the seam a
  // FaultEnv uses to run out of space part-way. Returns write(2)'s result
  // (errno set on -1).
  virtual long writeSome(int fd, const char* data, size_t size);

 private:
  std::shared_ptr<Executor> executor_;
};

// fsync of a directory, so a rename or unlink in it survives a power cut.
// Best effort: a directory that cannot be opened is left alone.
void syncDirectory(const std::string& dir);

}  // namespace crihook
