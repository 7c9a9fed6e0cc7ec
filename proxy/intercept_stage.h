#pragma once

// The relay's side of the intercept stages (cri/interceptor.h): what an
// intercepted call becomes before the Interceptor's pre stage, what is
// forwarded after it, and what the post stage sees of the runtime's reply.
// Downstream drives the stages (calls the Interceptor and takes its
// completions back onto the connection's executor); these functions only
// convert. They touch nothing but `call`: run them on its connection's
// io_context.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cri/interceptor.h"
#include "proxy/call.h"

namespace crihook::relay {

// The stages' view of intercepted `call`, whose request is buffered whole in
// call.req_body: method, api, deadline, the decoded request and who it is
// about. Errors are the status to answer kubelet with, naming the path: the
// framing's code (one message, within its limit), or INVALID_ARGUMENT when
// the message does not decode.
absl::StatusOr<std::shared_ptr<InterceptedCall>> decodeInterceptedRequest(const Call& call);

// After the pre stage let `call` through: sets call.forward_body (the
// adjusted request, framed, or the bytes as kubelet sent them) and gives the
// runtime what is left of the caller's deadline in grpc-timeout. Errors are
// the status to answer with: RESOURCE_EXHAUSTED when the adjusted request is
// over `max_message_bytes`, DEADLINE_EXCEEDED when the stage used the
// deadline up.
absl::Status prepareForward(Call& call, uint64_t max_message_bytes);

// Before the post stage: the runtime's status, and its reply decoded when it
// is OK (left null when it does not decode), into call.ic; notes the id the
// reply created in the call's identity.
void decodeInterceptedReply(Call& call);

}  // namespace crihook::relay
