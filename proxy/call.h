#pragma once

// A stream crihookd answers itself (a refused request, an intercepted call,
// a call forwarded on the side connection while crihookd stands in for the
// runtime): what the relay knows of the kubelet stream and, once forwarded,
// of its stream on the side connection. Plain data, owned by its
// connection (Transparent, transparent.h) and touched only on that
// connection's EventLoop thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "base/grpc_wire.h"
#include "cri/interceptor.h"
#include "cri/lifecycle.h"
#include "proxy/byte_queue.h"
#include "proxy/h2_headers.h"
#include "proxy/request_check.h"

namespace crihook::relay {

using Clock = std::chrono::steady_clock;

class Upstream;

// A kubelet stream and, once forwarded, its stream on the side connection.
struct Call {
  int32_t down_id = 0;
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  std::string path;
  std::optional<InterceptedMethod> intercepted;

  // Request: kubelet -> runtime.
  Headers req_headers;
  RequestCheck check;
  size_t buffered = 0;  // message bytes charged to the buffer budgets
  ByteQueue req_body;
  bool req_end = false;
  grpcwire::FrameTracker req_frames;

  // Upstream side. `up` is cleared when the upstream stream closes;
  // `window_up` stays until the call ends: reply bytes still buffered here
  // must be handed back to that connection's window as kubelet takes them.
  std::shared_ptr<Upstream> up;
  int32_t up_id = 0;
  std::shared_ptr<Upstream> window_up;
  int32_t window_up_id = 0;
  bool retried = false;  // refused once by a draining backend and resubmitted

  // Response: runtime -> kubelet.
  size_t resp_header_bytes = 0;  // decoded, as the request's are counted
  bool resp_headers_over = false;
  // The final (not 1xx) response headers came: a HEADERS frame after them
  // is the trailers. nghttp2 files a final response that follows a 1xx one
  // under NGHTTP2_HCAT_HEADERS, as it files trailers.
  bool resp_final = false;
  Headers resp_headers;
  Headers resp_trailers;
  ByteQueue resp_body;
  bool resp_end = false;
  bool resp_trailers_only = false;
  grpcwire::FrameTracker resp_frames;
  bool answered = false;      // the reply's end (or a reset) went to kubelet
  absl::Status final_status;  // for the log line

  // Intercepted calls only: the stages' view, and the framed request as
  // forwarded (kept whole so a refused stream can be sent again).
  std::shared_ptr<InterceptedCall> ic;
  std::string forward_body;

  explicit Call(uint64_t max_bytes) : req_frames(max_bytes), resp_frames(max_bytes) {}
  bool passThrough() const { return !intercepted; }
};

// Makes the reply crihookd sends a trailers-only one carrying `status`, in
// place of whatever the runtime sent or would have sent. Reply bytes already
// buffered stay counted until the call ends.
inline void replyWithStatus(Call& call, const absl::Status& status, int http_status = 200) {
  call.resp_headers.clear();
  call.resp_trailers = trailersOnly(status, http_status);
  call.resp_trailers_only = true;
}

}  // namespace crihook::relay
