#pragma once

// Unary gRPC calls to a server on a Unix socket: HTTP/2 with prior knowledge
// (h2c) on nghttp2, gRPC's mapping from base/grpc_wire.h. What crihookd
// needs as a gRPC client (a hook server's answer, the runtime's sandboxes
// and version) without the gRPC library: linking it mapped libgrpc,
// OpenSSL, c-ares and re2 into every crihookd before it served a call
// (about 5 MiB of its idle RSS), for a few unary calls.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace crihook {

struct GrpcChannelOptions {
  // The largest reply message taken; a bigger one fails the call with
  // RESOURCE_EXHAUSTED (gRPC's default receive limit is the same 4 MiB).
  size_t max_reply_bytes = 4 << 20;
  // Connections kept for the next call once theirs ended cleanly (0: each
  // call connects afresh), and for how long at most.
  size_t max_idle_connections = 4;
  std::chrono::milliseconds idle_timeout{10000};
};

// A call takes an idle connection of the channel's or makes one; a call
// never waits for another. An idle connection is watched by one thread of
// the process (started with the first one): it is closed as soon as its
// server sends anything (a GOAWAY) or hangs up, so a server shutting down
// gracefully is not kept waiting (gRPC C++'s Server::Shutdown() waited 20 s
// for a connection nobody read), and after idle_timeout.
class GrpcChannel {
 public:
  // `socket_path` is a filesystem path (no "unix://"). Connects on the first
  // call, not here.
  explicit GrpcChannel(std::string socket_path, GrpcChannelOptions options = {});
  ~GrpcChannel();  // closes its idle connections; no call may still run
  GrpcChannel(const GrpcChannel&) = delete;
  GrpcChannel& operator=(const GrpcChannel&) = delete;

  // Calls `method` (a gRPC path: "/runtime.v1.RuntimeService/Version") with
  // the serialized `request` and returns the serialized reply message.
  // Blocks the calling thread until the reply or `deadline`, which the server
  // is told as grpc-timeout (time_point::max(): none). Errors: the server's
  // grpc-status and grpc-message; UNAVAILABLE when the socket cannot be
  // reached or the connection is lost before the reply; DEADLINE_EXCEEDED;
  // RESOURCE_EXHAUSTED for a reply above max_reply_bytes or header fields
  // above 64 KiB; INTERNAL (or gRPC's mapping of an HTTP status or
  // RST_STREAM) for a reply that breaks gRPC's HTTP/2 mapping.
  // Messages say what failed, not where: the caller names the server.
  // Thread-safe.
  absl::StatusOr<std::string> call(std::string_view method, std::string_view request,
                                   std::chrono::steady_clock::time_point deadline) const;

  const std::string& socketPath() const { return path_; }

 private:
  const std::string path_;
  const GrpcChannelOptions options_;
};

}  // namespace crihook
