// NRI's multiplexer and ttrpc's framing (nri/wire.h): the bytes of a
// plugin's RegisterPlugin call and the runtime's reply as NRI v0.6.1 and
// ttrpc v1.2.5 lay them out, messages cut into mux frames a Go peer reads,
// and a Demux fed in every piece size.

#include "nri/wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cri-api/nri_api_v1alpha1.pb.h"
#include "cri-api/ttrpc.pb.h"

namespace crihook::nri {
namespace {

std::string bytesOf(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// Feeds `wire` to a new Demux in pieces of `piece` bytes.
std::vector<Message> demux(std::string_view wire, size_t piece, absl::Status* status = nullptr) {
  Demux d;
  std::vector<Message> out;
  absl::Status st;
  for (size_t at = 0; at < wire.size() && st.ok(); at += piece)
    st = d.feed(wire.substr(at, piece), out);
  if (status)
    *status = st;
  else
    EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(NriWireTest, RegisterPluginIsTheBytesNriReads) {
  ::nri::pkg::api::v1alpha1::RegisterPluginRequest reg;
  reg.set_plugin_name("crihook");
  reg.set_plugin_idx("10");
  ::ttrpc::Request req;
  req.set_service("nri.pkg.api.v1alpha1.Runtime");
  req.set_method("RegisterPlugin");
  req.set_payload(reg.SerializeAsString());
  req.set_timeout_nano(2'000'000'000);
  std::string wire;
  ASSERT_TRUE(appendMessage(wire, {kRuntimeServiceConn, 1, 1, 0, req.SerializeAsString()}).ok());
  const std::string expected =
      bytesOf({0, 0, 0, 2, 0, 0, 0, 0x4d}) +        // mux: connection 2, 77 bytes
      bytesOf({0, 0, 0, 0x43, 0, 0, 0, 1, 1, 0}) +  // ttrpc: 67 bytes, stream 1, request
      bytesOf({0x0a, 0x1c}) + "nri.pkg.api.v1alpha1.Runtime" + bytesOf({0x12, 0x0e}) +
      "RegisterPlugin" + bytesOf({0x1a, 0x0d, 0x0a, 0x07}) + "crihook" + bytesOf({0x12, 0x02}) +
      "10" + bytesOf({0x20, 0x80, 0xa8, 0xd6, 0xb9, 0x07});  // timeout_nano 2e9
  EXPECT_EQ(wire, expected);
}

TEST(NriWireTest, TheRuntimesReplyComesOutWhole) {
  // An empty google.rpc.Status (success), as ttrpc's server always sends.
  const std::string reply =
      bytesOf({0, 0, 0, 2, 0, 0, 0, 0x0c, 0, 0, 0, 2, 0, 0, 0, 1, 2, 0, 0x0a, 0x00});
  for (size_t piece : {1, 3, 8, 64}) {
    auto messages = demux(reply, piece);
    ASSERT_EQ(messages.size(), 1u) << piece;
    EXPECT_EQ(messages[0].conn, kRuntimeServiceConn);
    EXPECT_EQ(messages[0].stream, 1u);
    EXPECT_EQ(messages[0].type, static_cast<uint8_t>(MessageType::kResponse));
    ::ttrpc::Response resp;
    ASSERT_TRUE(resp.ParseFromString(messages[0].payload));
    EXPECT_TRUE(resp.has_status());
    EXPECT_EQ(resp.status().code(), 0);
  }
}

TEST(NriWireTest, ALongMessageGoesInFramesAGoPeerReads) {
  const std::string payload(10000, 'p');
  std::string wire;
  ASSERT_TRUE(appendMessage(wire, {kPluginServiceConn, 7, 2, 0, payload}).ok());
  ASSERT_TRUE(appendMessage(wire, {kPluginServiceConn, 9, 2, 0, "short"}).ok());
  // Every frame at most 4096 bytes; the second message starts a frame.
  std::vector<size_t> lengths;
  for (size_t at = 0; at < wire.size();) {
    const size_t n = (static_cast<uint8_t>(wire[at + 6]) << 8) | static_cast<uint8_t>(wire[at + 7]);
    EXPECT_LE(n, kMaxMuxWrite);
    lengths.push_back(n);
    at += kMuxHeaderBytes + n;
  }
  EXPECT_EQ(lengths, (std::vector<size_t>{4096, 4096, 1818, 15}));
  for (size_t piece : {1, 100, 4104, 100000}) {
    auto messages = demux(wire, piece);
    ASSERT_EQ(messages.size(), 2u) << piece;
    EXPECT_EQ(messages[0].payload, payload);
    EXPECT_EQ(messages[0].stream, 7u);
    EXPECT_EQ(messages[1].payload, "short");
  }
}

TEST(NriWireTest, InterleavedConnectionsComeApart) {
  std::string one, two;
  ASSERT_TRUE(appendMessage(one, {kPluginServiceConn, 1, 1, 0, std::string(5000, 'a')}).ok());
  ASSERT_TRUE(appendMessage(two, {kRuntimeServiceConn, 1, 2, 0, std::string(5000, 'b')}).ok());
  // Frame by frame, alternating: what a runtime answering while it calls does.
  const size_t first = kMuxHeaderBytes + kMaxMuxWrite;
  const std::string wire = one.substr(0, first) + two.substr(0, first) + two.substr(first) +
                           one.substr(first) + bytesOf({0, 0, 0, 3, 0, 0, 0, 2}) + "xx";
  auto messages = demux(wire, 7);
  ASSERT_EQ(messages.size(), 2u) << "connection 3's bytes are dropped";
  EXPECT_EQ(messages[0].conn, kRuntimeServiceConn);
  EXPECT_EQ(messages[0].payload, std::string(5000, 'b'));
  EXPECT_EQ(messages[1].conn, kPluginServiceConn);
  EXPECT_EQ(messages[1].payload, std::string(5000, 'a'));
}

TEST(NriWireTest, AMessageOverTtrpcsLimitIsDroppedAndReported) {
  const size_t length = kMaxTtrpcMessage + 1;
  std::string wire;
  std::string ttrpc =
      bytesOf({static_cast<int>(length >> 24), static_cast<int>((length >> 16) & 0xff),
               static_cast<int>((length >> 8) & 0xff), static_cast<int>(length & 0xff), 0, 0, 0, 5,
               1, 0}) +
      std::string(length, 'x');
  for (size_t at = 0; at < ttrpc.size(); at += 1 << 20) {
    const std::string piece = ttrpc.substr(at, 1 << 20);
    wire += bytesOf({0, 0, 0, 1, static_cast<int>(piece.size() >> 24),
                     static_cast<int>((piece.size() >> 16) & 0xff),
                     static_cast<int>((piece.size() >> 8) & 0xff),
                     static_cast<int>(piece.size() & 0xff)}) +
            piece;
  }
  ASSERT_TRUE(appendMessage(wire, {kPluginServiceConn, 7, 1, 0, "next"}).ok());
  auto messages = demux(wire, 65536);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_TRUE(messages[0].too_large);
  EXPECT_EQ(messages[0].stream, 5u);
  EXPECT_TRUE(messages[0].payload.empty());
  EXPECT_EQ(messages[1].payload, "next") << "the connection goes on";

  std::string out = "kept";
  EXPECT_EQ(appendMessage(out, {kPluginServiceConn, 1, 1, 0, std::string(length, 'x')}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, "kept");
}

TEST(NriWireTest, AFrameForConnectionZeroOrOverTheMuxLimitEndsTheConnection) {
  absl::Status st;
  demux(bytesOf({0, 0, 0, 0, 0, 0, 0, 1, 'x'}), 4, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("connection 0"), std::string_view::npos) << st;
  demux(bytesOf({0, 0, 0, 1, 0x01, 0, 0, 1}), 8, &st);  // 16 MiB + 1
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("16777217"), std::string_view::npos) << st;

  Demux d;
  std::vector<Message> out;
  EXPECT_FALSE(d.feed(bytesOf({0, 0, 0, 0, 0, 0, 0, 0}), out).ok());
  EXPECT_EQ(d.feed("anything", out).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(appendMessage(out.emplace_back().payload, {0, 1, 1, 0, "x"}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace crihook::nri
