// HTTP/2 framing (proxy/h2_frame.h) and HPACK (proxy/hpack.h) as the
// transparent relay uses them: frames split at every byte boundary come out
// the same, bounds are kept, crihookd's own frames parse back, and its
// literal header fields decode without touching the receiver's dynamic table
// (checked with nghttp2's decoder, not with crihookd's own reading).

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "proxy/h2_frame.h"
#include "proxy/hpack.h"

namespace crihook::relay {
namespace {

using h2::FrameReader;
using h2::FrameType;

// What a reader reported, with chunks of one frame joined.
struct Seen {
  h2::FrameHeader header;
  std::string payload;
};

std::vector<Seen> readAll(std::string_view wire, size_t piece, bool whole_headers) {
  FrameReader reader(1 << 16);
  std::vector<Seen> seen;
  while (!wire.empty()) {
    std::string_view in = wire.substr(0, piece);
    wire.remove_prefix(in.size());
    for (;;) {
      auto ev = reader.next(in);
      if (ev.kind == FrameReader::Event::kNeedMore) break;
      if (ev.kind == FrameReader::Event::kHeader) {
        EXPECT_EQ(ev.bytes.size(), h2::kFrameHeaderBytes);
        seen.push_back({ev.header, {}});
        if (whole_headers && ev.header.type != FrameType::kData) {
          EXPECT_TRUE(reader.wantWhole().ok());
        }
        continue;
      }
      if (whole_headers && ev.header.type != FrameType::kData) {
        EXPECT_EQ(ev.kind, FrameReader::Event::kWhole);
      } else {
        EXPECT_EQ(ev.kind, FrameReader::Event::kChunk);
      }
      seen.back().payload.append(ev.bytes);
    }
  }
  EXPECT_TRUE(reader.atFrameBoundary());
  return seen;
}

std::string sampleWire() {
  std::string w;
  h2::appendSettings(
      w, {{h2::setting::kInitialWindowSize, 1 << 20}, {h2::setting::kMaxFrameSize, 16384}});
  h2::appendSettingsAck(w);
  h2::appendHeaderBlock(w, 1, std::string(40, 'h'), false, 16);  // HEADERS + 2 CONTINUATION
  h2::appendData(w, 1, std::string(50, 'd'), true, 20);          // 3 DATA frames
  h2::appendWindowUpdate(w, 0, 12345);
  h2::appendRstStream(w, 3, h2::error::kCancel);
  h2::appendGoaway(w, 7, h2::error::kNoError, "bye");
  h2::appendData(w, 5, "", true, 16384);  // an empty frame
  h2::appendPingAck(w, "12345678");
  h2::appendFrame(w, {3, FrameType::kPriority, 0, 9}, "abc");  // a frame as read, passed on
  return w;
}

TEST(FrameReaderTest, FramesSplitAtEveryBoundaryComeOutTheSame) {
  const std::string wire = sampleWire();
  const auto whole = readAll(wire, wire.size(), false);
  ASSERT_EQ(whole.size(), 14u);
  for (size_t piece = 1; piece <= 20; ++piece) {
    for (bool collect : {false, true}) {
      const auto split = readAll(wire, piece, collect);
      ASSERT_EQ(split.size(), whole.size()) << "piece " << piece;
      for (size_t i = 0; i < whole.size(); ++i) {
        EXPECT_EQ(split[i].header.type, whole[i].header.type);
        EXPECT_EQ(split[i].header.flags, whole[i].header.flags);
        EXPECT_EQ(split[i].header.stream_id, whole[i].header.stream_id);
        EXPECT_EQ(split[i].payload, whole[i].payload) << "frame " << i << " piece " << piece;
      }
    }
  }
}

TEST(FrameReaderTest, TheRelaysOwnFramesParseBack) {
  const auto f = readAll(sampleWire(), 7, true);
  auto settings = h2::settingsOf(f[0].payload);
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->at(0),
            (std::pair<uint16_t, uint32_t>(h2::setting::kInitialWindowSize, 1u << 20)));
  EXPECT_TRUE(f[1].header.has(h2::flags::kAck));
  EXPECT_EQ(f[2].header.type, FrameType::kHeaders);
  EXPECT_FALSE(f[2].header.has(h2::flags::kEndHeaders));
  EXPECT_EQ(f[3].header.type, FrameType::kContinuation);
  EXPECT_TRUE(f[4].header.has(h2::flags::kEndHeaders));
  EXPECT_EQ(f[2].payload + f[3].payload + f[4].payload, std::string(40, 'h'));
  EXPECT_FALSE(f[5].header.has(h2::flags::kEndStream));
  EXPECT_TRUE(f[7].header.has(h2::flags::kEndStream));
  EXPECT_EQ(f[5].payload.size() + f[6].payload.size() + f[7].payload.size(), 50u);
  EXPECT_EQ(*h2::windowIncrementOf(f[8].payload), 12345u);
  EXPECT_EQ(f[9].header.stream_id, 3u);
  EXPECT_EQ(*h2::rstStreamCodeOf(f[9].payload), h2::error::kCancel);
  auto goaway = h2::goawayOf(f[10].payload);
  ASSERT_TRUE(goaway.ok());
  EXPECT_EQ(goaway->first, 7u);
  EXPECT_EQ(f[10].payload.substr(8), "bye");
  EXPECT_EQ(f[11].header.length, 0u);
  EXPECT_TRUE(f[11].header.has(h2::flags::kEndStream));
  EXPECT_EQ(f[12].header.type, FrameType::kPing);
  EXPECT_TRUE(f[12].header.has(h2::flags::kAck));
  EXPECT_EQ(f[12].header.stream_id, 0u);
  EXPECT_EQ(f[12].payload, "12345678");
  EXPECT_EQ(f[13].header.type, FrameType::kPriority);
  EXPECT_EQ(f[13].header.stream_id, 9u);
  EXPECT_EQ(f[13].payload, "abc");
}

TEST(FrameReaderTest, AFrameLongerThanWhatIsReadWholeIsRefused) {
  FrameReader reader(100);
  std::string wire;
  h2::appendHeaderBlock(wire, 1, std::string(101, 'x'), true, 16384);
  std::string_view in = wire;
  auto ev = reader.next(in);
  ASSERT_EQ(ev.kind, FrameReader::Event::kHeader);
  auto st = reader.wantWhole();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("101 bytes"), std::string_view::npos) << st;
  // It can still be passed through in pieces.
  ev = reader.next(in);
  EXPECT_EQ(ev.kind, FrameReader::Event::kChunk);
  EXPECT_EQ(ev.bytes.size(), 101u);
  EXPECT_TRUE(ev.frame_end);
}

