#pragma once

// The relay's side of the intercept stages (cri/interceptor.h): what an
// intercepted call becomes before the Interceptor's pre stage, what is
// forwarded after it, and what the post stage sees of the runtime's reply.
// OwnStreams drives the stages (calls the Interceptor and takes its
// completions back onto the connection's loop); these functions only
// convert. Those that take a Call run on its connection's loop.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cri/interceptor.h"
#include "proxy/call.h"

namespace crihook::relay {

// What the pre stage needs of intercepted `call`, owned, so that it may run
// off the call's loop while the loop goes on (and the call may go): its
// path, method, deadline and the request as kubelet framed it.
struct RequestToDecode {
  std::string path;
  InterceptedMethod intercepted;
  Clock::time_point deadline;
  std::string body;
};
// Takes the request out of `call` (call.req_body is left empty).
RequestToDecode takeRequest(Call& call);

// Requests of this many bytes or more are decoded, and their adjusted copy
// encoded, off the connection's loop (RelayContext::offload): a 64 KiB
// message parses in about 0.1 ms, a 14 MB one in tens of milliseconds that
// every other call on the loop would wait.
inline constexpr size_t kDecodeOffLoopBytes = 64 << 10;

// The stages' view of an intercepted request: method, api, deadline, the
// decoded request and who it is about. Errors are the status to answer
// kubelet with, naming the path: the framing's code (one message, within
// its limit), or INVALID_ARGUMENT when the message does not decode. Any
// thread.
absl::StatusOr<std::shared_ptr<InterceptedCall>> decodeInterceptedRequest(
    const RequestToDecode& request);

// After the pre stage let a call through: what goes to the runtime, framed:
// the adjusted request when a hook changed it, else `original` as kubelet
// sent it. RESOURCE_EXHAUSTED when the adjusted request is over
// `max_message_bytes`. Any thread.
absl::StatusOr<std::string> forwardedBody(const InterceptedCall& ic, std::string original,
                                          uint64_t max_message_bytes);

// Sets call.forward_body to `body` and gives the runtime what is left of the
// caller's deadline in grpc-timeout; DEADLINE_EXCEEDED when the stage used
// the deadline up. On the call's loop.
absl::Status prepareForward(Call& call, std::string body);

// Before the post stage: the runtime's status, and its reply decoded when it
// is OK (left null when it does not decode), into call.ic; notes the id the
// reply created in the call's identity.
void decodeInterceptedReply(Call& call);

}  // namespace crihook::relay
