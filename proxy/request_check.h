#pragma once

// The checks a request's header block passes before it is relayed, and the
// header-size caps of both directions.
//
// nghttp2's HTTP messaging rules are off on the kubelet side (they refuse a
// Unix socket path as :authority, which kubelet <= 1.29 sends), so crihookd
// checks a request's header block itself, the way grpc-go's server does:
// golang.org/x/net/http2 Framer.readMetaFrame and
// MetaHeadersFrame.checkPseudos (RST_STREAM PROTOCOL_ERROR), then
// grpc-go internal/transport http2_server.go operateHeaders (RST_STREAM or an
// early trailers-only answer with an HTTP status), then server.go
// handleStream (UNIMPLEMENTED for a malformed method name).
//
// Pure functions over their arguments: safe from any thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "base/grpc_wire.h"
#include "proxy/h2_headers.h"

namespace crihook::relay {

// One header list's cap and HTTP/2's per-field overhead (base/grpc_wire.h).
using grpcwire::kHeaderFieldOverhead;
using grpcwire::kMaxHeaderListBytes;
// Decoded header fields held for the open streams of one connection, both
// directions (kubelet's requests and the runtime's replies). Without it the
// per-stream cap still lets one connection hold 1024 streams x 64 KiB = 64 MiB.
// 1024 streams of kubelet's headers (well under 1 KiB each) fit.
inline constexpr size_t kMaxConnectionHeaderBytes = 1 << 20;

// What the checks found while the header block was decoded, field by field.
struct RequestCheck {
  size_t list_bytes = 0;
  uint32_t pseudo = 0;
  bool saw_regular = false;
  bool truncated = false;        // over kMaxHeaderListBytes: later fields are not kept
  bool connection_full = false;  // over kMaxConnectionHeaderBytes: later fields are not kept
  std::string protocol_error;    // the first malformed field; later fields are not kept

  bool stopped() const { return truncated || connection_full || !protocol_error.empty(); }
};

// One decoded field of a request's header block. Returns whether to keep it;
// `connection_room` is what the connection may still hold. Once a field is
// refused (check.stopped()) no later one is kept.
bool checkRequestField(RequestCheck& check, std::string_view name, std::string_view value,
                       size_t connection_room);

// How a request that passed the field checks is refused, if it is.
struct RequestRefusal {
  uint32_t reset_code = 0;  // RST_STREAM with this code, or else:
  int http_status = 200;    // a trailers-only answer
  absl::Status status;
  std::string why;  // for the log
};

// The checks over the whole header block, in grpc-go's order: nullopt when
// the request is to be relayed.
std::optional<RequestRefusal> refusalOf(const RequestCheck& check, const Headers& headers);

}  // namespace crihook::relay
