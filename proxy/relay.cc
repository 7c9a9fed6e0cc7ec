#include "proxy/relay.h"

#include "proxy/downstream.h"

// The relay's parts, by seam: byte_queue.h, h2_headers.h, request_check.h,
// call.h, h2_session.h (the nghttp2 session both ends share),
// upstream_owner.h, upstream.h, upstream_set.h, downstream.h,
// intercept_stage.h, call_log.h. What is here is the public
// entry: Connection, the handle server.cc holds, and LogLimiter.

namespace crihook {

bool LogLimiter::allow(uint64_t& held_back) {
  std::lock_guard lock(mu_);
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

struct Connection::Impl final : public relay::Downstream {
  using relay::Downstream::Downstream;
};

Connection::Connection(relay::EventLoop& loop, int fd, RelayContext& ctx)
    : starting_(std::make_shared<Impl>(loop, fd, ctx)), weak_(starting_) {}

Connection::~Connection() = default;

void Connection::start() {
  // Runs on the connection's own loop; from then on its I/O handlers keep it
  // alive.
  std::shared_ptr<Impl> impl = std::move(starting_);
  impl->loop().post([impl] { impl->start(); });
}

void Connection::shutdown() {
  if (auto impl = weak_.lock()) impl->loop().post([impl] { impl->shutdown(); });
}

void Connection::close() {
  if (auto impl = weak_.lock()) impl->loop().post([impl] { impl->closeAll("closed by crihookd"); });
}

bool Connection::alive() const { return !weak_.expired(); }

}  // namespace crihook
