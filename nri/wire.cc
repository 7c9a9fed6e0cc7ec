#include "nri/wire.h"

#include <algorithm>

#include "base/big_endian.h"
#include "base/text.h"

namespace crihook::nri {

namespace {

uint32_t readU32(std::string_view in) {
  return readBigEndian32(reinterpret_cast<const uint8_t*>(in.data()));
}

}  // namespace

absl::Status appendMessage(std::string& out, const Message& message) {
  if (message.conn == 0) return absl::InvalidArgumentError("ttrpc message for mux connection 0");
  if (message.payload.size() > kMaxTtrpcMessage) {
    return absl::InvalidArgumentError(cat("ttrpc message of ", message.payload.size(),
                                          " bytes, over ttrpc's ", kMaxTtrpcMessage));
  }
  std::string ttrpc;
  ttrpc.reserve(kTtrpcHeaderBytes + message.payload.size());
  appendBigEndian32(ttrpc, static_cast<uint32_t>(message.payload.size()));
  appendBigEndian32(ttrpc, message.stream);
  ttrpc.push_back(static_cast<char>(message.type));
  ttrpc.push_back(static_cast<char>(message.flags));
  ttrpc.append(message.payload);
  for (size_t at = 0; at < ttrpc.size(); at += kMaxMuxWrite) {
    const size_t n = std::min(kMaxMuxWrite, ttrpc.size() - at);
    appendBigEndian32(out, message.conn);
    appendBigEndian32(out, static_cast<uint32_t>(n));
    out.append(ttrpc, at, n);
  }
  return absl::OkStatus();
}

absl::Status Demux::feed(std::string_view bytes, std::vector<Message>& out) {
  if (!broken_.empty()) return absl::FailedPreconditionError(broken_);
  while (!bytes.empty()) {
    if (payload_left_ == 0) {
      const size_t n = std::min(bytes.size(), kMuxHeaderBytes - header_.size());
      header_.append(bytes.substr(0, n));
      bytes.remove_prefix(n);
      if (header_.size() < kMuxHeaderBytes) return absl::OkStatus();
      conn_ = readU32(header_);
      payload_left_ = readU32(std::string_view(header_).substr(4));
      header_.clear();
      if (conn_ == 0) broken_ = "NRI mux frame for connection 0, which is reserved";
      if (payload_left_ > kMaxMuxPayload) {
        broken_ = cat("NRI mux frame of ", payload_left_, " bytes, over the ", kMaxMuxPayload,
                      " NRI's own writer sends");
      }
      if (!broken_.empty()) return absl::InvalidArgumentError(broken_);
      continue;
    }
    const size_t n = std::min(bytes.size(), payload_left_);
    if (conn_ == kPluginServiceConn || conn_ == kRuntimeServiceConn)
      take(conn_, bytes.substr(0, n), out);
    bytes.remove_prefix(n);
    payload_left_ -= n;
  }
  return absl::OkStatus();
}

void Demux::take(uint32_t conn, std::string_view piece, std::vector<Message>& out) {
  Stream& s = streams_[conn - 1];
  while (!piece.empty()) {
    if (s.skip > 0) {
      const size_t n = std::min(piece.size(), s.skip);
      piece.remove_prefix(n);
      s.skip -= n;
      if (s.skip == 0) out.push_back(std::move(s.skipped));
      continue;
    }
    if (s.buffer.size() < kTtrpcHeaderBytes) {
      const size_t n = std::min(piece.size(), kTtrpcHeaderBytes - s.buffer.size());
      s.buffer.append(piece.substr(0, n));
      piece.remove_prefix(n);
      if (s.buffer.size() < kTtrpcHeaderBytes) return;
    }
    const size_t length = readU32(s.buffer);
    Message m;
    m.conn = conn;
    m.stream = readU32(std::string_view(s.buffer).substr(4));
    m.type = static_cast<uint8_t>(s.buffer[8]);
    m.flags = static_cast<uint8_t>(s.buffer[9]);
    if (length > kMaxTtrpcMessage) {
      // As ttrpc does: the payload is read and dropped, the message reported.
      m.too_large = true;
      s.buffer.clear();
      s.skip = length;
      s.skipped = std::move(m);
      continue;
    }
    const size_t have = s.buffer.size() - kTtrpcHeaderBytes;
    const size_t n = std::min(piece.size(), length - have);
    s.buffer.append(piece.substr(0, n));
    piece.remove_prefix(n);
    if (s.buffer.size() - kTtrpcHeaderBytes < length) return;
    m.payload = s.buffer.substr(kTtrpcHeaderBytes);
    s.buffer.clear();
    out.push_back(std::move(m));
  }
}

}  // namespace crihook::nri
