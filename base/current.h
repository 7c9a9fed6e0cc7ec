#pragma once

// The current value of something that is replaced whole while readers use it
// (the hook chain on reload, the topology on rediscovery): readers take a
// shared_ptr and keep it as long as they need; set() swaps in the next one.
// Thread-safe.

#include <memory>

#include "base/mutex.h"

namespace crihook {

template <typename T>
class Current {
 public:
  explicit Current(std::shared_ptr<const T> initial) : value_(std::move(initial)) {}
  Current() : value_(std::make_shared<const T>()) {}

  std::shared_ptr<const T> get() const {
    MutexLock lock(mu_);
    return value_;
  }
  // The old value goes when its last reader lets go of it.
  void set(std::shared_ptr<const T> value) {
    MutexLock lock(mu_);
    value_.swap(value);
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const T> value_ ABSL_GUARDED_BY(mu_);
};

}  // namespace crihook
