#pragma once

// What an Upstream (upstream.h) reports to: the kubelet-side connection whose
// calls it carries (Transparent, transparent.h: the calls crihookd answers
// itself go on its side connection). Calls live with the owner, so every
// event of a runtime stream is handed to it, and the owner decides what
// kubelet sees. UpstreamSet (upstream_set.h) uses the same interface to
// manage an owner's upstreams.
//
// Everything is called on the owner's EventLoop, from the upstream's (or the
// set's) handlers; an owner need not be thread-safe. No function may throw.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "proxy/call.h"

namespace crihook::relay {

class Upstream;

class UpstreamOwner {
 public:
  // The owner's live call of id `id` (Call::down_id), or null once it ended.
  // The pointer is good until the owner next handles an event.
  virtual Call* find(int32_t id) = 0;

  // The runtime's response headers of `call` are complete (resp_headers; not
  // a trailers-only reply, which ends the call: onResponseEnd).
  virtual void onResponseHeaders(Call& call) = 0;
  // `len` bytes of the runtime's reply to `call`. The owner hands them back
  // to the upstream's windows (nghttp2_session_consume on call.up) once
  // taken; the upstream consumes nothing itself.
  virtual void onResponseData(Call& call, const uint8_t* data, size_t len) = 0;
  // The runtime's reply to `call` is complete: trailers, or trailers-only
  // (call.resp_trailers_only), or a status the relay put in their place.
  virtual void onResponseEnd(Call& call) = 0;
  // The runtime's stream of `call` closed (call.up is already cleared);
  // `error_code` is the HTTP/2 code of its RST_STREAM, NO_ERROR when it ended.
  virtual void onUpstreamStreamClosed(Call& call, uint32_t error_code) = 0;
  // `up` closed (the runtime went away, or the connection failed); its calls
  // are still mapped (Upstream::takeCalls) and are the owner's to answer.
  virtual void onUpstreamLost(Upstream& up, const std::string& why) = 0;
  // The runtime sent GOAWAY on `up`: it takes no new streams, its open ones
  // finish.
  virtual void onUpstreamGoaway(Upstream& up) = 0;
  // The upstream sent `n` more request bytes of `call`, one forwarded as it
  // comes (not intercepted): the owner credits kubelet's windows with them.
  virtual void consumeRequestBytes(Call& call, size_t n) = 0;
  // Counts one decoded field of the runtime's reply to `call`; false (nothing
  // counted) past the owner's caps: the upstream keeps no more of the block
  // and answers the call INTERNAL once it ends.
  virtual bool chargeReplyHeader(Call& call, size_t bytes) = 0;
  // Answers `call` with `status` in place of the runtime (and cancels its
  // runtime stream); nothing when the call was already answered.
  virtual void answer(Call& call, const absl::Status& status) = 0;
  // Queues a flush of what the owner has to send kubelet (window updates
  // and replies after the runtime's input).
  virtual void scheduleFlush() = 0;

  // For UpstreamSet: whether the owner has closed (a connect that completes
  // after that is let go), and the owner as a shared_ptr, which a connect in
  // flight holds so that the owner outlives its completion.
  virtual bool closed() const = 0;
  virtual std::shared_ptr<UpstreamOwner> sharedOwner() = 0;

 protected:
  // Not deleted through this interface: its owner's shared_ptr does that.
  ~UpstreamOwner() = default;
};

}  // namespace crihook::relay
