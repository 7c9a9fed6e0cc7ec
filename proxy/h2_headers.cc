#include "proxy/h2_headers.h"

#include "base/grpc_wire.h"
#include "base/quote.h"
#include "base/text.h"

namespace crihook::relay {

std::vector<nghttp2_nv> toNv(const Headers& headers) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const Header& h : headers) {
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(),
                  h.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

const std::string* findHeader(const Headers& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (h.name == name) return &h.value;
  }
  return nullptr;
}

Headers statusTrailers(const absl::Status& status) {
  Headers t;
  t.push_back({"grpc-status", std::to_string(grpcwire::statusNumber(status.code()))});
  if (!status.message().empty())
    t.push_back({"grpc-message", grpcwire::percentEncode(boundedMessage(sv(status.message())))});
  return t;
}

Headers trailersOnly(const absl::Status& status, int http_status) {
  Headers h{{":status", std::to_string(http_status)}, {"content-type", "application/grpc"}};
  for (Header& t : statusTrailers(status)) h.push_back(std::move(t));
  return h;
}

absl::Status statusFrom(const Headers& trailers) {
  return grpcwire::statusOfFields(findHeader(trailers, "grpc-status"),
                                  findHeader(trailers, "grpc-message"));
}

namespace {

// Connection-specific fields (RFC 9110 7.6.1) that grpc-go's server accepts
// and ignores: crihookd accepts them too, and an intermediary drops them
// rather than forwarding them (the runtime's HTTP/2 stack may refuse them).
bool hopByHop(const Header& h) {
  return h.name == "keep-alive" || h.name == "proxy-connection" || h.name == "transfer-encoding" ||
         h.name == "upgrade" || (h.name == "te" && h.value != "trailers");
}

}  // namespace

// What grpc-go's server accepts, some gRPC servers refuse (gRPC C++ wants
// :scheme, :authority and te: trailers). The runtime gets the request as a
// gRPC client library would have sent it.
void canonicalise(Headers& headers) {
  // grpc-go drops one leading '/' before routing, so it serves "S/M" as
  // "/S/M": forward (and match interception on) the canonical form.
  for (Header& h : headers) {
    if (h.name == ":path" && !h.value.starts_with('/')) h.value = cat("/", h.value);
  }
  std::erase_if(headers, hopByHop);
  if (findHeader(headers, ":scheme") == nullptr)
    headers.insert(headers.begin(), {":scheme", "http"});
  if (findHeader(headers, ":authority") == nullptr) {
    // grpc-go takes a lone host header as the authority.
    const std::string* host = findHeader(headers, "host");
    headers.insert(headers.begin(), {":authority", host ? *host : "localhost"});
  }
  if (findHeader(headers, "te") == nullptr) headers.push_back({"te", "trailers"});
}

bool isCanonical(const Headers& headers) {
  bool scheme = false, authority = false, te = false;
  for (const Header& h : headers) {
    if (h.name == ":path" && !h.value.starts_with('/')) return false;
    if (hopByHop(h)) return false;
    scheme |= h.name == ":scheme";
    authority |= h.name == ":authority";
    te |= h.name == "te";
  }
  return scheme && authority && te;
}

std::chrono::steady_clock::time_point grpcDeadline(const Headers& headers,
                                                   std::chrono::steady_clock::time_point start) {
  using Clock = std::chrono::steady_clock;
  const std::string* t = findHeader(headers, "grpc-timeout");
  if (t == nullptr) return Clock::time_point::max();
  auto d = grpcwire::parseTimeout(*t);
  if (!d) return Clock::time_point::max();
  const auto left = std::chrono::duration_cast<Clock::duration>(*d);
  return left < Clock::time_point::max() - start ? start + left : Clock::time_point::max();
}

}  // namespace crihook::relay
