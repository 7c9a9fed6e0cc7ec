#pragma once

// What one kubelet connection's calls hold against the relay's limits
// (RelayLimits, relay.h): decoded header fields, both directions, and the
// message bytes of intercepted calls buffered whole. Charged as bytes
// arrive, released with the call. The streams crihookd answers (OwnStreams)
// keep one per connection; on its loop thread only. The process-wide tallies
// in RelayContext move with it (atomics). With it, what the relay's parts
// share about limits and calls' ends.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "base/grpc_wire.h"
#include "proxy/call.h"
#include "proxy/relay.h"

namespace crihook::relay {

struct CallBudget {
  size_t header_bytes = 0;      // decoded fields held, both directions
  uint64_t buffered_bytes = 0;  // intercepted calls' message bytes held

  // What the connection may still hold of decoded request fields.
  size_t headerRoom() const;
  // `bytes` of decoded request fields kept for `call` (its check.list_bytes
  // already counts them).
  void chargeRequestHeaders(RelayContext& ctx, size_t bytes);
  // One decoded field of the runtime's reply to `call`; false (nothing
  // counted) past the per-reply or the connection's cap.
  bool chargeReplyHeader(RelayContext& ctx, Call& call, size_t bytes);
  // `bytes` of `call`'s message (`what`: "its request", "the runtime's
  // reply"); RESOURCE_EXHAUSTED naming the limit when the connection's or
  // the process's budget would pass it (nothing is charged then).
  absl::Status chargeBuffer(RelayContext& ctx, Call& call, size_t bytes, std::string_view what);
  // Everything `call` holds, given back.
  void release(RelayContext& ctx, Call& call);
};

// The limits' timeouts (preface, idle, request) are checked on one tick per
// connection, a quarter of the shortest, so each fires at most 25% late
// (within 10 ms .. 1 s).
std::chrono::milliseconds tickInterval(const RelayLimits& limits);

// A stream crihookd ended while its peer was still sending is kept this long
// after its RST_STREAM, so that the peer's frames already on their way are
// known (dropped, or passed for HPACK's sake) rather than taken for a new
// stream or forwarded to a runtime that never saw it.
inline constexpr std::chrono::seconds kZombieLinger{2};

// A call that ended with `code`, started at `start`, in the metrics
// (RelayContext::call_metrics, when set). Every call is recorded once:
// relayed ones by RelayedStreams, the ones crihookd answers by OwnStreams.
void recordCall(RelayContext& ctx, std::string_view path, absl::StatusCode code,
                Clock::time_point start);

// The warnings of a connection cut by a timeout, at most one per
// RelayContext::timeout_log interval, with how many were held back.
void warnNoPreface(RelayContext& ctx);
void warnHeaderBlockLate(RelayContext& ctx, uint32_t stream);

// RESOURCE_EXHAUSTED for a gRPC message over server.max_message_bytes
// (relayed and own streams, both directions): `direction` is "request" or "response",
// `frames` the tracker that found it too large.
absl::Status messageTooLarge(const RelayContext& ctx, std::string_view direction,
                             const grpcwire::FrameTracker& frames);

// A request stream refused (`why`), at most one line per
// RelayContext::refusal_log interval (a client can have any number of its
// requests refused), naming the stream and its :path (quoted; "-" when it
// has none), with how many were held back.
void warnRefused(RelayContext& ctx, uint32_t stream, const std::string* path, std::string_view why);

}  // namespace crihook::relay
