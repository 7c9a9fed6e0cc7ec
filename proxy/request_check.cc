#include "proxy/request_check.h"

#include <algorithm>

#include "base/quote.h"
#include "base/text.h"
#include "base/grpc_wire.h"

namespace crihook::relay {

namespace {

enum PseudoBit : uint32_t {
  kMethod = 1,
  kScheme = 2,
  kPath = 4,
  kAuthority = 8,
  kStatus = 16,  // a response pseudo-header: alone it is not refused by the framer
};

// RFC 9110 token characters, as httpguts.IsTokenRune.
bool isTokenChar(unsigned char c) {
  if (c >= 'a' && c <= 'z') return true;
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= '0' && c <= '9') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// httpguts.ValidHeaderFieldValue: no control character but tab, no DEL.
bool validFieldValue(std::string_view v) {
  return std::none_of(v.begin(), v.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return (c < 0x20 && c != '\t') || c == 0x7f;
  });
}

// golang.org/x/net/http2 validWireHeaderFieldName: a token, lower case.
bool validFieldName(std::string_view n) {
  return !n.empty() && std::all_of(n.begin(), n.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return isTokenChar(c) && !(c >= 'A' && c <= 'Z');
  });
}

uint32_t pseudoBit(std::string_view name) {
  if (name == ":method") return kMethod;
  if (name == ":scheme") return kScheme;
  if (name == ":path") return kPath;
  if (name == ":authority") return kAuthority;
  if (name == ":status") return kStatus;
  return 0;
}

// grpc-go decodeBinHeader: standard base64, padded when the length is a
// multiple of 4, unpadded otherwise.
bool validBinaryValue(std::string_view v) {
  auto isB64 = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
  };
  std::string_view body = v;
  if (v.size() % 4 == 0) {
    size_t pad = 0;
    while (pad < 2 && !body.empty() && body.back() == '=') {
      body.remove_suffix(1);
      ++pad;
    }
    if (pad > 0 && body.size() % 4 < 2) return false;
  } else if (v.size() % 4 == 1) {
    return false;
  }
  return std::all_of(body.begin(), body.end(), isB64);
}

}  // namespace

bool checkRequestField(RequestCheck& check, std::string_view name, std::string_view value,
                       size_t connection_room) {
  if (check.stopped()) return false;
  if (!validFieldValue(value)) {
    check.protocol_error = cat("header ", quote(name), ": value holds a control character");
    return false;
  }
  if (!name.empty() && name[0] == ':') {
    if (check.saw_regular) {
      check.protocol_error = cat("pseudo-header ", quote(name), " after a regular header");
      return false;
    }
    const uint32_t bit = pseudoBit(name);
    if (bit == 0) {
      check.protocol_error = cat("unknown pseudo-header ", quote(name));
      return false;
    }
    if (check.pseudo & bit) {
      check.protocol_error = cat("pseudo-header ", quote(name), " twice");
      return false;
    }
    check.pseudo |= bit;
    if ((check.pseudo & kStatus) && (check.pseudo & ~uint32_t{kStatus})) {
      check.protocol_error = "request and response pseudo-headers mixed";
      return false;
    }
  } else {
    check.saw_regular = true;
    if (!validFieldName(name)) {
      check.protocol_error = cat("header name ", quote(name), " is not a lower-case token");
      return false;
    }
  }
  // Checked after the field's form, as the Framer does.
  const size_t size = name.size() + value.size() + kHeaderFieldOverhead;
  if (size > kMaxHeaderListBytes - check.list_bytes) {
    check.truncated = true;
    return false;
  }
  if (size > connection_room) {
    check.connection_full = true;
    return false;
  }
  check.list_bytes += size;
  return true;
}

std::optional<RequestRefusal> refusalOf(const RequestCheck& check, const Headers& headers) {
  if (!check.protocol_error.empty())
    return RequestRefusal{NGHTTP2_PROTOCOL_ERROR, 0, {}, check.protocol_error};
  if (check.truncated) {
    std::string why = cat("header list larger than ", kMaxHeaderListBytes, " bytes");
    return RequestRefusal{NGHTTP2_FRAME_SIZE_ERROR, 0, {}, std::move(why)};
  }
  if (check.connection_full) {
    // No grpc-go counterpart (it has no such cap): a status a client can read.
    auto s = absl::ResourceExhaustedError(
        cat("crihookd: header lists of the open streams on this connection would pass ",
            kMaxConnectionHeaderBytes, " bytes"));
    return RequestRefusal{0, 200, s, std::string(s.message())};
  }
  bool grpc = false, connection = false;
  int hosts = 0;
  std::string content_type, method, header_error;
  for (const Header& h : headers) {
    if (h.name == "content-type") {
      // grpcutil.ContentSubtype: "application/grpc", optionally followed by
      // '+' or ';' and anything.
      constexpr std::string_view kGrpc = "application/grpc";
      const std::string_view v = h.value;
      if (v == kGrpc ||
          (v.starts_with(kGrpc) && (v[kGrpc.size()] == '+' || v[kGrpc.size()] == ';')))
        grpc = true;
      else
        content_type = h.value;
    } else if (h.name == ":method") {
      method = h.value;
    } else if (h.name == "host") {
      ++hosts;
    } else if (h.name == "connection") {
      connection = true;
    } else if (h.name == "grpc-timeout") {
      if (!grpcwire::parseTimeout(h.value))
        header_error = cat("malformed grpc-timeout ", quote(h.value));
    } else if (h.name.ends_with("-bin") && h.name != "grpc-status-details-bin") {
      if (!validBinaryValue(h.value))
        header_error = cat("malformed binary metadata in header ", quote(h.name));
    }
  }
  if (hosts > 1) {
    auto s = absl::InternalError(cat("crihookd: ", hosts, " host headers, HTTP/2 allows one"));
    return RequestRefusal{0, 400, s, std::string(s.message())};
  }
  if (connection)
    return RequestRefusal{NGHTTP2_PROTOCOL_ERROR, 0, {}, "connection header in an HTTP/2 request"};
  if (!grpc) {
    auto s = absl::InvalidArgumentError(
        cat("crihookd: invalid gRPC request content-type ", quote(content_type)));
    return RequestRefusal{0, 415, s, std::string(s.message())};
  }
  if (!header_error.empty()) {
    auto s = absl::InternalError(cat("crihookd: ", header_error));
    return RequestRefusal{0, 400, s, std::string(s.message())};
  }
  if (method != "POST") {
    auto s = absl::InternalError(cat("crihookd: :method ", quote(method), ", gRPC takes POST"));
    return RequestRefusal{0, 405, s, std::string(s.message())};
  }
  // server.go handleStream: one leading '/' is dropped, then the last '/'
  // splits service from method.
  const std::string* path = findHeader(headers, ":path");
  std::string_view p = path ? std::string_view(*path) : std::string_view();
  if (p.starts_with('/')) p.remove_prefix(1);
  if (p.find('/') == std::string_view::npos) {
    auto s = absl::UnimplementedError(
        cat("crihookd: malformed method name ", quote(path ? *path : std::string())));
    return RequestRefusal{0, 200, s, std::string(s.message())};
  }
  return std::nullopt;
}

}  // namespace crihook::relay
