// RelayedStreams (proxy/relayed_streams.h): the bookkeeping of the streams
// relayed frame by frame — the calls in flight, the metrics of each call
// once, and the end crihookd writes kubelet when it ends a stream itself,
// read back as kubelet reads it.

#include "proxy/relayed_streams.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <memory>
#include <string>

#include "metrics/call_metrics.h"
#include "metrics/metric_registry.h"
#include "proxy/call_budget.h"
#include "proxy/h2_frame.h"
#include "proxy/hpack.h"

namespace crihook::relay {
namespace {

using ::testing::HasSubstr;

constexpr const char* kVersion = "/runtime.v1.RuntimeService/Version";

class RelayedStreamsTest : public ::testing::Test {
 protected:
  RelayedStreamsTest() : metrics_(registry_) {
    ctx_.max_message_bytes = 100;
    ctx_.call_metrics = &metrics_;
    ctx_.log =
        std::make_shared<spdlog::logger>("proxy", std::make_shared<spdlog::sinks::null_sink_mt>());
  }

  // crihook_cri_calls_total of Version with `code`, as exposed.
  std::string versionCalls(const std::string& code) const {
    return "crihook_cri_calls_total{service=\"runtime.v1.RuntimeService\",method=\"Version\","
           "code=\"" +
           code + "\"}";
  }

  // The frame kubelet reads in `frames` (one), and the fields of its block.
  struct Read {
    h2::FrameHeader header;
    std::vector<std::pair<std::string, std::string>> fields;
    uint32_t reset_code = 0;
  };
  static Read read(std::string_view frames) {
    Read r;
    EXPECT_GE(frames.size(), h2::kFrameHeaderBytes);
    r.header = h2::parseFrameHeader(reinterpret_cast<const uint8_t*>(frames.data()));
    const std::string_view payload = frames.substr(h2::kFrameHeaderBytes, r.header.length);
    EXPECT_EQ(frames.size(), h2::kFrameHeaderBytes + r.header.length) << "one frame";
    if (r.header.type == h2::FrameType::kRstStream) {
      r.reset_code = h2::rstStreamCodeOf(payload).value_or(0);
    } else if (r.header.type == h2::FrameType::kHeaders) {
      hpack::Decoder decoder;
      auto st = decoder.decode(payload, [&](std::string_view n, std::string_view v) {
        r.fields.emplace_back(std::string(n), std::string(v));
      });
      EXPECT_TRUE(st.ok()) << st;
    }
    return r;
  }
  static bool has(const Read& r, const std::string& name, const std::string& value) {
    return std::find(r.fields.begin(), r.fields.end(), std::pair{name, value}) != r.fields.end();
  }

