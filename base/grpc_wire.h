#pragma once

// The parts of gRPC's HTTP/2 mapping that crihookd needs without the gRPC
// library: message framing, grpc-timeout, grpc-status/grpc-message trailers.
// Pure functions and small value types; no I/O, no threads.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace crihook::grpcwire {

inline constexpr size_t kFrameHeaderBytes = 5;  // compressed flag + 32-bit length

// Decoded size of one header list (a request's, or a reply's headers and
// trailers), counted as HTTP/2 counts it (name + value + 32 per field) and
// advertised in SETTINGS_MAX_HEADER_LIST_SIZE; the cap of the relay (both
// directions) and of crihookd's own gRPC client. HPACK lets a 16 KiB HEADERS
// frame decode to ~48 MB, so the cap is what keeps one stream's headers
// small. kubelet's real request headers are well under 1 KiB; nghttp2's
// decoder ends the whole connection on any single field over 64 KiB
// (NGHTTP2_HD_MAX_NV) anyway. grpc-go's server defaults to 16 MiB.
inline constexpr size_t kMaxHeaderListBytes = 64 << 10;
inline constexpr size_t kHeaderFieldOverhead = 32;  // RFC 9113 6.5.2

// Follows the length-prefixed messages of one direction of a stream as its
// bytes go by, without copying them, to enforce the message size limit and to
// know whether the stream stands at a message boundary.
class FrameTracker {
 public:
  explicit FrameTracker(uint64_t max_message_bytes) : max_(max_message_bytes) {}

  // Consumes `len` bytes. Returns how many of them may be forwarded: all of
  // them, or fewer when a message header announces more than the limit (the
  // bytes up to that header are whole messages and may still go out).
  size_t feed(const uint8_t* data, size_t len);

  bool tooLarge() const { return too_large_; }
  // After tooLarge(): true when everything forwarded ended on a message
  // boundary, so the stream may still be ended with a status.
  bool cleanCut() const { return too_large_ && !split_header_; }
  uint64_t announcedBytes() const { return announced_; }
  bool atBoundary() const { return header_have_ == 0 && remaining_ == 0; }
  uint64_t messages() const { return messages_; }

 private:
  uint64_t max_;
  uint8_t header_[kFrameHeaderBytes] = {};
  size_t header_have_ = 0;
  uint64_t remaining_ = 0;  // payload bytes still to come of the current message
  uint64_t announced_ = 0;
  uint64_t messages_ = 0;
  bool too_large_ = false;
  bool split_header_ = false;
};

// One whole message from a buffered unary body. Fails (INVALID_ARGUMENT) on
// truncation, on more than one message, and (UNIMPLEMENTED) on a compressed
// message, which crihookd does not decode.
absl::StatusOr<std::string_view> singleMessage(std::string_view body);

// Prepends the 5-byte gRPC header to a serialized message.
std::string frame(std::string_view message);

// grpc-timeout header value ("100m", "5S", ...) <-> duration. Parse returns
// nullopt on a malformed value, which gRPC treats as no deadline.
std::optional<std::chrono::nanoseconds> parseTimeout(std::string_view value);
std::string formatTimeout(std::chrono::nanoseconds timeout);

// grpc-message is percent-encoded on the wire.
std::string percentEncode(std::string_view message);
std::string percentDecode(std::string_view message);

// grpc-status numbers are absl::StatusCode numbers.
inline int statusNumber(absl::StatusCode code) { return static_cast<int>(code); }

// The status that a reply's grpc-status and grpc-message fields (either may
// be null) carry, read as grpc-go reads them: no grpc-status is UNKNOWN, one
// that is not a decimal number is INTERNAL, a number gRPC does not define is
// UNKNOWN; the message is percent-decoded.
absl::Status statusOfFields(const std::string* grpc_status, const std::string* grpc_message);

// How a gRPC client reads an RST_STREAM's HTTP/2 error code (RFC 9113
// section 7; gRPC's doc/PROTOCOL-HTTP2.md "Errors").
absl::StatusCode codeOfReset(uint32_t http2_error_code);

// How a gRPC client reads a reply whose :status is not 200, when it carries
// no grpc-status (gRPC's doc/http-grpc-status-mapping.md).
absl::StatusCode codeOfHttpStatus(int http_status);

}  // namespace crihook::grpcwire
