#include "hooks/executor.h"

#include <algorithm>

#include "base/mutex.h"
#include "base/text.h"
#include "base/thread_name.h"

namespace crihook {

using Clock = std::chrono::steady_clock;

// One call. Its fields are the executor's (State::mu guards them): the
// analysis knows that mutex as `mu`, the reference each job keeps to it.
struct HookExecutor::Job {
  Job(Mutex& state_mu, Task t) : mu(state_mu), task(std::move(t)) {}
  Mutex& mu;  // State::mu
  Task task ABSL_GUARDED_BY(mu);
  bool started ABSL_GUARDED_BY(mu) = false;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;  // the caller stopped waiting
  Clock::time_point abandoned_at ABSL_GUARDED_BY(mu);
  HookDecision decision ABSL_GUARDED_BY(mu);
  CondVar cv;  // done
};

struct HookExecutor::State {
  State(std::string hook, size_t workers, size_t queue_limit, std::shared_ptr<spdlog::logger> log,
        metrics::HookExecutorMetrics* metrics)
      : hook(std::move(hook)),
        queue_limit(queue_limit),
        log(std::move(log)),
        metrics(metrics),
        busy(workers, false) {}

  const std::string hook;
  const size_t queue_limit;
  const std::shared_ptr<spdlog::logger> log;

  Mutex mu;
  // Null once the executor is gone (workers left running outlive it).
  metrics::HookExecutorMetrics* metrics ABSL_GUARDED_BY(mu);
  CondVar work;  // a job was queued, or stopping
  std::deque<std::shared_ptr<Job>> queue ABSL_GUARDED_BY(mu);
  std::vector<bool> busy ABSL_GUARDED_BY(mu);  // per worker: running a task
  size_t running ABSL_GUARDED_BY(mu) = 0;      // workers running a task
  size_t stuck ABSL_GUARDED_BY(mu) = 0;        // of those, running an abandoned one
  int timeouts_in_a_row ABSL_GUARDED_BY(mu) = 0;
  bool unhealthy ABSL_GUARDED_BY(mu) = false;
  bool probe_in_flight ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;

  void setStuck(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (metrics) metrics->stuck_workers.add(static_cast<int64_t>(n) - static_cast<int64_t>(stuck));
    stuck = n;
  }
  // `job`'s caller gave up waiting for it (its deadline passed): a worker
  // running it is stuck until it returns; one still queued is dropped.
  // Counts the timeout; kUnhealthyAfterTimeouts in a row mark the hook
  // unhealthy.
  void abandon(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

HookExecutor::HookExecutor(std::string hook, size_t workers, size_t queue,
                           std::shared_ptr<spdlog::logger> log,
                           metrics::HookExecutorMetrics* metrics) {
  workers = std::max<size_t>(workers, 1);
  state_ = std::make_shared<State>(std::move(hook), workers, queue, std::move(log), metrics);
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i)
    threads_.push_back(namedThread("hook-worker", [s = state_, i] { workerLoop(s, i); }));
}

HookExecutor::~HookExecutor() {
  std::vector<bool> busy;
  {
    MutexLock lock(state_->mu);
    state_->stopping = true;
    busy = state_->busy;
    // Workers left running outlive the executor; the metrics need not.
    state_->metrics = nullptr;
  }
  state_->work.notifyAll();
  // No caller is inside run() (the executor is only destroyed once no chain
  // holds it), so the queue is empty and an idle worker stays idle until it
  // sees `stopping`: joining it is bounded. A busy one may be stuck in the
  // hook for ever: it keeps `state_` alive and exits when the hook returns.
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (busy[i]) {
      threads_[i].detach();
    } else {
      threads_[i].join();
    }
  }
}

void HookExecutor::workerLoop(std::shared_ptr<State> s, size_t index) {
  MutexLock lock(s->mu);
  for (;;) {
    while (!s->stopping && s->queue.empty()) s->work.wait(lock);
    if (s->stopping) return;
    std::shared_ptr<Job> job = std::move(s->queue.front());
    s->queue.pop_front();
    job->mu.assertHeld();  // s->mu, held
    job->started = true;
    s->busy[index] = true;
    ++s->running;
    Task task = std::move(job->task);
    lock.unlock();
    HookDecision d = task();
    task = nullptr;  // frees the call's copy of its input outside the lock
    lock.lock();
    s->busy[index] = false;
    --s->running;
    if (job->abandoned) {
      s->setStuck(s->stuck - 1);
      if (s->log) {
        s->log->info(
            "hook {}: a worker returned {}ms after its call timed out ({} still stuck)", s->hook,
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - job->abandoned_at)
                .count(),
            s->stuck);
      }
      continue;
    }
    job->decision = std::move(d);
    job->done = true;
    job->cv.notifyOne();
  }
}