TEST(FrameReaderTest, TheReservedBitOfAStreamIdIsIgnored) {
  const uint8_t raw[9] = {0, 0, 0, 0, 0, 0x80, 0, 0, 5};
  EXPECT_EQ(h2::parseFrameHeader(raw).stream_id, 5u);
  EXPECT_EQ(h2::parseFrameHeader(h2::encodeFrameHeader({3, FrameType::kPing, 1, 0x7fffffff}).data())
                .stream_id,
            0x7fffffffu);
}

TEST(FramePayloadTest, PaddingAndPriorityAreRemovedAndBadPaddingNamed) {
  h2::FrameHeader h{0, FrameType::kHeaders, h2::flags::kPadded | h2::flags::kPriority, 1};
  std::string payload = std::string(1, '\x02') + "PPPPP" + "block" + "zz";
  auto block = h2::headerBlockFragment(h, payload);
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(*block, "block");
  std::string bad = std::string(1, '\x09') + "abc";
  auto st = h2::headerBlockFragment(h, bad).status();
  EXPECT_NE(st.message().find("pad length 9"), std::string_view::npos) << st;
  h2::FrameHeader d{0, FrameType::kData, h2::flags::kPadded, 1};
  EXPECT_EQ(*h2::dataOf(d, std::string(1, '\x01') + "data!"), "data");
  EXPECT_FALSE(h2::dataOf(d, "").ok());
  EXPECT_FALSE(h2::settingsOf("12345").ok());
  EXPECT_FALSE(h2::windowIncrementOf("123").ok());
  EXPECT_FALSE(h2::goawayOf("1234567").ok());
}

