#include "proxy/relay.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/unix_listener.h"
#include "proxy/transparent.h"

// The relay's parts are relay::Transparent's (transparent.h). What is here
// is the public entry: Connection, the handle server.cc holds, and
// LogLimiter.

namespace crihook {

bool LogLimiter::allow(uint64_t& held_back) {
  MutexLock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) {
    ++held_back_;
    return false;
  }
  next_ = now + interval_;
  held_back = held_back_;
  held_back_ = 0;
  return true;
}

namespace {

// A socket connected to the runtime now, or -1. A Unix socket connects at
// once or not at all (EAGAIN: its backlog is full).
int connectNow(const std::string& path) {
  sockaddr_un addr;
  if (!unixSocketAddress(path, addr)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

void ActiveCalls::done() {
  if (n_.fetch_sub(1) == 1 && waiters_.load() > 0) {
    // Under the mutex: a waiter that saw calls left is inside its wait by
    // the time this takes it.
    MutexLock lock(mu_);
    none_.notifyAll();
  }
}

bool ActiveCalls::waitForNone(std::chrono::steady_clock::time_point deadline) {
  waiters_.fetch_add(1);
  {
    MutexLock lock(mu_);
    while (n_.load() > 0 && none_.waitUntil(lock, deadline) == std::cv_status::no_timeout) {
    }
  }
  waiters_.fetch_sub(1);
  return n_.load() == 0;
}

Connection::Connection(relay::EventLoop& loop, int fd, RelayContext& ctx) {
  // The runtime's connection is opened at once: its SETTINGS are kubelet's
  // to read. When the runtime cannot be reached now, crihookd stands in for
  // it (-1): each call goes on a side connection that tries the runtime
  // again, answered UNAVAILABLE naming the backend while it is down; once the
  // runtime answers, kubelet gets GOAWAY, and its next connection is relayed
  // frame by frame.
  auto relay = std::make_shared<relay::Transparent>(loop, fd, connectNow(ctx.backend_path), ctx);
  relay_ = relay;
  loop.post([relay] { relay->start(); });
}

Connection::~Connection() = default;

void Connection::shutdown() {
  if (auto t = relay_.lock()) t->loop().post([t] { t->shutdown(); });
}

void Connection::close() {
  if (auto t = relay_.lock()) t->loop().post([t] { t->close("closed by crihookd"); });
}

bool Connection::alive() const { return !relay_.expired(); }

}  // namespace crihook
