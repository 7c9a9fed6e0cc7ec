#include "proxy/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/text.h"

namespace crihook::relay {

namespace {

// Events taken per epoll_wait: a turn handles at most this many
// descriptors, the rest wait for the next turn.
constexpr int kMaxEvents = 64;
// Rounds of tasks posted by tasks run before epoll is asked again: a task
// that keeps posting itself (a peer that keeps its socket full) must not
// starve the other descriptors.
constexpr int kMaxTaskRounds = 16;
// The token of the wake eventfd in epoll's data.
constexpr uint64_t kWakeToken = 0;
constexpr uint32_t kInput = EPOLLIN | EPOLLRDHUP | EPOLLET;

}  // namespace

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::create() {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return absl::UnavailableError(cat("epoll_create1: ", std::strerror(errno)));
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    const int e = errno;
    ::close(ep);
    return absl::UnavailableError(cat("eventfd: ", std::strerror(e)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = kWakeToken;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev) != 0) {
    const int e = errno;
    ::close(wake);
    ::close(ep);
    return absl::UnavailableError(cat("epoll_ctl: ", std::strerror(e)));
  }
  return std::unique_ptr<EventLoop>(new EventLoop(ep, wake));
}

EventLoop::EventLoop(int epoll_fd, int wake_fd) : epoll_fd_(epoll_fd), wake_fd_(wake_fd) {}

EventLoop::~EventLoop() {
  // What is destroyed here may call back (a connection's destructor closes
  // its upstream, which unwatches): the members are emptied first.
  auto watched = std::move(watched_);
  watched_.clear();
  tokens_.clear();
  auto tasks = std::move(tasks_);
  tasks_.clear();
  auto timers = std::move(timers_);
  timers_.clear();
  {
    MutexLock lock(remote_mu_);
    tasks.insert(tasks.end(), std::make_move_iterator(remote_.begin()),
                 std::make_move_iterator(remote_.end()));
    remote_.clear();
  }
  watched.clear();
  tasks.clear();
  timers.clear();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void EventLoop::run() {
  thread_.store(std::this_thread::get_id());
  epoll_event events[kMaxEvents];
  for (;;) {
    runTasks();
    runTimers();
    if (stopping_.load()) {
      drainRemote();
      runTasks();
      break;
    }
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, tasks_.empty() ? waitMillis() : 0);
    if (n > 0) handleEvents(events, n);
  }
  thread_.store(std::thread::id());
}

size_t EventLoop::poll() {
  thread_.store(std::this_thread::get_id());
  size_t ran = runTasks() + runTimers();
  epoll_event events[kMaxEvents];
  const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, 0);
  if (n > 0) {
    handleEvents(events, n);
    ran += static_cast<size_t>(n);
  }
  return ran + runTasks();
}

size_t EventLoop::expireTimers() {
  std::vector<uint64_t> pending;
  while (!timer_queue_.empty()) {
    pending.push_back(timer_queue_.top().id);
    timer_queue_.pop();
  }
  size_t ran = 0;
  for (uint64_t id : pending) ran += fire(id);  // not if cancelled, or cancelled by one that ran
  return ran;
}

void EventLoop::stop() {
  stopping_.store(true);
  wake();
}

void EventLoop::wake() {
  // One eventfd write per wake-up, however many posts it carries.
  if (!woken_.exchange(true)) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

void EventLoop::post(Task task) {
  if (inLoop()) {
    tasks_.push_back(std::move(task));
    return;
  }
  {
    MutexLock lock(remote_mu_);
    remote_.push_back(std::move(task));
  }
  wake();
}

void EventLoop::dispatch(Task task) {
  if (inLoop()) {
    task();
  } else {
    post(std::move(task));
  }
}

uint64_t EventLoop::runAfter(std::chrono::milliseconds after, Task task) {
  const uint64_t id = next_timer_++;
  timers_.emplace(id, std::move(task));
  timer_queue_.push({Clock::now() + after, id});
  return id;
}

void EventLoop::cancel(uint64_t timer) { timers_.erase(timer); }

absl::Status EventLoop::watch(int fd, std::shared_ptr<IoHandler> handler) {
  const uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = kInput;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    return absl::UnavailableError(cat("epoll_ctl: ", std::strerror(errno)));
  watched_.emplace(token, Watched{fd, std::move(handler)});
  tokens_[fd] = token;
  return absl::OkStatus();
}

void EventLoop::wantWritable(int fd, bool on) {
  auto t = tokens_.find(fd);
  if (t == tokens_.end()) return;
  Watched& w = watched_.at(t->second);
  if (w.writable == on) return;
  epoll_event ev{};
  ev.events = kInput | (on ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.u64 = t->second;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) == 0) w.writable = on;
}

void EventLoop::unwatch(int fd) {
  auto t = tokens_.find(fd);
  if (t == tokens_.end()) return;
  auto w = watched_.find(t->second);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  // Released by a task: the handler may be running right now.
  tasks_.push_back([handler = std::move(w->second.handler)] {});
  watched_.erase(w);
  tokens_.erase(t);
}

size_t EventLoop::runTasks() {
  size_t ran = 0;
  for (int round = 0; round < kMaxTaskRounds && !tasks_.empty(); ++round) {
    std::vector<Task> batch;
    batch.swap(tasks_);
    for (Task& t : batch) t();
    ran += batch.size();
  }
  return ran;
}

size_t EventLoop::runTimers() {
  size_t ran = 0;
  if (timer_queue_.empty()) return ran;
  const auto now = Clock::now();
  while (!timer_queue_.empty() && timer_queue_.top().when <= now) {
    const uint64_t id = timer_queue_.top().id;
    timer_queue_.pop();
    ran += fire(id);
  }
  return ran;
}

bool EventLoop::fire(uint64_t timer) {
  auto it = timers_.find(timer);
  if (it == timers_.end()) return false;  // cancelled
  Task task = std::move(it->second);
  timers_.erase(it);
  task();
  return true;
}

int EventLoop::waitMillis() {
  // Cancelled timers stay queued until their time; those at the head are
  // dropped here, so that the loop does not wake for them (a relayed call
  // cancels a PING ACK timer of 2 ms: an idle loop would wake once for each
  // call). One in the middle costs a turn at most, not a wrong result.
  while (!timer_queue_.empty() && !timers_.contains(timer_queue_.top().id)) timer_queue_.pop();
  if (timer_queue_.empty()) return -1;
  const auto left = timer_queue_.top().when - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Rounded up: a timer never runs early.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT32_MAX));
}

void EventLoop::handleEvents(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    const uint64_t token = events[i].data.u64;
    if (token == kWakeToken) {
      uint64_t count;
      (void)!::read(wake_fd_, &count, sizeof(count));
      woken_.store(false);  // before draining: a post after this writes again
      drainRemote();
      continue;
    }
    auto w = watched_.find(token);
    if (w == watched_.end()) continue;  // unwatched earlier in this turn
    std::shared_ptr<IoHandler> handler = w->second.handler;
    const uint32_t ev = events[i].events;
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
      handler->onReadable((ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
    if (ev & EPOLLOUT) {
      w = watched_.find(token);
      if (w != watched_.end() && w->second.writable) handler->onWritable();
    }
  }
}

void EventLoop::drainRemote() {
  std::vector<Task> remote;
  {
    MutexLock lock(remote_mu_);
    remote.swap(remote_);
  }
  for (Task& t : remote) tasks_.push_back(std::move(t));
}

}  // namespace crihook::relay
