#include "test/support/fault_env.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace crihook::testing {

MonotonicClock::time_point JumpingClock::now() const {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(offset_ms_.load());
}

void JumpingClock::waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                             time_point deadline) const {
  const time_point at = now();
  if (at >= deadline) return;
  const auto left = deadline - at;
  cv.wait_for(lock, std::min<std::chrono::steady_clock::duration>(left, kSlice));
}

void FaultEnv::fillDisk(size_t bytes_left) {
  std::lock_guard lock(mu_);
  disk_full_ = true;
  bytes_left_ = bytes_left;
}

void FaultEnv::fillDiskAfterWrites(size_t writes) {
  std::lock_guard lock(mu_);
  writes_left_ = writes;
}

void FaultEnv::shortWrites(size_t bytes) {
  std::lock_guard lock(mu_);
  short_writes_ = bytes;
}

void FaultEnv::freeDisk() {
  std::lock_guard lock(mu_);
  disk_full_ = false;
  writes_left_.reset();
}

long FaultEnv::writeSome(int fd, const char* data, size_t size) {
  {
    std::lock_guard lock(mu_);
    if (writes_left_ && (*writes_left_)-- == 0) {
      writes_left_ = 0;
      errno = ENOSPC;
      return -1;
    }
    if (short_writes_ > 0) size = std::min(size, short_writes_);
    if (disk_full_) {
      if (bytes_left_ == 0) {
        errno = ENOSPC;
        return -1;
      }
      size = std::min(size, bytes_left_);  // a short write, as the kernel makes at the edge
      bytes_left_ -= size;
    }
  }
  return PosixEnv::writeSome(fd, data, size);
}

void FaultEnv::failRemoves(int error) {
  std::lock_guard lock(mu_);
  remove_error_ = error;
}

absl::Status FaultEnv::removeFile(const std::string& path, Sync sync) {
  int error = 0;
  {
    std::lock_guard lock(mu_);
    error = remove_error_;
  }
  if (error != 0)
    return absl::UnavailableError(std::string("cannot remove ") + path + ": " + strerror(error));
  return PosixEnv::removeFile(path, sync);
}

void FaultEnv::hangCommands() {
  std::lock_guard lock(mu_);
  hang_ = true;
}

void FaultEnv::releaseHungCommands() {
  {
    std::lock_guard lock(mu_);
    hang_ = false;
    ++release_generation_;
  }
  cv_.notify_all();
}

std::vector<std::chrono::milliseconds> FaultEnv::execTimeouts() const {
  std::lock_guard lock(mu_);
  return exec_timeouts_;
}

absl::StatusOr<ExecResult> FaultEnv::exec(const ExecRequest& request) {
  std::unique_lock lock(mu_);
  exec_timeouts_.push_back(request.timeout);
  if (!hang_) {
    lock.unlock();
    return PosixEnv::exec(request);
  }
  const uint64_t generation = release_generation_;
  ExecResult result;
  if (cv_.wait_for(lock, request.timeout, [&] { return release_generation_ != generation; })) {
    result.end = ExecResult::End::kExited;  // released: the command finished after all
    return result;
  }
  result.end = ExecResult::End::kTimedOut;
  return result;
}

}  // namespace crihook::testing
