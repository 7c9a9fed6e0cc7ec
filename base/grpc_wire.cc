#include "base/grpc_wire.h"

#include <cstring>

#include "absl/status/statusor.h"
#include "base/big_endian.h"
#include "base/quote.h"
#include "base/text.h"

namespace crihook::grpcwire {

size_t FrameTracker::feed(const uint8_t* data, size_t len) {
  if (too_large_) return 0;
  size_t pos = 0;
  while (pos < len) {
    if (remaining_ > 0) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, len - pos));
      remaining_ -= take;
      pos += take;
      continue;
    }
    const bool started_here = header_have_ == 0;
    const size_t header_start = pos;
    size_t take = std::min(kFrameHeaderBytes - header_have_, len - pos);
    std::memcpy(header_ + header_have_, data + pos, take);
    header_have_ += take;
    pos += take;
    if (header_have_ < kFrameHeaderBytes) break;
    header_have_ = 0;
    announced_ = readBigEndian32(header_ + 1);
    if (announced_ > max_) {
      too_large_ = true;
      // Bytes before this header are whole messages and may go out. A header
      // split across chunks began in one that has gone out already.
      split_header_ = !started_here;
      return started_here ? header_start : 0;
    }
    ++messages_;
    remaining_ = announced_;
  }
  return len;
}

absl::StatusOr<std::string_view> singleMessage(std::string_view body) {
  if (body.size() < kFrameHeaderBytes) {
    return absl::InvalidArgumentError(
        cat("request body of ", body.size(), " bytes holds no gRPC message"));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(body.data());
  const uint64_t len = readBigEndian32(p + 1);
  if (p[0] != 0) {
    return absl::UnimplementedError("compressed messages are not supported on intercepted methods");
  }
  if (kFrameHeaderBytes + len != body.size()) {
    return absl::InvalidArgumentError(cat("expected exactly one gRPC message of ", len,
                                          " bytes, got a body of ", body.size(), " bytes"));
  }
  return body.substr(kFrameHeaderBytes);
}

std::string frame(std::string_view message) {
  std::string out;
  out.reserve(kFrameHeaderBytes + message.size());
  const auto n = static_cast<uint32_t>(message.size());
  out.push_back('\0');
  appendBigEndian32(out, n);
  out.append(message);
  return out;
}

std::optional<std::chrono::nanoseconds> parseTimeout(std::string_view v) {
  // At most 8 digits and one unit letter (gRPC over HTTP/2 spec).
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  int64_t n = 0;
  for (char c : v.substr(0, v.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  using namespace std::chrono;
  // 8 digits of hours overflow int64 nanoseconds (from 2562048H): such a
  // timeout is clamped to the longest one, as grpc-go does, rather than
  // wrapping into the past. (8 digits of minutes fit.)
  auto clamped = [&](int64_t unit_ns) {
    return n > nanoseconds::max().count() / unit_ns ? nanoseconds::max() : nanoseconds(n * unit_ns);
  };
  switch (v.back()) {
    case 'H':
      return clamped(int64_t{3600} * 1000000000);
    case 'M':
      return clamped(int64_t{60} * 1000000000);
    case 'S':
      return seconds(n);
    case 'm':
      return milliseconds(n);
    case 'u':
      return microseconds(n);
    case 'n':
      return nanoseconds(n);
    default:
      return std::nullopt;
  }
}

std::string formatTimeout(std::chrono::nanoseconds t) {
  // Pick the finest unit that fits in 8 digits, rounding up so a deadline is
  // never shortened beyond what elapsed.
  int64_t ns = std::max<int64_t>(t.count(), 1);
  struct Unit {
    int64_t ns;
    char letter;
  };
  constexpr Unit units[] = {{1, 'n'},          {1000, 'u'},        {1000000, 'm'},
                            {1000000000, 'S'}, {60000000000, 'M'}, {3600000000000, 'H'}};
  for (const Unit& u : units) {
    int64_t v = ns / u.ns + (ns % u.ns != 0);  // rounded up without overflowing near the maximum
    if (v < 100000000) return cat(v, std::string(1, u.letter));
  }
  return "99999999H";
}

std::string percentEncode(std::string_view m) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(m.size());
  for (unsigned char c : m) {
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string percentDecode(std::string_view m) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] == '%' && i + 2 < m.size() && hex(m[i + 1]) >= 0 && hex(m[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(m[i + 1]) * 16 + hex(m[i + 2])));
      i += 2;
    } else {
      out.push_back(m[i]);
    }
  }
  return out;
}

absl::Status statusOfFields(const std::string* grpc_status, const std::string* grpc_message) {
  if (grpc_status == nullptr) return absl::UnknownError("reply without grpc-status");
  const std::string& v = *grpc_status;
  int n = 0;
  if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InternalError(cat("malformed grpc-status ", quote(v)));
  }
  for (char c : v) n = n * 10 + (c - '0');
  if (n > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(cat("grpc-status ", n, " is not a gRPC code",
                                  grpc_message ? cat(": ", percentDecode(*grpc_message)) : ""));
  }
  return absl::Status(static_cast<absl::StatusCode>(n),
                      grpc_message ? percentDecode(*grpc_message) : "");
}

absl::StatusCode codeOfReset(uint32_t http2_error_code) {
  switch (http2_error_code) {
    case 0x7:  // REFUSED_STREAM: the server did not start it, a retry is safe
      return absl::StatusCode::kUnavailable;
    case 0x8:  // CANCEL
      return absl::StatusCode::kCancelled;
    case 0xb:  // ENHANCE_YOUR_CALM
      return absl::StatusCode::kResourceExhausted;
    case 0xc:  // INADEQUATE_SECURITY
      return absl::StatusCode::kPermissionDenied;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode codeOfHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return absl::StatusCode::kInternal;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kUnimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace crihook::grpcwire
