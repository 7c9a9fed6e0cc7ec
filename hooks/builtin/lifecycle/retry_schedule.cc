#include "hooks/builtin/lifecycle/retry_schedule.h"

#include "base/thread_name.h"

namespace crihook {

RetrySchedule::RetrySchedule(MonotonicClock& clock, std::chrono::milliseconds initial,
                             std::chrono::milliseconds max, Run run)
    : clock_(clock), initial_(initial), max_(max), run_(std::move(run)) {}

RetrySchedule::~RetrySchedule() { stop(); }

void RetrySchedule::start() {
  thread_ = namedThread("lifecycle-retry", [this] { loop(); });
}

void RetrySchedule::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notifyAll();
  if (thread_.joinable()) thread_.join();
}

void RetrySchedule::schedule(const SandboxKey& key, std::chrono::milliseconds delay) {
  {
    MutexLock lock(mu_);
    due_[key] = clock_.now() + delay;
  }
  cv_.notifyAll();
}

std::chrono::milliseconds RetrySchedule::backoff(uint32_t failures) const {
  auto delay = initial_;
  for (uint32_t i = 1; i < failures && delay < max_; ++i) delay *= 2;
  return delay > max_ ? max_ : delay;
}

void RetrySchedule::loop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto next = due_.begin();
    for (auto it = due_.begin(); it != due_.end(); ++it) {
      if (it->second < next->second) next = it;
    }
    if (next->second > clock_.now()) {
      // By the env's clock: a test jumps it (lifecycle_hook_test.cc).
      cv_.waitUntilBy(lock, clock_, next->second);
      continue;
    }
    const SandboxKey key = next->first;
    due_.erase(next);
    lock.unlock();
    run_(key);
    lock.lock();
  }
}

}  // namespace crihook
