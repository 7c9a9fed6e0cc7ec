#pragma once

// NRI's wire below the protobuf messages: its multiplexer (NRI v0.6.1,
// pkg/net/multiplex), which carries several byte streams over the one Unix
// socket between the runtime and a plugin, and ttrpc's message framing
// (ttrpc v1.2.5, channel.go) inside each of those streams. Pure byte
// handling: no I/O, no threads; each object belongs to one connection.
//
// A mux frame: connection id (u32, big-endian), payload length (u32), the
// payload, a piece of that connection's byte stream. A ttrpc message: length
// (u32, of the payload), stream id (u32), type (u8), flags (u8), then the
// payload (ttrpc.proto's Request or Response, serialised).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace crihook::nri {

// The mux connection of each ttrpc service: the runtime calls the plugin's
// on 1; the plugin calls the runtime's on 2. 0 is reserved.
inline constexpr uint32_t kPluginServiceConn = 1;
inline constexpr uint32_t kRuntimeServiceConn = 2;

inline constexpr size_t kMuxHeaderBytes = 8;
// The longest mux payload a peer sends: NRI's writer refuses more.
inline constexpr size_t kMaxMuxPayload = 16 << 20;
// What crihookd puts in one mux frame. A Go peer reads the frame that
// starts a ttrpc message into a 4096-byte buffer and ends the connection
// when the frame is longer; no frame carries bytes of two messages.
inline constexpr size_t kMaxMuxWrite = 4096;

inline constexpr size_t kTtrpcHeaderBytes = 10;
// ttrpc's limit on one message's payload, both ways.
inline constexpr size_t kMaxTtrpcMessage = 4 << 20;

enum class MessageType : uint8_t { kRequest = 1, kResponse = 2, kData = 3 };

struct Message {
  uint32_t conn = 0;  // the mux connection it came on or goes to
  uint32_t stream = 0;
  uint8_t type = 0;  // a MessageType, or what the peer sent
  uint8_t flags = 0;
  std::string payload;
  // The peer's message was longer than kMaxTtrpcMessage: its payload was
  // dropped (ttrpc answers such a request RESOURCE_EXHAUSTED).
  bool too_large = false;
};

// Appends `message` to `out` as ttrpc frames it for `message.conn`, cut into
// mux frames of at most kMaxMuxWrite bytes. INVALID_ARGUMENT when the
// payload is over kMaxTtrpcMessage or the connection is 0; `out` is then
// unchanged.
absl::Status appendMessage(std::string& out, const Message& message);

// Reads the socket's bytes back into ttrpc messages, per mux connection.
class Demux {
 public:
  // Consumes all of `bytes` (one read from the socket), appending each
  // message completed by them to `out`, in order. Bytes for a connection
  // other than 1 and 2 are dropped, as NRI's mux drops what comes for a
  // connection it has not opened. INVALID_ARGUMENT naming the fault (a frame
  // for connection 0, a mux payload over kMaxMuxPayload): the connection is
  // then to be closed; the Demux is unusable.
  absl::Status feed(std::string_view bytes, std::vector<Message>& out);

 private:
  struct Stream {
    std::string buffer;  // a ttrpc message's header and payload so far
    size_t skip = 0;     // payload bytes of a too-large message left to drop
    Message skipped;     // its header, reported when the last is dropped
  };
  void take(uint32_t conn, std::string_view piece, std::vector<Message>& out);

  std::string header_;  // a mux header in part
  uint32_t conn_ = 0;
  size_t payload_left_ = 0;
  Stream streams_[2];  // connections 1 and 2
  std::string broken_;
};

}  // namespace crihook::nri
