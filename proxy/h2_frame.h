#pragma once

// HTTP/2 framing (RFC 9113 section 4, 6) for a relay that forwards frames as
// they came and writes a few of its own (docs/transparent-relay.md): the
// frame header, a bounded incremental reader that splits a byte stream into
// frames without copying what it need not, and writers for the frames the
// relay itself sends. Pure code over caller-owned buffers: no I/O, no
// threads, no allocation beyond the reader's one bounded payload buffer.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace crihook::relay::h2 {

inline constexpr size_t kFrameHeaderBytes = 9;
// What a client sends before its first frame (RFC 9113 3.4).
inline constexpr std::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// The largest frame payload the 24-bit length field can carry, and the
// default (and floor) of SETTINGS_MAX_FRAME_SIZE.
inline constexpr uint32_t kMaxFrameLength = (1u << 24) - 1;
inline constexpr uint32_t kDefaultMaxFrameSize = 16384;
// The connection's and every stream's window before any SETTINGS or
// WINDOW_UPDATE (RFC 9113 6.9.2), and the most a window may grow to.
inline constexpr int64_t kDefaultWindow = 65535;
inline constexpr int64_t kMaxWindow = (int64_t{1} << 31) - 1;

enum class FrameType : uint8_t {
  kData = 0x0,
  kHeaders = 0x1,
  kPriority = 0x2,
  kRstStream = 0x3,
  kSettings = 0x4,
  kPushPromise = 0x5,
  kPing = 0x6,
  kGoaway = 0x7,
  kWindowUpdate = 0x8,
  kContinuation = 0x9,
};

namespace flags {
inline constexpr uint8_t kEndStream = 0x1;  // DATA, HEADERS
inline constexpr uint8_t kAck = 0x1;        // SETTINGS, PING
inline constexpr uint8_t kEndHeaders = 0x4;
inline constexpr uint8_t kPadded = 0x8;
inline constexpr uint8_t kPriority = 0x20;  // HEADERS
}  // namespace flags

// HTTP/2 error codes (RFC 9113 7) the relay sends.
namespace error {
inline constexpr uint32_t kNoError = 0x0;
inline constexpr uint32_t kProtocolError = 0x1;
inline constexpr uint32_t kInternalError = 0x2;
inline constexpr uint32_t kFlowControlError = 0x3;
inline constexpr uint32_t kFrameSizeError = 0x6;
inline constexpr uint32_t kRefusedStream = 0x7;
inline constexpr uint32_t kCancel = 0x8;
inline constexpr uint32_t kCompressionError = 0x9;
inline constexpr uint32_t kEnhanceYourCalm = 0xb;
}  // namespace error

// SETTINGS identifiers the relay reads.
namespace setting {
inline constexpr uint16_t kHeaderTableSize = 0x1;
inline constexpr uint16_t kEnablePush = 0x2;
inline constexpr uint16_t kMaxConcurrentStreams = 0x3;
inline constexpr uint16_t kInitialWindowSize = 0x4;
inline constexpr uint16_t kMaxFrameSize = 0x5;
inline constexpr uint16_t kMaxHeaderListSize = 0x6;
}  // namespace setting

struct FrameHeader {
  uint32_t length = 0;  // payload bytes
  FrameType type = FrameType::kData;
  uint8_t flags = 0;
  uint32_t stream_id = 0;  // the reserved bit cleared

  bool has(uint8_t flag) const { return (flags & flag) != 0; }
};

// The 9 bytes at `p` (which must hold them).
FrameHeader parseFrameHeader(const uint8_t* p);
std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(const FrameHeader& h);

// Splits one direction of a connection into frames as its bytes arrive, in
// reads of any size. Each frame is reported as its header, then either its
// payload in pieces as they come (the bytes are the caller's, not copied) or,
// when the caller asks for it whole, the whole payload at once (copied into
// the reader, at most `max_whole_payload` bytes). Not thread-safe.
class FrameReader {
 public:
  explicit FrameReader(size_t max_whole_payload) : max_whole_(max_whole_payload) {}

