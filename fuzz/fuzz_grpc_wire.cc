// The gRPC frame tracker (proxy/grpc_wire.h) on an arbitrary byte stream
// split at arbitrary points, checked against the same stream fed whole: where
// a stream is cut into DATA frames must not change what the tracker decides.
// Also the other pure helpers of grpc_wire.h on the same bytes.
//
// Input: the stream, then 1 byte seeding the split points, then 1 byte
// choosing the message limit (FuzzedDataProvider takes integers from the
// end).

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/grpc_wire.h"

namespace {

using crihook::grpcwire::FrameTracker;

// A stream split into as many pieces as bytes is what a peer sending
// one-byte DATA frames does; more pieces only repeat that.
constexpr size_t kMaxPieces = 64;

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_grpc_wire: %s\n", what);
    std::abort();
  }
}

// Feeds `stream` in `cuts` pieces; returns how many bytes may be forwarded.
uint64_t feed(FrameTracker& t, const std::string& stream, const std::vector<size_t>& cuts) {
  uint64_t forwarded = 0;
  size_t at = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t end = i < cuts.size() ? cuts[i] : stream.size();
    const size_t len = end - at;
    const size_t ok = t.feed(reinterpret_cast<const uint8_t*>(stream.data()) + at, len);
    check(ok <= len, "feed returned more than it was given");
    forwarded += ok;
    if (t.tooLarge()) {
      check(ok == 0 || ok < len, "feed forwarded a whole piece holding a too-large header");
      return forwarded;
    }
    check(ok == len, "feed held back bytes without tooLarge");
    at = end;
  }
  return forwarded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // Limits near the lengths a fuzzer writes into headers, and the daemon's.
  const uint8_t limit_choice = in.ConsumeIntegral<uint8_t>();
  const uint64_t limit = limit_choice == 255 ? (16u << 20) : limit_choice;
  const uint8_t seed = in.ConsumeIntegral<uint8_t>();
  const std::string stream = in.ConsumeRemainingBytesAsString();

  std::vector<size_t> cuts;
  if (!stream.empty()) {
    uint32_t x = seed * 2654435761u + 1;
    size_t at = 0;
    while (cuts.size() < kMaxPieces - 1) {
      x = x * 1103515245u + 12345u;
      at += 1 + (x >> 16) % 9;
      if (at >= stream.size()) break;
      cuts.push_back(at);
    }
  }

  FrameTracker whole(limit), pieces(limit);
  const uint64_t whole_fwd = feed(whole, stream, {});
  const uint64_t pieces_fwd = feed(pieces, stream, cuts);
  check(whole.messages() == pieces.messages(), "message count depends on the split");
  check(whole.tooLarge() == pieces.tooLarge(), "tooLarge depends on the split");
  if (whole.tooLarge()) {
    check(whole.cleanCut(), "a stream fed whole cut inside a header");
    check(whole.announcedBytes() == pieces.announcedBytes(), "announced size depends on the split");
    check(whole.announcedBytes() > limit, "tooLarge under the limit");
    if (pieces.cleanCut()) {
      check(pieces_fwd == whole_fwd, "a clean cut forwarded other bytes than the whole feed");
    } else {
      // The header's first bytes went out in an earlier piece.
      check(pieces_fwd > whole_fwd && pieces_fwd < whole_fwd + crihook::grpcwire::kFrameHeaderBytes,
            "a split header forwarded more than the header's start");
    }
    check(pieces.feed(reinterpret_cast<const uint8_t*>(stream.data()), stream.size()) == 0,
          "bytes forwarded after tooLarge");
  } else {
    check(whole_fwd == stream.size() && pieces_fwd == stream.size(), "bytes held back");
    check(whole.atBoundary() == pieces.atBoundary(), "atBoundary depends on the split");
  }

  // A body that is exactly one message.
  auto one = crihook::grpcwire::singleMessage(stream);
  if (one.ok()) {
    check(crihook::grpcwire::frame(*one) == stream, "singleMessage does not invert frame");
    FrameTracker t(limit);
    feed(t, stream, {});
    check(t.tooLarge() || (t.messages() == 1 && t.atBoundary()),
          "singleMessage and the tracker disagree");
  }

  // grpc-timeout: formatting what was parsed never shortens it.
  if (auto t = crihook::grpcwire::parseTimeout(stream)) {
    auto again = crihook::grpcwire::parseTimeout(crihook::grpcwire::formatTimeout(*t));
    check(again.has_value(), "formatTimeout wrote what parseTimeout refuses");
    check(*again >= *t || *t > std::chrono::hours(99999999), "formatTimeout shortened a deadline");
  }
  // grpc-message round trip.
  check(crihook::grpcwire::percentDecode(crihook::grpcwire::percentEncode(stream)) == stream,
        "percentDecode does not invert percentEncode");
  return 0;
}
