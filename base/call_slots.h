#pragma once

// CallSlots: at most `slots` calls in at once, at most `queue` more waiting
// for one, each waiting no longer than its own deadline. What bounds the
// calls crihookd makes to one hook server: a server that hangs holds
// `slots` calls, the next `queue` wait out their own timeout, and any more
// are refused at once; the calls of every other server never wait on it.

#include <chrono>
#include <cstddef>

#include "base/mutex.h"

namespace crihook {

class CallSlots {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Got {
    kSlot,       // in: release() when done (a Slot does it)
    kQueueFull,  // `slots` in and `queue` waiting already: refused at once
    kTimedOut,   // no slot came free before the deadline
  };

  CallSlots(size_t slots, size_t queue) : slots_(slots < 1 ? 1 : slots), queue_(queue) {}

  // Blocks until a slot is free (kSlot) or `deadline` (kTimedOut); refused
  // at once when the queue is full. Waiters are let in as slots come free,
  // in no promised order. Thread-safe.
  Got acquire(Clock::time_point deadline);
  void release();

  size_t slots() const { return slots_; }
  size_t queue() const { return queue_; }
  size_t inUse() const;
  size_t waiting() const;

  // Holds a slot for its scope.
  class Slot {
   public:
    explicit Slot(CallSlots& owner) : owner_(owner) {}
    ~Slot() { owner_.release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    CallSlots& owner_;
  };

 private:
  const size_t slots_, queue_;
  mutable Mutex mu_;
  CondVar freed_;
  size_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace crihook
