#pragma once

// The bounded wait for a peer's end of a connection crihookd writes no more
// to. The relay waits so in two places, and both wait the same way:
//
// - kubelet's connection with nothing left to do (after GOAWAY, every stream
//   answered and written): crihookd half-closes it and reads and drops what
//   kubelet still sends until kubelet closes, because a gRPC client whose
//   write fails (the socket closed under it) drops what it had not read yet
//   and reports "Broken pipe" for calls that were answered;
// - a connection to the runtime whose write failed with EPIPE or ECONNRESET
//   (the runtime closed, maybe right behind its last replies: a GOAWAY, the
//   replies, close): nothing more is written, what its socket still holds is
//   read and handled to its end, so each reply complete in it still reaches
//   its caller (Transparent's runtime connection, and the side connection's
//   Upstreams through H2Endpoint).
//
// Either way the wait ends at the peer's end, or after kLingerAfterFinish
// if the peer never ends it. On the connection's EventLoop; not
// thread-safe.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "proxy/event_loop.h"

namespace crihook::relay {

inline constexpr std::chrono::milliseconds kLingerAfterFinish{1000};

class Linger {
 public:
  explicit Linger(EventLoop& loop) : loop_(loop) {}
  Linger(const Linger&) = delete;
  Linger& operator=(const Linger&) = delete;

  // Starts the wait, once (later calls change nothing): `read_now` is
  // posted, to read what the socket holds now (its edge may be past, or the
  // write failed inside a read of this connection's), and `expire(why)` runs
  // on the loop after kLingerAfterFinish unless stop() came first. `why` is
  // what the connection ends with if the peer does not end it. Both hold
  // what they need of the connection themselves (`expire` a weak
  // reference, so that the wait does not keep a closed connection).
  void start(std::string why, EventLoop::Task read_now,
             std::function<void(const std::string&)> expire);
  bool active() const { return active_; }
  // Empty until start().
  const std::string& why() const { return why_; }
  // The connection closes: `expire` will not run. Touches nothing at
  // destruction (the loop may be gone by then): the owner calls stop() when
  // it closes.
  void stop();

 private:
  EventLoop& loop_;
  bool active_ = false;
  std::string why_;
  uint64_t timer_ = 0;  // 0: none pending
};

}  // namespace crihook::relay
