#pragma once

// The streams one kubelet connection relays to the runtime frame by frame
// (docs/transparent-relay.md): what crihookd knows of each — its method,
// when it began, both directions' gRPC messages against
// server.max_message_bytes, whether the reply's headers went — for the
// message limit, the metrics and the calls in flight, and for the end
// crihookd writes kubelet when the runtime cannot (a message over the
// limit, trailers in a request, the runtime gone). Bookkeeping only: the
// connection (Transparent) reads and writes the frames. On the connection's
// loop thread; not thread-safe.

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "base/grpc_wire.h"
#include "proxy/call.h"
#include "proxy/relay.h"

namespace crihook::relay {

class RelayedStreams {
 public:
  struct Stream {
    explicit Stream(uint64_t max_message_bytes)
        : request(max_message_bytes), reply(max_message_bytes) {}
    std::string path;
    Clock::time_point start = Clock::now();
    // The gRPC messages of both directions, against the message limit.
    grpcwire::FrameTracker request;
    grpcwire::FrameTracker reply;
    bool reply_headers = false;  // the reply's headers went to kubelet
    // crihookd ended the stream (cut()): what still comes for it is dropped
    // (DATA) or passed for HPACK's sake (header blocks).
    bool cut = false;
    Clock::time_point cut_at{};
  };

  // `ctx` (the message limit, the calls in flight, the metrics) outlives it.
  explicit RelayedStreams(RelayContext& ctx) : ctx_(ctx) {}

  bool empty() const { return streams_.empty(); }
  // Stream `id`, open or cut; null when it is not relayed.
  Stream* find(uint32_t id);
  // kubelet's request on `id` went to the runtime: a call in flight.
  Stream& open(uint32_t id, std::string path);
  // The end of `id` with `status` (the runtime's, or why it ended
  // otherwise): recorded in the metrics, no longer in flight, forgotten. A
  // cut stream (recorded when cut) is only forgotten.
  void end(uint32_t id, const absl::Status& status);
  // crihookd ends open stream `id` itself with `status`: recorded now, no
  // longer in flight, kept cut until the runtime's end or kZombieLinger.
  // Appends what kubelet reads as the stream's end to `kubelet`: RST_STREAM
  // `reset_code` when it is not 0, else appendEnd's. False (nothing done)
  // when `id` is not open.
  bool cut(uint32_t id, const absl::Status& status, uint32_t reset_code, uint32_t max_frame,
           std::string& kubelet);
  // What crihookd writes kubelet to end stream `id` with `status`:
  // trailers-only when no reply headers went; trailers when the reply went
  // up to a message's edge (or was cut cleanly at the limit); else
  // RST_STREAM INTERNAL_ERROR (a message half sent cannot be ended with a
  // status). Header blocks in literals (literalBlock), in frames of at most
  // `max_frame` bytes.
  static void appendEnd(std::string& frames, uint32_t id, const Stream& s,
                        const absl::Status& status, uint32_t max_frame);
  // The streams above `above`, open or cut, in order.
  std::vector<uint32_t> idsAbove(uint32_t above) const;
  // Forgets the streams cut kZombieLinger or longer before `now`.
  void dropCut(Clock::time_point now);
  // The connection closed: every open stream ends CANCELLED.
  void closeAll();

 private:
  RelayContext& ctx_;
  std::unordered_map<uint32_t, Stream> streams_;
};

}  // namespace crihook::relay
