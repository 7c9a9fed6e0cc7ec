// PingAcks (proxy/ping_acks.h): when kubelet's PING ACKs go, and the bound
// on those kubelet does not read. What it means on the wire, against a real
// client, is h2_edge's PingTest.

#include "proxy/ping_acks.h"

#include <gtest/gtest.h>

#include <string>

#include "proxy/h2_frame.h"

namespace crihook::relay {
namespace {

// The opaque data of every PING ACK in `frames`, in order.
std::vector<std::string> ackedOpaques(std::string_view frames) {
  std::vector<std::string> out;
  while (frames.size() >= h2::kFrameHeaderBytes) {
    auto h = h2::parseFrameHeader(reinterpret_cast<const uint8_t*>(frames.data()));
    EXPECT_EQ(h.type, h2::FrameType::kPing);
    EXPECT_TRUE(h.has(h2::flags::kAck));
    EXPECT_EQ(h.stream_id, 0u);
    out.emplace_back(frames.substr(h2::kFrameHeaderBytes, h.length));
    frames.remove_prefix(h2::kFrameHeaderBytes + h.length);
  }
  EXPECT_TRUE(frames.empty());
  return out;
}

TEST(PingAcks, AnAckWaitsOnlyWhileAReplyIsExpected) {
  PingAcks acks;
  EXPECT_FALSE(acks.owed());
  acks.owe("12345678");
  EXPECT_TRUE(acks.owed());
  EXPECT_FALSE(acks.dueNow(true)) << "a reply to ride with is coming";
  EXPECT_TRUE(acks.dueNow(false)) << "none is: at once";
}

TEST(PingAcks, PastSixteenOwedTheyGoAtOnce) {
  PingAcks acks;
  for (size_t i = 0; i + 1 < kMaxOwedPingAcks; ++i) acks.owe("12345678");
  EXPECT_FALSE(acks.dueNow(true));
  acks.owe("12345678");
  EXPECT_TRUE(acks.dueNow(true));
}

TEST(PingAcks, TakeWritesEveryOwedAckInOrderOnce) {
  PingAcks acks;
  acks.owe("aaaaaaaa");
  acks.owe("bbbbbbbb");
  auto frames = acks.take();
  ASSERT_TRUE(frames.ok()) << frames.status();
  EXPECT_EQ(ackedOpaques(*frames), (std::vector<std::string>{"aaaaaaaa", "bbbbbbbb"}));
  EXPECT_FALSE(acks.owed());
  auto none = acks.take();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(PingAcks, AKubeletThatDoesNotReadTheAcksEndsTheConnection) {
  PingAcks acks;
  for (size_t i = 0; i < kMaxUnreadPingAcks; ++i) {
    acks.owe("12345678");
    ASSERT_TRUE(acks.take().ok()) << i;
  }
  acks.owe("12345678");
  auto over = acks.take();
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(acks.owed());
}

TEST(PingAcks, AKubeletThatReadsMayBeAckedWithoutEnd) {
  PingAcks acks;
  for (size_t i = 0; i < 3 * kMaxUnreadPingAcks; ++i) {
    acks.owe("12345678");
    ASSERT_TRUE(acks.take().ok()) << i;
    acks.onKubeletRead();
  }
}

}  // namespace
}  // namespace crihook::relay
