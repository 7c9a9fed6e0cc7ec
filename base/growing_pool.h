#pragma once

// GrowingPool: worker threads started when work arrives and none is idle, up
// to a maximum, each ending after it has been idle a while. A pool whose
// tasks block (a hook stage waiting on a hook server) then never makes one
// task wait for another's slow server while fewer than `max_threads` run:
// sixteen calls held by a server that hangs are sixteen threads, not four
// threads and twelve calls queued behind them. Past `max_threads` tasks wait
// in order of arrival.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "base/mutex.h"

namespace crihook {

class GrowingPool {
 public:
  // How a worker thread is started: base/thread_name.h's namedThread, or a
  // test's. It throws std::system_error when the system has no thread to
  // give (the unit's or the kernel's task limit), as std::thread does.
  using ThreadStarter = std::function<std::thread(const std::string& name, std::function<void()>)>;

  // Threads are named `name` (base/thread_name.h); `max_threads` >= 1; a
  // thread idle for `idle` ends (one started again when work arrives).
  GrowingPool(std::string name, size_t max_threads,
              std::chrono::milliseconds idle = std::chrono::seconds(30), ThreadStarter start = {});
  // Runs every task posted before it, then joins the threads: blocks while
  // a task runs.
  ~GrowingPool();
  GrowingPool(const GrowingPool&) = delete;
  GrowingPool& operator=(const GrowingPool&) = delete;

  // Queues `task`; starts a thread for it when none is idle and fewer than
  // the maximum run. Never blocks on a task, never throws: when no thread
  // can be started the task stays queued for a running one, or for the
  // thread the next post() starts (its caller's deadline bounds the wait),
  // and the first failure of a run of them is logged. Thread-safe; not to be
  // called from the destructor's thread once it has begun.
  void post(std::function<void()> task);

  size_t threads() const;          // started and not yet ended
  size_t idle() const;             // of those, waiting for a task
  size_t queued() const;           // tasks no thread has taken yet
  uint64_t startFailures() const;  // threads that could not be started

 private:
  struct Worker;
  void run(Worker* self);
  void reapEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const size_t max_threads_;
  const std::chrono::milliseconds idle_;
  const ThreadStarter start_;
  mutable Mutex mu_;
  CondVar work_;  // a task was queued, or stopping
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::list<std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;  // workers not ended
  size_t idle_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t start_failures_ ABSL_GUARDED_BY(mu_) = 0;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;  // the last start failed
};

}  // namespace crihook
