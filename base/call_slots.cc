#include "base/call_slots.h"

namespace crihook {

CallSlots::Got CallSlots::acquire(Clock::time_point deadline) {
  MutexLock lock(mu_);
  if (in_use_ < slots_) {
    ++in_use_;
    return Got::kSlot;
  }
  if (waiting_ >= queue_) return Got::kQueueFull;
  ++waiting_;
  while (in_use_ >= slots_) {
    if (freed_.waitUntil(lock, deadline) == std::cv_status::timeout && in_use_ >= slots_) {
      --waiting_;
      return Got::kTimedOut;
    }
  }
  --waiting_;
  ++in_use_;
  return Got::kSlot;
}

void CallSlots::release() {
  MutexLock lock(mu_);
  --in_use_;
  freed_.notifyOne();
}

size_t CallSlots::inUse() const {
  MutexLock lock(mu_);
  return in_use_;
}

size_t CallSlots::waiting() const {
  MutexLock lock(mu_);
  return waiting_;
}

}  // namespace crihook