  struct Event {
    enum Kind {
      kNeedMore,  // `in` is used up
      kHeader,    // a frame begins: `header`, its 9 bytes in `bytes`
      kChunk,     // a piece of the payload (frame_end: its last)
      kWhole,     // the whole payload, after wantWhole()
    };
    Kind kind = kNeedMore;
    FrameHeader header;
    std::string_view bytes;  // valid until the next call
    bool frame_end = false;
  };

  // The next event, consuming from the front of `in`. After kHeader the
  // caller may call wantWhole() before the next call. A frame of length 0
  // ends with one empty kChunk (or kWhole).
  Event next(std::string_view& in);

  // The payload of the frame whose header was just reported is to come as
  // one kWhole event. INVALID_ARGUMENT (and nothing changes) when it is
  // longer than the reader keeps.
  absl::Status wantWhole();

  // Right after kHeader: forgets that header, so that the same 9 bytes fed
  // again are read as the frame's start (a caller that holds a frame back
  // and re-reads it later). FAILED_PRECONDITION elsewhere.
  absl::Status rewindHeader();

  // Between frames: no header or payload partly read.
  bool atFrameBoundary() const { return header_have_ == 0 && !in_payload_; }

 private:
  size_t max_whole_;
  std::array<uint8_t, kFrameHeaderBytes> header_bytes_{};
  size_t header_have_ = 0;
  FrameHeader header_;
  bool in_payload_ = false;
  bool whole_ = false;
  size_t payload_left_ = 0;
  std::string whole_buf_;
};

// The header block fragment of a HEADERS (padding and priority fields
// removed) or CONTINUATION frame's whole payload. INVALID_ARGUMENT naming the
// field when the padding does not fit (a PROTOCOL_ERROR, RFC 9113 6.2).
absl::StatusOr<std::string_view> headerBlockFragment(const FrameHeader& h,
                                                     std::string_view payload);

// The data of a DATA frame's whole payload, padding removed; INVALID_ARGUMENT
// when the padding does not fit.
absl::StatusOr<std::string_view> dataOf(const FrameHeader& h, std::string_view payload);

// SETTINGS entries of a (non-ACK) SETTINGS payload, in order;
// INVALID_ARGUMENT when its length is not a multiple of 6.
absl::StatusOr<std::vector<std::pair<uint16_t, uint32_t>>> settingsOf(std::string_view payload);

// A WINDOW_UPDATE's increment (0 is the peer's error to be refused by the
// caller); INVALID_ARGUMENT unless the payload is 4 bytes.
absl::StatusOr<uint32_t> windowIncrementOf(std::string_view payload);

// A GOAWAY's last stream id and error code; INVALID_ARGUMENT when shorter
// than 8 bytes.
absl::StatusOr<std::pair<uint32_t, uint32_t>> goawayOf(std::string_view payload);

// An RST_STREAM's error code; INVALID_ARGUMENT unless the payload is 4 bytes.
absl::StatusOr<uint32_t> rstStreamCodeOf(std::string_view payload);

// Writers: each appends whole frames to `out`.
// A frame as read: `h` (its length, as it came, is payload's) and `payload`.
void appendFrame(std::string& out, const FrameHeader& h, std::string_view payload);
// The ACK of a PING whose 8 bytes of opaque data are `opaque`.
void appendPingAck(std::string& out, std::string_view opaque);
void appendWindowUpdate(std::string& out, uint32_t stream_id, uint32_t increment);
void appendRstStream(std::string& out, uint32_t stream_id, uint32_t error_code);
void appendGoaway(std::string& out, uint32_t last_stream_id, uint32_t error_code,
                  std::string_view debug = {});
void appendSettings(std::string& out, const std::vector<std::pair<uint16_t, uint32_t>>& entries);
void appendSettingsAck(std::string& out);
// `data` as DATA frames of at most `max_frame` bytes each (one empty frame
// for empty data); END_STREAM on the last when `end_stream`.
void appendData(std::string& out, uint32_t stream_id, std::string_view data, bool end_stream,
                uint32_t max_frame);
// A header block as HEADERS, then CONTINUATION frames past `max_frame`
// bytes; END_STREAM on the HEADERS when `end_stream`.
void appendHeaderBlock(std::string& out, uint32_t stream_id, std::string_view block,
                       bool end_stream, uint32_t max_frame);

}  // namespace crihook::relay::h2
