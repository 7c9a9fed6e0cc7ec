#include "base/grpc_wire.h"

#include <gtest/gtest.h>

namespace crihook::grpcwire {
namespace {

using namespace std::chrono_literals;

std::string header(uint32_t len, uint8_t flag = 0) {
  return std::string{static_cast<char>(flag), static_cast<char>(len >> 24),
                     static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                     static_cast<char>(len)};
}

TEST(FrameTracker, FollowsMessagesSplitAnywhere) {
  std::string bytes = header(3) + "abc" + header(0) + header(2) + "xy";
  for (size_t step = 1; step <= bytes.size(); ++step) {
    FrameTracker t(16);
    for (size_t pos = 0; pos < bytes.size(); pos += step) {
      size_t n = std::min(step, bytes.size() - pos);
      EXPECT_EQ(t.feed(reinterpret_cast<const uint8_t*>(bytes.data() + pos), n), n);
    }
    EXPECT_EQ(t.messages(), 3u) << "step " << step;
    EXPECT_TRUE(t.atBoundary());
    EXPECT_FALSE(t.tooLarge());
  }
}

TEST(FrameTracker, StopsAtTheHeaderOfAMessageOverTheLimit) {
  std::string bytes = header(2) + "ok" + header(17) + std::string(17, 'x');
  FrameTracker t(16);
  size_t ok = t.feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_EQ(ok, 7u) << "the whole first message may still go out";
  EXPECT_TRUE(t.tooLarge());
  EXPECT_TRUE(t.cleanCut());
  EXPECT_EQ(t.announcedBytes(), 17u);
}

TEST(FrameTracker, OversizedHeaderSplitAcrossChunksIsNotACleanCut) {
  std::string h = header(1000);
  FrameTracker t(16);
  EXPECT_EQ(t.feed(reinterpret_cast<const uint8_t*>(h.data()), 2), 2u);
  EXPECT_EQ(t.feed(reinterpret_cast<const uint8_t*>(h.data() + 2), 3), 0u);
  EXPECT_TRUE(t.tooLarge());
  EXPECT_FALSE(t.cleanCut());
}

TEST(SingleMessage, AcceptsExactlyOneUncompressedMessage) {
  const std::string body = header(3) + "abc";  // the view points into it
  auto m = singleMessage(body);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(std::string(*m), "abc");
  EXPECT_EQ(singleMessage(header(3) + "ab").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(singleMessage(header(1) + "a" + header(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(singleMessage(header(1, 1) + "a").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(singleMessage("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(frame("abc"), header(3) + "abc");
}

TEST(Timeout, ParsesEveryUnitAndRejectsGarbage) {
  EXPECT_EQ(parseTimeout("100m"), std::chrono::nanoseconds(100ms));
  EXPECT_EQ(parseTimeout("2S"), std::chrono::nanoseconds(2s));
  EXPECT_EQ(parseTimeout("3M"), std::chrono::nanoseconds(3min));
  EXPECT_EQ(parseTimeout("1H"), std::chrono::nanoseconds(1h));
  EXPECT_EQ(parseTimeout("7u"), std::chrono::nanoseconds(7us));
  EXPECT_EQ(parseTimeout("9n"), std::chrono::nanoseconds(9));
  EXPECT_FALSE(parseTimeout("10"));
  EXPECT_FALSE(parseTimeout("m"));
  EXPECT_FALSE(parseTimeout("123456789S")) << "at most 8 digits";
  EXPECT_FALSE(parseTimeout("1x"));
  EXPECT_FALSE(parseTimeout("-1S"));
}

// Found by fuzz/fuzz_grpc_wire: 8 digits of hours overflowed int64
// nanoseconds (undefined behaviour; the deadline wrapped into the past).
TEST(Timeout, HoursAndMinutesBeyondInt64NanosecondsAreClampedNotWrapped) {
  EXPECT_EQ(parseTimeout("99999999H"), std::chrono::nanoseconds::max());
  EXPECT_EQ(parseTimeout("2562048H"), std::chrono::nanoseconds::max());
  EXPECT_EQ(parseTimeout("2562047H"), std::chrono::nanoseconds(std::chrono::hours(2562047)));
  EXPECT_EQ(parseTimeout("99999999M"), std::chrono::nanoseconds(std::chrono::minutes(99999999)));
  EXPECT_EQ(parseTimeout("99999999S"), std::chrono::nanoseconds(std::chrono::seconds(99999999)));
  // And the longest one formats to what parses back to it.
  EXPECT_EQ(parseTimeout(formatTimeout(std::chrono::nanoseconds::max())),
            std::chrono::nanoseconds::max());
}

TEST(Timeout, FormatsWithinEightDigitsNeverShorter) {
  for (auto d : {std::chrono::nanoseconds(1), std::chrono::nanoseconds(99999999),
                 std::chrono::nanoseconds(100000001), std::chrono::nanoseconds(1234567891234),
                 std::chrono::nanoseconds(std::chrono::hours(200))}) {
    std::string s = formatTimeout(d);
    EXPECT_LE(s.size(), 9u) << s;
    auto back = parseTimeout(s);
    ASSERT_TRUE(back) << s;
    EXPECT_GE(*back, d) << s;
  }
}

TEST(PercentEncoding, RoundTripsAnyMessage) {
  std::string m = "100% sure\n\"quoted\" \xc3\xa9";
  std::string enc = percentEncode(m);
  EXPECT_EQ(enc.find('\n'), std::string::npos);
  EXPECT_EQ(percentDecode(enc), m);
  EXPECT_EQ(percentDecode("a%2"), "a%2") << "a truncated escape stays as it is";
}

TEST(Status, FieldsReadAsGrpcGoReadsThem) {
  const std::string five = "5", msg = "pod %22x%22 %C3%B6", junk = "5x", big = "99", zero = "0";
  absl::Status s = statusOfFields(&five, &msg);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "pod \"x\" \xc3\xb6");
  EXPECT_TRUE(statusOfFields(&zero, nullptr).ok());
  EXPECT_EQ(statusOfFields(nullptr, nullptr).code(), absl::StatusCode::kUnknown);
  // atoi would read "5x" as 5 and "" as OK.
  EXPECT_EQ(statusOfFields(&junk, nullptr).code(), absl::StatusCode::kInternal);
  const std::string empty;
  EXPECT_EQ(statusOfFields(&empty, nullptr).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(statusOfFields(&big, &msg).code(), absl::StatusCode::kUnknown);
}

TEST(Status, HttpStatusAndResetCodesMapAsGrpcDocumentsThem) {
  EXPECT_EQ(codeOfHttpStatus(400), absl::StatusCode::kInternal);
  EXPECT_EQ(codeOfHttpStatus(401), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(codeOfHttpStatus(403), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(codeOfHttpStatus(404), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(codeOfHttpStatus(503), absl::StatusCode::kUnavailable);
  EXPECT_EQ(codeOfHttpStatus(500), absl::StatusCode::kUnknown);
  EXPECT_EQ(codeOfReset(0x7), absl::StatusCode::kUnavailable);  // REFUSED_STREAM
  EXPECT_EQ(codeOfReset(0x8), absl::StatusCode::kCancelled);    // CANCEL
  EXPECT_EQ(codeOfReset(0x2), absl::StatusCode::kInternal);     // INTERNAL_ERROR
}

}  // namespace
}  // namespace crihook::grpcwire
