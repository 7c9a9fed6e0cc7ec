// The transparent relay's wire (proxy/h2_frame.h, proxy/hpack.h) on an
// arbitrary byte stream: split into reads at arbitrary points, the frame
// reader must report the same frames and payloads as when the stream comes
// whole, never read a frame whole past its bound, and the header blocks it
// assembles must decode (or fail) the same way, and one said to change no
// dynamic table (hpack::changesDynamicTable) must not; every payload helper
// runs on every frame.
//
// Input: the stream, then 1 byte choosing the read size (FuzzedDataProvider
// takes integers from the end).

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "proxy/h2_frame.h"
#include "proxy/hpack.h"

namespace {

namespace h2 = crihook::relay::h2;
namespace hpack = crihook::relay::hpack;

// Frames other than DATA are read whole up to this, as the relay reads
// header blocks and control frames; a longer one passes in pieces.
constexpr size_t kMaxWhole = 1 << 14;

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_h2_wire: %s\n", what);
    std::abort();
  }
}

struct Run {
  std::vector<std::string> frames;  // header bytes + payload, one entry per frame
  std::vector<std::string> fields;  // decoded header fields, "name: value", and errors
};

Run readAll(std::string_view wire, size_t piece) {
  Run run;
  h2::FrameReader reader(kMaxWhole);
  hpack::Decoder decoder;
  std::string block;
  h2::FrameHeader current;
  while (!wire.empty()) {
    std::string_view in = wire.substr(0, piece);
    wire.remove_prefix(in.size());
    for (;;) {
      const size_t before = in.size();
      auto ev = reader.next(in);
      check(in.size() <= before, "the reader grew its input");
      if (ev.kind == h2::FrameReader::Event::kNeedMore) {
        check(in.empty(), "more needed with input left");
        break;
      }
      if (ev.kind == h2::FrameReader::Event::kHeader) {
        current = ev.header;
        run.frames.emplace_back(ev.bytes);
        if (ev.header.type != h2::FrameType::kData) {
          const bool fits = ev.header.length <= kMaxWhole;
          check(reader.wantWhole().ok() == fits, "wantWhole disagrees with the bound");
        }
        continue;
      }
      check(ev.header.length == current.length, "a payload of another frame");
      run.frames.back().append(ev.bytes);
      if (ev.kind != h2::FrameReader::Event::kWhole) continue;
      check(ev.bytes.size() == current.length, "a whole payload of the wrong length");
      std::string_view payload = ev.bytes;
      switch (current.type) {
        case h2::FrameType::kHeaders:
        case h2::FrameType::kContinuation: {
          auto fragment = h2::headerBlockFragment(current, payload);
          if (!fragment.ok()) {
            run.fields.emplace_back(fragment.status().message());
            break;
          }
          if (current.type == h2::FrameType::kHeaders) block.clear();
          if (block.size() + fragment->size() > 64 << 10) break;
          block.append(*fragment);
          if (current.has(h2::flags::kEndHeaders)) {
            const size_t entries = decoder.dynamicEntries();
            auto st = decoder.decode(block, [&](std::string_view n, std::string_view v) {
              run.fields.push_back(std::string(n) + ": " + std::string(v.substr(0, 64)));
            });
            if (!st.ok()) run.fields.emplace_back(st.message());
            // A block the relay may keep from its receiver leaves the table
            // as it was.
            if (st.ok() && !hpack::changesDynamicTable(block))
              check(decoder.dynamicEntries() == entries, "a block said to change no table did");
          }
          break;
        }
        case h2::FrameType::kSettings:
          (void)h2::settingsOf(payload);
          break;
        case h2::FrameType::kWindowUpdate:
          (void)h2::windowIncrementOf(payload);
          break;
        case h2::FrameType::kGoaway:
          (void)h2::goawayOf(payload);
          break;
        case h2::FrameType::kRstStream:
          (void)h2::rstStreamCodeOf(payload);
          break;
        default:
          (void)h2::dataOf(current, payload);
          break;
      }
    }
  }
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const size_t piece = 1 + in.ConsumeIntegralInRange<size_t>(0, 63);
  const std::string wire = in.ConsumeRemainingBytesAsString();
  const Run whole = readAll(wire, wire.size() + 1);
  const Run split = readAll(wire, piece);
  check(whole.frames == split.frames, "frames differ with the split");
  check(whole.fields == split.fields, "header fields differ with the split");
  return 0;
}
