// Not built by meson: scripts/thread-safety.sh compiles this file with
// clang's -Wthread-safety -Werror and fails when clang accepts it, so that
// annotations which stopped biting (a lock type that lost its capability
// attribute, a flag dropped from the build) are noticed. Each function
// below is one mistake the analysis must refuse; the script counts them.
#include "base/mutex.h"

namespace crihook {

class Counter {
 public:
  // 1: a guarded member written without the lock.
  void unlockedWrite() { count_ = 1; }
  // 2: a function that needs the lock, called without it.
  void callWithoutLock() { bump(); }
  // 3: a guarded member read after the scoped lock released it.
  int readAfterUnlock() {
    MutexLock lock(mu_);
    lock.unlock();
    return count_;
  }

 private:
  void bump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++count_; }
  Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace crihook
