#include "base/growing_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "base/logging.h"
#include "base/thread_name.h"

namespace crihook {

struct GrowingPool::Worker {
  std::thread thread;
  bool ended = false;  // its loop returned: join() will not block (guarded by the pool's mu_)
};

GrowingPool::GrowingPool(std::string name, size_t max_threads, std::chrono::milliseconds idle,
                         ThreadStarter start)
    : name_(std::move(name)),
      max_threads_(std::max<size_t>(max_threads, 1)),
      idle_(idle),
      start_(start ? std::move(start) : [](const std::string& n, std::function<void()> fn) {
        return namedThread(n, std::move(fn));
      }) {}

GrowingPool::~GrowingPool() {
  std::list<std::unique_ptr<Worker>> workers;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    work_.notifyAll();
    // A worker takes every queued task before it ends, so none is left.
    workers.swap(workers_);
  }
  for (auto& w : workers) w->thread.join();
}

void GrowingPool::post(std::function<void()> task) {
  MutexLock lock(mu_);
  tasks_.push_back(std::move(task));
  reapEnded();
  if (idle_count_ >= tasks_.size() || running_ >= max_threads_) {
    work_.notifyOne();
    return;
  }
  auto worker = std::make_unique<Worker>();
  Worker* self = worker.get();
  // The thread reads nothing of `self` before it takes mu_, which this holds.
  try {
    worker->thread = start_(name_, [this, self] { run(self); });
  } catch (const std::system_error& e) {
    ++start_failures_;
    if (!failing_) {
      const auto log = logger("crihookd");
      log->error(
          "cannot start a {} thread: {}; {} task(s) wait for a running one ({} run) or "
          "the next start",
          name_, e.what(), tasks_.size(), running_);
    }
    failing_ = true;
    return;
  }
  if (failing_) logger("crihookd")->info("{} threads start again", name_);
  failing_ = false;
  ++running_;
  workers_.push_back(std::move(worker));
}

void GrowingPool::reapEnded() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (!(*it)->ended) {
      ++it;
      continue;
    }
    (*it)->thread.join();  // its loop has returned: at most the last instructions of its exit
    it = workers_.erase(it);
  }
}

void GrowingPool::run(Worker* self) {
  MutexLock lock(mu_);
  for (;;) {
    if (!tasks_.empty()) {
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // what it holds is let go off the lock
      lock.lock();
      continue;
    }
    if (stopping_) break;
    ++idle_count_;
    const auto woke = work_.waitFor(lock, idle_);
    --idle_count_;
    if (woke == std::cv_status::timeout && tasks_.empty() && !stopping_) break;
  }
  --running_;
  self->ended = true;
}

size_t GrowingPool::threads() const {
  MutexLock lock(mu_);
  return running_;
}

size_t GrowingPool::idle() const {
  MutexLock lock(mu_);
  return idle_count_;
}

uint64_t GrowingPool::startFailures() const {
  MutexLock lock(mu_);
  return start_failures_;
}

size_t GrowingPool::queued() const {
  MutexLock lock(mu_);
  return tasks_.size();
}

}  // namespace crihook
