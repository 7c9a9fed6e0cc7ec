#pragma once

// eventually(cond, bound, every): how a test waits for an event it cannot be
// told of directly (a worker stuck, a thread gone, a byte count drained, a
// log line written). Polls `cond` on the calling thread every `every` (a
// millisecond; more where one check is costly: an exec in a container, a
// log file read whole) until it holds (true) or `bound` has passed (false,
// checked once more at the end). The bound is
// what a loaded machine could need, not what the event takes: a test that
// passes only because the bound is long enough to sleep through proves
// nothing, so assert on the event, never on the time it took.

#include <chrono>
#include <thread>

namespace crihook {

template <typename Cond>
bool eventually(Cond cond, std::chrono::milliseconds bound = std::chrono::seconds(5),
                std::chrono::milliseconds every = std::chrono::milliseconds(1)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= until) return cond();
    std::this_thread::sleep_for(every);
  }
  return true;
}

}  // namespace crihook