HookExecutor::Result HookExecutor::run(Task task, std::chrono::milliseconds budget) {
  State& s = *state_;
  const auto deadline = Clock::now() + budget;
  MutexLock lock(s.mu);
  const size_t workers = s.busy.size();
  if (s.stopping) {
    return {How::kStopped,
            HookDecision::error(absl::UnavailableError("its executor is shutting down"))};
  }
  bool probe = false;
  if (s.unhealthy) {
    if (s.probe_in_flight || s.running + s.queue.size() >= workers) {
      if (s.metrics) s.metrics->refused_unhealthy.inc();
      return {How::kUnhealthy,
              HookDecision::error(absl::UnavailableError(cat(
                  "unhealthy (", kUnhealthyAfterTimeouts, " or more timeouts in a row, ", s.stuck,
                  " of ", workers, " workers stuck); refused until it answers again")))};
    }
    probe = s.probe_in_flight = true;
  }
  if (s.running + s.queue.size() >= workers + s.queue_limit) {
    if (s.metrics) s.metrics->refused_queue_full.inc();
    return {How::kQueueFull, HookDecision::error(absl::ResourceExhaustedError(
                                 cat("all ", workers, " workers busy (", s.stuck, " stuck) and ",
                                     s.queue.size(), " calls queued, the most allowed")))};
  }
  auto job = std::make_shared<Job>(s.mu, std::move(task));
  job->mu.assertHeld();  // s.mu, held
  s.queue.push_back(job);
  s.work.notifyOne();
  bool answered = true;
  while (!job->done) {
    if (job->cv.waitUntil(lock, deadline) == std::cv_status::timeout) {
      answered = job->done;
      break;
    }
  }
  if (probe) s.probe_in_flight = false;
  if (!answered) {
    s.abandon(*job);
    return {How::kTimedOut, HookDecision::error(absl::DeadlineExceededError(
                                cat("timed out after ", budget.count(), "ms")))};
  }
  s.timeouts_in_a_row = 0;
  if (s.unhealthy) {
    s.unhealthy = false;
    if (s.metrics) s.metrics->unhealthy.set(0);
    if (s.log) s.log->warn("hook {}: answers again; healthy", s.hook);
  }
  return {How::kAnswered, std::move(job->decision)};
}

void HookExecutor::State::abandon(Job& job) {
  job.mu.assertHeld();  // mu, held
  job.abandoned = true;
  job.abandoned_at = Clock::now();
  if (job.started) {
    setStuck(stuck + 1);
    if (log) {
      log->warn("hook {}: a worker is stuck on a call past its deadline ({} of {} stuck)", hook,
                stuck, busy.size());
    }
  } else {
    // Never ran: off the queue, so it neither runs late nor holds a place.
    std::erase_if(queue, [&](const std::shared_ptr<Job>& j) { return j.get() == &job; });
    job.task = nullptr;
  }
  if (++timeouts_in_a_row >= kUnhealthyAfterTimeouts && !unhealthy) {
    unhealthy = true;
    if (metrics) metrics->unhealthy.set(1);
    if (log) {
      log->error(
          "hook {}: unhealthy after {} timeouts in a row; its calls are refused (or skipped "
          "under failure_policy = ignore) until it answers again",
          hook, timeouts_in_a_row);
    }
  }
}

bool HookExecutor::healthy() const {
  MutexLock lock(state_->mu);
  return !state_->unhealthy;
}

size_t HookExecutor::stuckWorkers() const {
  MutexLock lock(state_->mu);
  return state_->stuck;
}

size_t HookExecutor::queued() const {
  MutexLock lock(state_->mu);
  return state_->queue.size();
}

}  // namespace crihook
