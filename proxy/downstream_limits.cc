// Downstream: the limits against a hostile client. The timeouts (preface,
// idle, request) run on one tick per connection; the budgets count what the
// connection and the process hold now.

#include <algorithm>

#include "base/text.h"
#include "proxy/downstream.h"

namespace crihook::relay {

void Downstream::armTick() {
  // A weak reference: a pending tick must not keep a closed connection.
  tick_ = loop().runAfter(tickInterval(ctx_.limits), [weak = weak_from_this()] {
    if (auto self = weak.lock(); self && !self->closed())
      static_cast<Downstream*>(self.get())->onTick();
  });
}

void Downstream::onTick() {
  const auto now = Clock::now();
  const RelayLimits& l = ctx_.limits;
  if (!settings_seen_ && now - accepted_ >= l.preface_timeout) {
    warnNoPreface(ctx_);
    fail("no HTTP/2 preface within server.preface_timeout");
    return;
  }
  if (idle_goaway_) {
    // GOAWAY was sent a tick ago and the peer does not take it: close.
    fail("idle, and the GOAWAY not taken");
    return;
  }
  if (calls_.empty() && settings_seen_ && now - idle_since_ >= l.idle_timeout) {
    // As grpc-go's MaxConnectionIdle: GOAWAY, then the connection closes
    // once it is sent (flush sees a finished session).
    ctx_.log->debug("closing a connection idle for server.idle_timeout ({}ms)",
                    l.idle_timeout.count());
    idle_goaway_ = true;
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
    flush();
    if (!closed()) armTick();
    return;
  }
  std::vector<int32_t> late;
  for (const auto& [id, call] : calls_) {
    if (now - call->start < l.request_timeout || call->answered) continue;
    if (!call->headers_done) {
      // HTTP/2 lets nothing else through while a header block is open: the
      // whole connection is stuck on it.
      warnHeaderBlockLate(ctx_, static_cast<uint32_t>(id));
      fail("header block not complete within server.request_timeout");
      return;
    }
    if (!call->passThrough() && !call->req_end) late.push_back(id);
  }
  for (int32_t id : late) {
    if (Call* call = find(id)) {
      answer(*call, absl::DeadlineExceededError(
                        cat("crihookd: ", call->path,
                            ": request message not complete within server.request_timeout (",
                            l.request_timeout.count(), "ms)")));
      endRequestEarly(*call);
    }
  }
  armTick();
}

absl::Status Downstream::chargeBuffer(Call& call, size_t bytes, std::string_view what) {
  return budget_.chargeBuffer(ctx_, call, bytes, what);
}

bool Downstream::chargeReplyHeader(Call& call, size_t bytes) {
  return budget_.chargeReplyHeader(ctx_, call, bytes);
}

void Downstream::releaseLimits(Call& call) { budget_.release(ctx_, call); }

}  // namespace crihook::relay
