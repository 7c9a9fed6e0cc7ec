#pragma once

// HookExecutor: where a hook that may block (neither runsInline() nor
// honoursDeadline(), e.g. a dlopen'd module) runs. A fixed pool of worker
// threads per hook and a bounded queue in front of it; the caller waits for
// its call's answer until the deadline and is answered at once after it.
//
//  - Never a new thread per call: the pool is made once (workers threads) and
//    a call that finds every worker busy and `queue` calls already waiting is
//    refused at once (kQueueFull, RESOURCE_EXHAUSTED).
//  - A call past its deadline is answered as a timeout (kTimedOut,
//    DEADLINE_EXCEEDED). Its worker, if it had started, is left to finish on
//    its own and counted as stuck (stuckWorkers(), the gauge
//    crihook_hook_stuck_workers, a log line naming the hook) until it
//    returns; its answer is dropped. A call that timed out still queued is
//    taken off the queue and never runs.
//  - kUnhealthyAfterTimeouts timeouts in a row mark the hook unhealthy (logged
//    once, gauge crihook_hook_unhealthy = 1). While unhealthy, calls are
//    refused at once (kUnhealthy, UNAVAILABLE), except one
//    probe at a time, let through when a worker is idle: a probe answered in
//    time makes the hook healthy again (logged), a probe that times out keeps
//    it unhealthy. So a hook whose workers are all stuck stays refused until
//    one of them returns.
//
// Executors are keyed by hook object, not by chain: HookManager makes one per
// configured hook once and hands the same one to every chain it publishes, so
// a reload neither doubles the pool nor strands its stuck workers.

#include <spdlog/logger.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hooks/hook.h"
#include "metrics/hook_metrics.h"

namespace crihook {

// Timeouts in a row before a hook is marked unhealthy. One slow call is
// noise (a page-in, a busy node); three in a row at the hook's own budget
// means the hook is not answering, and every further call would cost
// kubelet the whole budget for nothing.
inline constexpr int kUnhealthyAfterTimeouts = 3;

class HookExecutor {
 public:
  using Task = std::function<HookDecision()>;

  enum class How {
    kAnswered,   // the task ran and returned in time: `decision` is its answer
    kTimedOut,   // the deadline passed first (DEADLINE_EXCEEDED)
    kQueueFull,  // every worker busy and the queue full (RESOURCE_EXHAUSTED)
    kUnhealthy,  // the hook is unhealthy and this call was not a probe (UNAVAILABLE)
    kStopped,    // the executor is shutting down (UNAVAILABLE)
  };
  struct Result {
    How how;
    HookDecision decision;  // the hook's answer, or an error saying why (the chain names the hook)
  };

  // Starts `workers` threads (>= 1, named "hook-worker") for hook `hook`
  // with room for `queue` waiting calls (>= 0). `log` may be null; `metrics` (may be null)
  // outlives the executor (workers left running after it do not touch it).
  HookExecutor(std::string hook, size_t workers, size_t queue,
               std::shared_ptr<spdlog::logger> log = nullptr,
               metrics::HookExecutorMetrics* metrics = nullptr);

  // Bounded: idle workers are told to stop and joined (they wake at once);
  // a worker still running a task (stuck in the hook) is detached and exits
  // when the task returns. Never waits for a hook.
  ~HookExecutor();
  HookExecutor(const HookExecutor&) = delete;
  HookExecutor& operator=(const HookExecutor&) = delete;

  // Runs `task` on a worker and blocks until it returns or `budget` has
  // passed, whichever is first; refusals return at once. The task must own
  // what it reads (it may run after this returns, if it timed out).
  // Thread-safe.
  Result run(Task task, std::chrono::milliseconds budget);

  bool healthy() const;
  size_t stuckWorkers() const;  // workers running a call whose caller gave up
  size_t queued() const;        // calls waiting for a worker
  size_t workers() const { return threads_.size(); }

 private:
  struct Job;
  struct State;
  static void workerLoop(std::shared_ptr<State> state, size_t index);

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace crihook
