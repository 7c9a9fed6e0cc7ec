#include "hooks/executor.h"

#include "base/text.h"

namespace crihook {

using Clock = std::chrono::steady_clock;

struct HookExecutor::Job {
  Task task;
  bool started = false;
  bool done = false;
  bool abandoned = false;  // the caller stopped waiting
  Clock::time_point abandoned_at;
  HookDecision decision;
  std::condition_variable cv;
};

struct HookExecutor::State {
  std::string hook;
  size_t queue_limit;
  std::shared_ptr<spdlog::logger> log;
  metrics::HookExecutorMetrics* metrics;

  std::mutex mu;
  std::condition_variable work;  // a job was queued, or stopping
  std::deque<std::shared_ptr<Job>> queue;
  std::vector<bool> busy;  // per worker: running a task
  size_t running = 0;      // workers running a task
  size_t stuck = 0;        // of those, running an abandoned one
  int timeouts_in_a_row = 0;
  bool unhealthy = false;
  bool probe_in_flight = false;
  bool stopping = false;

  void setStuck(size_t n) {
    if (metrics) metrics->stuck_workers.add(static_cast<int64_t>(n) - static_cast<int64_t>(stuck));
    stuck = n;
  }
};

HookExecutor::HookExecutor(std::string hook, size_t workers, size_t queue,
                           std::shared_ptr<spdlog::logger> log,
                           metrics::HookExecutorMetrics* metrics)
    : state_(std::make_shared<State>()) {
  state_->hook = std::move(hook);
  state_->queue_limit = queue;
  state_->log = std::move(log);
  state_->metrics = metrics;
  workers = std::max<size_t>(workers, 1);
  state_->busy.assign(workers, false);
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back(&HookExecutor::workerLoop, state_, i);
}

HookExecutor::~HookExecutor() {
  std::vector<bool> busy;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    busy = state_->busy;
    // Workers left running outlive the executor; the metrics need not.
    state_->metrics = nullptr;
  }
  state_->work.notify_all();
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
  std::unique_lock lock(s->mu);
  for (;;) {
    s->work.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
    if (s->stopping) return;
    std::shared_ptr<Job> job = std::move(s->queue.front());
    s->queue.pop_front();
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
    job->cv.notify_one();
  }
}

HookExecutor::Result HookExecutor::run(Task task, std::chrono::milliseconds budget) {
  State& s = *state_;
  const auto deadline = Clock::now() + budget;
  std::unique_lock lock(s.mu);
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
  auto job = std::make_shared<Job>();
  job->task = std::move(task);
  s.queue.push_back(job);
  s.work.notify_one();
  const bool answered = job->cv.wait_until(lock, deadline, [&] { return job->done; });
  if (probe) s.probe_in_flight = false;
  if (answered) {
    s.timeouts_in_a_row = 0;
    if (s.unhealthy) {
      s.unhealthy = false;
      if (s.metrics) s.metrics->unhealthy.set(0);
      if (s.log) s.log->warn("hook {}: answers again; healthy", s.hook);
    }
    return {How::kAnswered, std::move(job->decision)};
  }
  job->abandoned = true;
  job->abandoned_at = Clock::now();
  if (job->started) {
    s.setStuck(s.stuck + 1);
    if (s.log) {
      s.log->warn("hook {}: a worker is stuck on a call past its deadline ({} of {} stuck)", s.hook,
                  s.stuck, workers);
    }
  } else {
    // Never ran: off the queue, so it neither runs late nor holds a place.
    std::erase(s.queue, job);
    job->task = nullptr;
  }
  if (++s.timeouts_in_a_row >= kUnhealthyAfterTimeouts && !s.unhealthy) {
    s.unhealthy = true;
    if (s.metrics) s.metrics->unhealthy.set(1);
    if (s.log) {
      s.log->error(
          "hook {}: unhealthy after {} timeouts in a row; its calls are refused (or skipped "
          "under failure_policy = ignore) until it answers again",
          s.hook, s.timeouts_in_a_row);
    }
  }
  return {How::kTimedOut, HookDecision::error(absl::DeadlineExceededError(
                              cat("timed out after ", budget.count(), "ms")))};
}

bool HookExecutor::healthy() const {
  std::lock_guard lock(state_->mu);
  return !state_->unhealthy;
}

size_t HookExecutor::stuckWorkers() const {
  std::lock_guard lock(state_->mu);
  return state_->stuck;
}

size_t HookExecutor::queued() const {
  std::lock_guard lock(state_->mu);
  return state_->queue.size();
}

}  // namespace crihook
