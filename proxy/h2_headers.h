#pragma once

// HTTP/2 header lists as the relay holds them, and the gRPC meaning of a few
// of their fields (status trailers, a request made canonical). Pure functions, no
// state: safe from any thread.

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace crihook::relay {

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

// nghttp2's view of `headers`: points into them, valid while they live
// unchanged.
std::vector<nghttp2_nv> toNv(const Headers& headers);

// The value of the first field named `name`, or null.
const std::string* findHeader(const Headers& headers, std::string_view name);

// grpc-status (and grpc-message when the status has one, bounded and
// percent-encoded) for `status`.
Headers statusTrailers(const absl::Status& status);

// A trailers-only reply: :status, content-type and statusTrailers(status).
Headers trailersOnly(const absl::Status& status, int http_status = 200);

// The status a reply's trailers (or trailers-only headers) carry
// (grpcwire::statusOfFields: UNKNOWN when they have no grpc-status).
absl::Status statusFrom(const Headers& trailers);

// Makes a request that grpc-go's server accepts one that every gRPC server
// accepts: ":path" with its leading '/', connection-specific fields dropped,
// :scheme, :authority and "te: trailers" added when missing.
void canonicalise(Headers& headers);
// The caller's deadline its grpc-timeout sets for a call started at
// `start`; time_point::max() with none, or one past what the clock holds
// (up to 8 digits of hours), not one wrapped into the past.
std::chrono::steady_clock::time_point grpcDeadline(const Headers& headers,
                                                   std::chrono::steady_clock::time_point start);

// Whether canonicalise would leave `headers` as they are (kubelet's requests).
bool isCanonical(const Headers& headers);

}  // namespace crihook::relay