  metrics::Registry registry_;
  metrics::CallMetrics metrics_;
  RelayContext ctx_;
  RelayedStreams streams_{ctx_};
};

TEST_F(RelayedStreamsTest, AStreamIsACallInFlightUntilItsEndWhichIsRecordedOnce) {
  EXPECT_TRUE(streams_.empty());
  streams_.open(1, kVersion);
  EXPECT_EQ(ctx_.active_calls.load(), 1);
  ASSERT_NE(streams_.find(1), nullptr);
  EXPECT_EQ(streams_.find(1)->path, kVersion);
  streams_.end(1, absl::NotFoundError("gone"));
  EXPECT_EQ(ctx_.active_calls.load(), 0);
  EXPECT_TRUE(streams_.empty());
  EXPECT_THAT(registry_.expose(), HasSubstr(versionCalls("NOT_FOUND") + " 1\n"));
  streams_.end(1, absl::OkStatus());  // no longer relayed: nothing
  EXPECT_THAT(registry_.expose(), ::testing::Not(HasSubstr(versionCalls("OK"))));
}

TEST_F(RelayedStreamsTest, ACutBeforeTheReplyIsATrailersOnlyAnswer) {
  streams_.open(1, kVersion);
  std::string kubelet;
  ASSERT_TRUE(streams_.cut(1, absl::ResourceExhaustedError("too big"), 0, 16384, kubelet));
  const Read r = read(kubelet);
  EXPECT_EQ(r.header.type, h2::FrameType::kHeaders);
  EXPECT_TRUE(r.header.has(h2::flags::kEndStream));
  EXPECT_TRUE(has(r, ":status", "200"));
  EXPECT_TRUE(has(r, "grpc-status", "8"));
  EXPECT_TRUE(has(r, "grpc-message", "too big"));
  EXPECT_EQ(ctx_.active_calls.load(), 0) << "no longer in flight";
  EXPECT_THAT(registry_.expose(), HasSubstr(versionCalls("RESOURCE_EXHAUSTED") + " 1\n"));
  ASSERT_NE(streams_.find(1), nullptr) << "kept, cut, for the frames still coming";
  EXPECT_TRUE(streams_.find(1)->cut);
  std::string again;
  EXPECT_FALSE(streams_.cut(1, absl::InternalError("twice"), 0, 16384, again));
  EXPECT_TRUE(again.empty());
  streams_.end(1, absl::OkStatus());  // the runtime's end: forgotten, not recorded again
  EXPECT_TRUE(streams_.empty());
  EXPECT_THAT(registry_.expose(), ::testing::Not(HasSubstr(versionCalls("OK"))));
}

TEST_F(RelayedStreamsTest, ACutAfterWholeMessagesIsTrailersAndInsideOneAReset) {
  const std::string message("\0\0\0\0\3abc", 8);
  streams_.open(1, kVersion).reply_headers = true;
  streams_.find(1)->reply.feed(reinterpret_cast<const uint8_t*>(message.data()), message.size());
  std::string at_edge;
  ASSERT_TRUE(streams_.cut(1, absl::CancelledError("cut"), 0, 16384, at_edge));
  const Read trailers = read(at_edge);
  EXPECT_EQ(trailers.header.type, h2::FrameType::kHeaders);
  EXPECT_FALSE(has(trailers, ":status", "200")) << "trailers, not a second response";
  EXPECT_TRUE(has(trailers, "grpc-status", "1"));

  streams_.open(3, kVersion).reply_headers = true;
  streams_.find(3)->reply.feed(reinterpret_cast<const uint8_t*>(message.data()), 6);
  std::string inside;
  ASSERT_TRUE(streams_.cut(3, absl::CancelledError("cut"), 0, 16384, inside));
  EXPECT_EQ(read(inside).reset_code, h2::error::kInternalError)
      << "a message half sent cannot end with a status";

  streams_.open(5, kVersion);
  std::string reset;
  ASSERT_TRUE(
      streams_.cut(5, absl::InternalError("trailers"), h2::error::kProtocolError, 16384, reset));
  EXPECT_EQ(read(reset).reset_code, h2::error::kProtocolError);
}

TEST_F(RelayedStreamsTest, CutStreamsAreForgottenAfterTheirLinger) {
  streams_.open(1, kVersion);
  std::string kubelet;
  ASSERT_TRUE(streams_.cut(1, absl::CancelledError("cut"), 0, 16384, kubelet));
  streams_.dropCut(Clock::now());
  EXPECT_NE(streams_.find(1), nullptr);
  streams_.dropCut(Clock::now() + kZombieLinger);
  EXPECT_EQ(streams_.find(1), nullptr);
}

TEST_F(RelayedStreamsTest, IdsComeInOrderAndAClosedConnectionCancelsWhatIsOpen) {
  for (uint32_t id : {7u, 1u, 5u, 3u}) streams_.open(id, kVersion);
  EXPECT_THAT(streams_.idsAbove(0), ::testing::ElementsAre(1u, 3u, 5u, 7u));
  EXPECT_THAT(streams_.idsAbove(3), ::testing::ElementsAre(5u, 7u));
  std::string kubelet;
  ASSERT_TRUE(streams_.cut(7, absl::ResourceExhaustedError("cut"), 0, 16384, kubelet));
  streams_.closeAll();
  EXPECT_TRUE(streams_.empty());
  EXPECT_EQ(ctx_.active_calls.load(), 0);
  EXPECT_THAT(registry_.expose(), HasSubstr(versionCalls("CANCELLED") + " 3\n"));
  EXPECT_THAT(registry_.expose(), HasSubstr(versionCalls("RESOURCE_EXHAUSTED") + " 1\n"));
}

}  // namespace
}  // namespace crihook::relay
