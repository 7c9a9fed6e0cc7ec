#pragma once

// The relay's event loop: one epoll instance driven by one thread, built for
// the fewest system calls per relayed call. A descriptor is registered once,
// edge-triggered, for input (and for output only while a write waits for
// room), so the steady path has no epoll_ctl; tasks posted from the loop's
// own thread and timers live in memory and cost no system call; a task
// posted from another thread costs one eventfd write there and wakes the
// loop only if it is not already woken. Replaces Boost.Asio's reactor,
// which re-arms the descriptor (an epoll_ctl) for every wait on it and polls
// epoll again whenever a handler is queued.
//
// Threading: run() on one thread; post(), stop() and inLoop() from any;
// everything else on the loop's thread only.

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"

namespace crihook::relay {

// What a watched descriptor is told. Called on the loop's thread.
class IoHandler {
 public:
  virtual ~IoHandler() = default;
  // Input, end of input or an error is waiting: read until the socket is
  // drained (a read shorter than asked), or no new edge will come. With
  // `hangup` the peer has closed (or the socket failed): read on until the
  // read says so, a short read is no longer the end.
  virtual void onReadable(bool hangup) = 0;
  // Room to write again (only while wantWritable(fd, true)).
  virtual void onWritable() = 0;
};

class EventLoop {
 public:
  using Task = std::function<void()>;
  using Clock = std::chrono::steady_clock;

  // UNAVAILABLE when the epoll instance or the eventfd cannot be made (out
  // of descriptors or memory).
  static absl::StatusOr<std::unique_ptr<EventLoop>> create();
  // Destroys what is left (tasks not run, timers, watched handlers). After
  // run() has returned.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs tasks, timers and I/O until stop(); then runs what is queued and
  // returns. On the calling thread, which becomes the loop's thread.
  void run();
  // Thread-safe; returns at once.
  void stop();
  // One turn without blocking, on the calling thread (which becomes the
  // loop's): what is queued and due runs, and the descriptors that are
  // ready are handled. Returns how many tasks, timers and events ran. For a
  // test or a fuzz harness that drives a loop by hand, instead of run().
  size_t poll();
  // On the loop's thread: runs every timer pending now as if its time had
  // come (not those they arm). Returns how many ran. For a harness that
  // drives a loop by hand and must not sleep for a timer's delay.
  size_t expireTimers();

  // Runs `task` on the loop's thread, after what is queued. Thread-safe.
  void post(Task task);
  // On the loop's thread: runs `task` now. Elsewhere: post().
  void dispatch(Task task);
  bool inLoop() const { return std::this_thread::get_id() == thread_.load(); }

  // Runs `task` once, `after` from now (not earlier; late by at most the
  // time one turn of the loop takes). Returns its id for cancel.
  uint64_t runAfter(std::chrono::milliseconds after, Task task);
  // A timer that has not run yet does not; an unknown id is ignored.
  void cancel(uint64_t timer);

  // Watches `fd` for input, edge-triggered, until unwatch(fd); the loop
  // keeps `handler` alive meanwhile. A descriptor already readable is
  // reported at once. UNAVAILABLE naming the errno when epoll refuses it.
  absl::Status watch(int fd, std::shared_ptr<IoHandler> handler);
  // Also tells of room to write (onWritable) while `on`: set while a write
  // waits for the peer to read, cleared once it went out.
  void wantWritable(int fd, bool on);
  // Stops watching `fd` (before it is closed). The handler is released once
  // the current task or event has finished, never under its own feet. Both
  // this and wantWritable ignore a descriptor not watched (any more).
  void unwatch(int fd);

 private:
  EventLoop(int epoll_fd, int wake_fd);
  // Makes the loop's epoll_wait return, unless a wake-up is already pending.
  void wake();
  size_t runTasks();
  size_t runTimers();
  // Runs timer `timer` unless it was cancelled; whether it ran.
  bool fire(uint64_t timer);
  int waitMillis();
  void handleEvents(const epoll_event* events, int n);
  void drainRemote();

  struct Watched {
    int fd;
    std::shared_ptr<IoHandler> handler;
    bool writable = false;  // EPOLLOUT registered
  };
  struct Timer {
    Clock::time_point when;
    uint64_t id;
    bool operator>(const Timer& o) const { return when > o.when || (when == o.when && id > o.id); }
  };

  const int epoll_fd_;
  const int wake_fd_;
  std::atomic<std::thread::id> thread_{};
  std::atomic<bool> stopping_{false};

  // Loop thread only.
  std::vector<Task> tasks_;
  std::unordered_map<uint64_t, Watched> watched_;  // by token (epoll data)
  std::unordered_map<int, uint64_t> tokens_;       // fd -> token
  uint64_t next_token_ = 1;                        // 0: the wake eventfd
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timer_queue_;
  std::unordered_map<uint64_t, Task> timers_;  // pending, by id
  uint64_t next_timer_ = 1;

  // From other threads.
  Mutex remote_mu_;
  std::vector<Task> remote_ ABSL_GUARDED_BY(remote_mu_);
  std::atomic<bool> woken_{false};  // an eventfd write is pending: no second one
};

}  // namespace crihook::relay
