#pragma once

// An Env (base/env.h) for tests that inject what only a real machine
// produces otherwise: a disk that fills up part-way through a write, a clock
// that jumps, a command that never exits. Everything else is the real
// PosixEnv (files in the test's temporary directory, commands through the
// process's launcher), so the code under test runs its real paths up to the
// fault. Thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/env.h"

namespace crihook::testing {

// Real steady time plus an offset a test moves: jump() is what a suspend,
// a VM pause or a stalled timer looks like to crihook's monotonic clock.
class JumpingClock final : public MonotonicClock {
 public:
  time_point now() const override;
  // Waits in slices of at most kSlice of real time, so a jump is seen within
  // one slice.
  void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 time_point deadline) const override;
  void jump(std::chrono::milliseconds by) { offset_ms_ += by.count(); }

  static constexpr std::chrono::milliseconds kSlice{5};

 private:
  std::atomic<int64_t> offset_ms_{0};
};

class FaultEnv final : public PosixEnv {
 public:
  // `executor` runs the commands that do not hang (hooks/process_env.h
  // launcherExecutor() for the real ones).
  explicit FaultEnv(std::shared_ptr<Executor> executor) : PosixEnv(std::move(executor)) {}

  // A full disk: writes through writeFileAtomic fail with ENOSPC once
  // `bytes_left` more bytes were written (0: the next write(2) fails).
  void fillDisk(size_t bytes_left);
  // A full disk after `writes` more write(2) calls of writeFileAtomic (a
  // small record is one): the next ones fail with ENOSPC until freeDisk().
  void fillDiskAfterWrites(size_t writes);
  // Each write(2) of writeFileAtomic writes at most `bytes` (0: no bound):
  // the short writes a signal or a pipe-like file makes.
  void shortWrites(size_t bytes);
  void freeDisk();
  // removeFile fails with `error` (EROFS: a filesystem remounted read-only);
  // 0 ends it.
  void failRemoves(int error);

  // A command that never exits: exec() blocks until the request's timeout
  // passes (real time) and reports kTimedOut, as the launcher does after
  // killing it, or until releaseHungCommands() (then it exits 0). Without
  // hanging, exec runs the real command.
  void hangCommands();
  void releaseHungCommands();
  // The timeout of each exec() call so far, in order.
  std::vector<std::chrono::milliseconds> execTimeouts() const;

  JumpingClock& jumpingClock() { return clock_; }
  MonotonicClock& clock() override { return clock_; }
  absl::Status removeFile(const std::string& path, Sync sync) override;
  absl::StatusOr<ExecResult> exec(const ExecRequest& request) override;

 protected:
  long writeSome(int fd, const char* data, size_t size) override;

 private:
  JumpingClock clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool disk_full_ = false;
  std::optional<size_t> writes_left_;  // fillDiskAfterWrites
  size_t short_writes_ = 0;
  size_t bytes_left_ = 0;
  int remove_error_ = 0;
  bool hang_ = false;
  uint64_t release_generation_ = 0;
  std::vector<std::chrono::milliseconds> exec_timeouts_;
};

}  // namespace crihook::testing
