#include "proxy/linger.h"

#include <utility>

namespace crihook::relay {

void Linger::start(std::string why, EventLoop::Task read_now,
                   std::function<void(const std::string&)> expire) {
  if (active_) return;
  active_ = true;
  why_ = std::move(why);
  // The timer holds a copy of `why`, not this: it may outlive the owner.
  timer_ =
      loop_.runAfter(kLingerAfterFinish, [expire = std::move(expire), why = why_] { expire(why); });
  loop_.post(std::move(read_now));
}

void Linger::stop() {
  if (timer_ != 0) loop_.cancel(timer_);
  timer_ = 0;
}

}  // namespace crihook::relay
