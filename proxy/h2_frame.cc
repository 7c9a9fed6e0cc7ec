#include "proxy/h2_frame.h"

#include <algorithm>

#include "base/big_endian.h"
#include "base/text.h"

namespace crihook::relay::h2 {

namespace {

void appendHeader(std::string& out, uint32_t length, FrameType type, uint8_t fl,
                  uint32_t stream_id) {
  auto h = encodeFrameHeader({length, type, fl, stream_id});
  out.append(reinterpret_cast<const char*>(h.data()), h.size());
}

const uint8_t* bytesOf(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Removes a padded frame's pad length byte and its padding.
absl::StatusOr<std::string_view> unpad(const FrameHeader& h, std::string_view payload,
                                       std::string_view frame) {
  if (!h.has(flags::kPadded)) return payload;
  if (payload.empty()) return absl::InvalidArgumentError(cat(frame, ": PADDED with no pad length"));
  const size_t pad = static_cast<uint8_t>(payload[0]);
  payload.remove_prefix(1);
  if (pad > payload.size()) {
    return absl::InvalidArgumentError(
        cat(frame, ": pad length ", pad, " is more than the ", payload.size(), " bytes left"));
  }
  payload.remove_suffix(pad);
  return payload;
}

}  // namespace

FrameHeader parseFrameHeader(const uint8_t* p) {
  FrameHeader h;
  h.length = (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
  h.type = static_cast<FrameType>(p[3]);
  h.flags = p[4];
  h.stream_id = readBigEndian32(p + 5) & 0x7fffffffu;
  return h;
}

std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(const FrameHeader& h) {
  return {static_cast<uint8_t>(h.length >> 16),
          static_cast<uint8_t>(h.length >> 8),
          static_cast<uint8_t>(h.length),
          static_cast<uint8_t>(h.type),
          h.flags,
          static_cast<uint8_t>((h.stream_id >> 24) & 0x7f),
          static_cast<uint8_t>(h.stream_id >> 16),
          static_cast<uint8_t>(h.stream_id >> 8),
          static_cast<uint8_t>(h.stream_id)};
}

FrameReader::Event FrameReader::next(std::string_view& in) {
  Event ev;
  if (!in_payload_) {
    const size_t take = std::min(in.size(), kFrameHeaderBytes - header_have_);
    std::copy_n(in.data(), take, header_bytes_.begin() + static_cast<ptrdiff_t>(header_have_));
    header_have_ += take;
    in.remove_prefix(take);
    if (header_have_ < kFrameHeaderBytes) return ev;
    header_have_ = 0;
    header_ = parseFrameHeader(header_bytes_.data());
    in_payload_ = true;
    whole_ = false;
    payload_left_ = header_.length;
    ev.kind = Event::kHeader;
    ev.header = header_;
    ev.bytes =
        std::string_view(reinterpret_cast<const char*>(header_bytes_.data()), header_bytes_.size());
    return ev;
  }
  ev.header = header_;
  const size_t take = std::min(in.size(), payload_left_);
  if (whole_) {
    whole_buf_.append(in.data(), take);
    in.remove_prefix(take);
    payload_left_ -= take;
    if (payload_left_ > 0) return ev;  // kNeedMore
    in_payload_ = false;
    ev.kind = Event::kWhole;
    ev.bytes = whole_buf_;
    ev.frame_end = true;
    return ev;
  }
  if (take == 0 && payload_left_ > 0) return ev;  // kNeedMore
  ev.kind = Event::kChunk;
  ev.bytes = in.substr(0, take);
  in.remove_prefix(take);
  payload_left_ -= take;
  ev.frame_end = payload_left_ == 0;
  if (ev.frame_end) in_payload_ = false;
  return ev;
}

absl::Status FrameReader::wantWhole() {
  if (!in_payload_ || payload_left_ != header_.length) {
    return absl::FailedPreconditionError("wantWhole: no frame header was just read");
  }
  if (header_.length > max_whole_) {
    return absl::InvalidArgumentError(cat("frame of type ", static_cast<int>(header_.type),
                                          " on stream ", header_.stream_id, ": ", header_.length,
                                          " bytes, more than the ", max_whole_, " read whole"));
  }
  whole_ = true;
  whole_buf_.clear();
  whole_buf_.reserve(header_.length);
  return absl::OkStatus();
}

absl::Status FrameReader::rewindHeader() {
  if (!in_payload_ || payload_left_ != header_.length || whole_) {
    return absl::FailedPreconditionError("rewindHeader: no frame header was just read");
  }
  in_payload_ = false;
  header_have_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> headerBlockFragment(const FrameHeader& h,
                                                     std::string_view payload) {
  if (h.type == FrameType::kContinuation) return payload;
  auto unpadded = unpad(h, payload, "HEADERS");
  if (!unpadded.ok()) return unpadded.status();
  std::string_view block = *unpadded;
  if (h.has(flags::kPriority)) {
    if (block.size() < 5) return absl::InvalidArgumentError("HEADERS: PRIORITY fields cut short");
    block.remove_prefix(5);
  }
  return block;
}

absl::StatusOr<std::string_view> dataOf(const FrameHeader& h, std::string_view payload) {
  return unpad(h, payload, "DATA");
}

absl::StatusOr<std::vector<std::pair<uint16_t, uint32_t>>> settingsOf(std::string_view payload) {
  if (payload.size() % 6 != 0) {
    return absl::InvalidArgumentError(
        cat("SETTINGS: payload of ", payload.size(), " bytes is not a multiple of 6"));
  }
  std::vector<std::pair<uint16_t, uint32_t>> entries;
  entries.reserve(payload.size() / 6);
  for (size_t i = 0; i < payload.size(); i += 6) {
    const uint8_t* p = bytesOf(payload) + i;
    entries.emplace_back(static_cast<uint16_t>((p[0] << 8) | p[1]), readBigEndian32(p + 2));
  }
  return entries;
}

absl::StatusOr<uint32_t> windowIncrementOf(std::string_view payload) {
  if (payload.size() != 4) {
    return absl::InvalidArgumentError(
        cat("WINDOW_UPDATE: payload of ", payload.size(), " bytes, not 4"));
  }
  return readBigEndian32(bytesOf(payload)) & 0x7fffffffu;
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> goawayOf(std::string_view payload) {
  if (payload.size() < 8) {
    return absl::InvalidArgumentError(
        cat("GOAWAY: payload of ", payload.size(), " bytes, fewer than 8"));
  }
  return std::pair<uint32_t, uint32_t>(readBigEndian32(bytesOf(payload)) & 0x7fffffffu,
                                       readBigEndian32(bytesOf(payload) + 4));
}

absl::StatusOr<uint32_t> rstStreamCodeOf(std::string_view payload) {
  if (payload.size() != 4) {
    return absl::InvalidArgumentError(
        cat("RST_STREAM: payload of ", payload.size(), " bytes, not 4"));
  }
  return readBigEndian32(bytesOf(payload));
}

void appendFrame(std::string& out, const FrameHeader& h, std::string_view payload) {
  auto hb = encodeFrameHeader(h);
  out.append(reinterpret_cast<const char*>(hb.data()), hb.size());
  out.append(payload);
}

void appendPingAck(std::string& out, std::string_view opaque) {
  appendHeader(out, 8, FrameType::kPing, flags::kAck, 0);
  out.append(opaque.substr(0, 8));
}

void appendWindowUpdate(std::string& out, uint32_t stream_id, uint32_t increment) {
  appendHeader(out, 4, FrameType::kWindowUpdate, 0, stream_id);
  appendBigEndian32(out, increment & 0x7fffffffu);
}

void appendRstStream(std::string& out, uint32_t stream_id, uint32_t error_code) {
  appendHeader(out, 4, FrameType::kRstStream, 0, stream_id);
  appendBigEndian32(out, error_code);
}

void appendGoaway(std::string& out, uint32_t last_stream_id, uint32_t error_code,
                  std::string_view debug) {
  appendHeader(out, static_cast<uint32_t>(8 + debug.size()), FrameType::kGoaway, 0, 0);
  appendBigEndian32(out, last_stream_id & 0x7fffffffu);
  appendBigEndian32(out, error_code);
  out.append(debug);
}

void appendSettings(std::string& out, const std::vector<std::pair<uint16_t, uint32_t>>& entries) {
  appendHeader(out, static_cast<uint32_t>(6 * entries.size()), FrameType::kSettings, 0, 0);
  for (const auto& [id, value] : entries) {
    out.push_back(static_cast<char>(id >> 8));
    out.push_back(static_cast<char>(id));
    appendBigEndian32(out, value);
  }
}

void appendSettingsAck(std::string& out) {
  appendHeader(out, 0, FrameType::kSettings, flags::kAck, 0);
}

void appendData(std::string& out, uint32_t stream_id, std::string_view data, bool end_stream,
                uint32_t max_frame) {
  do {
    const size_t n = std::min<size_t>(data.size(), max_frame);
    const bool last = n == data.size();
    appendHeader(out, static_cast<uint32_t>(n), FrameType::kData,
                 last && end_stream ? flags::kEndStream : 0, stream_id);
    out.append(data.substr(0, n));
    data.remove_prefix(n);
  } while (!data.empty());
}

void appendHeaderBlock(std::string& out, uint32_t stream_id, std::string_view block,
                       bool end_stream, uint32_t max_frame) {
  FrameType type = FrameType::kHeaders;
  do {
    const size_t n = std::min<size_t>(block.size(), max_frame);
    const bool last = n == block.size();
    uint8_t fl = last ? flags::kEndHeaders : 0;
    if (type == FrameType::kHeaders && end_stream) fl |= flags::kEndStream;
    appendHeader(out, static_cast<uint32_t>(n), type, fl, stream_id);
    out.append(block.substr(0, n));
    block.remove_prefix(n);
    type = FrameType::kContinuation;
  } while (!block.empty());
}

}  // namespace crihook::relay::h2