std::vector<nghttp2_nv> nvOf(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<nghttp2_nv> nv;
  for (const auto& [n, v] : fields) {
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                  NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

std::vector<std::pair<std::string, std::string>> decodeAll(hpack::Decoder& d, std::string_view b) {
  std::vector<std::pair<std::string, std::string>> out;
  auto st = d.decode(b, [&](std::string_view n, std::string_view v) {
    out.emplace_back(std::string(n), std::string(v));
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(HpackTest, LiteralBlocksBetweenAPeersBlocksLeaveItsTableInStep) {
  // A peer's encoder indexes; crihookd's literal blocks go between its
  // blocks; the receiver (nghttp2's decoder) must still read every block of
  // the peer right, and the literals must not add table entries.
  const std::vector<std::pair<std::string, std::string>> reply = {
      {":status", "200"}, {"content-type", "application/grpc"}};
  const std::vector<std::pair<std::string, std::string>> trailers = {
      {"grpc-status", "0"}, {"grpc-message", ""}, {"x-custom", "value-1"}};
  hpack::Encoder peer;
  hpack::Decoder receiver;
  for (int round = 0; round < 3; ++round) {
    std::string block;
    ASSERT_TRUE(peer.encode(nvOf(reply), block).ok());
    EXPECT_EQ(decodeAll(receiver, block), reply);
    const size_t entries = receiver.dynamicEntries();
    std::string own;
    hpack::appendLiteral(own, ":status", "200");
    hpack::appendLiteral(own, "grpc-status", "14");
    hpack::appendLiteral(own, "grpc-message", std::string(300, 'm'));  // a multi-byte length
    EXPECT_EQ(
        decodeAll(receiver, own),
        (std::vector<std::pair<std::string, std::string>>{
            {":status", "200"}, {"grpc-status", "14"}, {"grpc-message", std::string(300, 'm')}}));
    EXPECT_EQ(receiver.dynamicEntries(), entries);
    block.clear();
    ASSERT_TRUE(peer.encode(nvOf(trailers), block).ok());
    EXPECT_EQ(decodeAll(receiver, block), trailers);
  }
  EXPECT_GT(receiver.dynamicEntries(), 0u);  // the peer did index
}

TEST(HpackTest, ABlockThatDoesNotDecodeIsNamedAndBreaksTheDecoder) {
  hpack::Decoder d;
  const std::string garbage = "\xbf\xff\xff\xff\xff";  // indexed field, index past any table
  auto st = d.decode(garbage, [](std::string_view, std::string_view) {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("HPACK"), std::string_view::npos) << st;
  std::string ok;
  hpack::appendLiteral(ok, "a", "b");
  EXPECT_FALSE(d.decode(ok, [](std::string_view, std::string_view) {}).ok());
}

TEST(HpackTest, ABlockCutInsideAFieldIsAnError) {
  std::string block;
  hpack::appendLiteral(block, "name", "value");
  block.pop_back();
  hpack::Decoder d;
  EXPECT_FALSE(d.decode(block, [](std::string_view, std::string_view) {}).ok());
}

TEST(HpackTest, WhetherABlockChangesTheTableIsToldWithoutDecodingIt) {
  // What nghttp2's encoder writes (incremental indexing for what is new,
  // Huffman-coded; indexed fields for what it has), against what its
  // decoder's table does with it.
  hpack::Encoder peer;
  hpack::Decoder receiver;
  const std::vector<std::pair<std::string, std::string>> request = {
      {":method", "POST"},
      {":scheme", "http"},
      {":path", "/runtime.v1.RuntimeService/CreateContainer"},
      {":authority", "localhost"},
      {"content-type", "application/grpc"},
      {"te", "trailers"}};
  for (int round = 0; round < 12; ++round) {
    auto fields = request;
    // Every third round a deadline, new each time (grpc-go indexes it).
    if (round % 3 == 2) fields.emplace_back("grpc-timeout", std::to_string(119990 + round) + "m");
    std::string block;
    ASSERT_TRUE(peer.encode(nvOf(fields), block).ok());
    const size_t before = receiver.dynamicEntries();
    EXPECT_EQ(decodeAll(receiver, block), fields);
    const bool changed = receiver.dynamicEntries() != before;
    EXPECT_EQ(hpack::changesDynamicTable(block), changed) << "round " << round;
    EXPECT_EQ(changed, round == 0 || round % 3 == 2) << "round " << round;
  }
  // A field nghttp2 is told never to index.
  std::string name = "authorization", value = "secret";
  std::vector<nghttp2_nv> sensitive = {{reinterpret_cast<uint8_t*>(name.data()),
                                        reinterpret_cast<uint8_t*>(value.data()), name.size(),
                                        value.size(), NGHTTP2_NV_FLAG_NO_INDEX}};
  std::string block;
  ASSERT_TRUE(peer.encode(sensitive, block).ok());
  EXPECT_FALSE(hpack::changesDynamicTable(block));
}

TEST(HpackTest, EveryRepresentationIsReadForItsTableChange) {
  std::string literals;
  hpack::appendLiteral(literals, "grpc-message", std::string(300, 'm'));  // a two-byte length
  literals += std::string("\x1f\x10\x01v", 4);  // never indexed, name index 31 (multi-byte)
  literals += std::string("\x04\x81\xff", 3);   // without indexing, :path, a Huffman value
  literals += "\x82\xbe";                       // indexed: static 2, dynamic 62
  EXPECT_FALSE(hpack::changesDynamicTable(""));
  EXPECT_FALSE(hpack::changesDynamicTable(literals));
  EXPECT_TRUE(hpack::changesDynamicTable(literals + std::string("\x40\x01"
                                                                "a"
                                                                "\x01"
                                                                "b",
                                                                5)))
      << "incremental indexing, new name";
  EXPECT_TRUE(hpack::changesDynamicTable(std::string("\x44\x01x", 3) + literals))
      << "incremental indexing, indexed name";
  std::string resize;
  hpack::appendTableSizeUpdate(resize, 0);
  EXPECT_TRUE(hpack::changesDynamicTable(resize + literals));
  // What cannot be read counts as a change: a string past the block, an
  // integer cut or past 2^32.
  EXPECT_TRUE(hpack::changesDynamicTable(literals.substr(0, literals.size() - 6)));
  EXPECT_TRUE(
      hpack::changesDynamicTable(std::string("\x00\x05"
                                             "ab",
                                             4)));
  EXPECT_TRUE(hpack::changesDynamicTable("\xff"));
  EXPECT_TRUE(hpack::changesDynamicTable("\xff\xff\xff\xff\xff\xff\x01"));
  // A literal that ends where its value's (or its name's) length begins.
  EXPECT_TRUE(hpack::changesDynamicTable(literals + "\x04")) << "cut before the value";
  EXPECT_TRUE(hpack::changesDynamicTable(literals + std::string("\x00", 1)))
      << "cut before the name";
}

// The bound on an integer is 2^32 - 1, whatever its prefix: an indexed
// field (7-bit prefix) naming 2^32 - 1 is read as a read of the table, one
// naming 2^32 is past the bound.
TEST(HpackTest, AnIndexUpTo32BitsIsReadAndOnePastIsNot) {
  auto indexed = [](uint64_t index) {
    std::string block = "\xff";  // indexed, the prefix full: 127 and more to come
    uint64_t rest = index - 127;
    for (; rest >= 128; rest >>= 7) block += static_cast<char>((rest & 0x7f) | 0x80);
    return block + static_cast<char>(rest);
  };
  EXPECT_FALSE(hpack::changesDynamicTable(indexed(UINT32_MAX)));
  EXPECT_FALSE(hpack::changesDynamicTable(indexed(UINT32_MAX) + "\x82"));
  EXPECT_TRUE(hpack::changesDynamicTable(indexed(uint64_t{UINT32_MAX} + 1)));
}

}  // namespace
}  // namespace crihook::relay
