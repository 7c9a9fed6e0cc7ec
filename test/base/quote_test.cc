// quote() and boundedMessage(): untrusted text in a log line or a status
// message is one line of printable ASCII, and short.

#include "base/quote.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace crihook {
namespace {

bool printableOneLine(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

TEST(Quoted, PrintableAsciiIsKeptInQuotes) {
  EXPECT_EQ(quote("train-0"), "\"train-0\"");
  EXPECT_EQ(quote(""), "\"\"");
}

TEST(Quoted, EverythingElseIsEscapedSoNoLineCanBeForged) {
  EXPECT_EQ(quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(quote("pod\n2026-11-30 [info] forged"), R"("pod\x0a2026-11-30 [info] forged")");
  EXPECT_EQ(quote("\r\t\x1b[31m\x7f"), R"("\x0d\x09\x1b[31m\x7f")");
  EXPECT_EQ(quote("h\xc3\xa9"), R"("h\xc3\xa9")");  // UTF-8 bytes
  EXPECT_EQ(quote(std::string("a\0b", 3)), R"("a\x00b")");
}

TEST(Quoted, CutAtTheLimitWithAMarker) {
  const std::string id(10 << 20, 'x');
  const std::string q = quote(id);
  EXPECT_EQ(q, "\"" + std::string(kMaxQuotedBytes, 'x') + "\"...");
  EXPECT_EQ(quote("abcdef", 3), "\"abc\"...");
  EXPECT_EQ(quote("abc", 3), "\"abc\"");
  // The worst case: every byte escaped.
  const std::string worst = quote(std::string(1000, '\n'), 10);
  EXPECT_EQ(worst.size(), 4 * 10 + 5u);
  EXPECT_TRUE(printableOneLine(worst));
}

TEST(BoundedMessage, ShortMessagesAreKeptAndMadeOneLine) {
  EXPECT_EQ(boundedMessage("hook gpu: GPU minor 3 is not on this node"),
            "hook gpu: GPU minor 3 is not on this node");
  EXPECT_EQ(boundedMessage("pod a\nb\x01"), "pod a?b?");
  EXPECT_EQ(boundedMessage("tab\tkept"), "tab\tkept");
}

TEST(BoundedMessage, ALongMessageIsCutToTheLimitWithTheCountCut) {
  const std::string m = "id " + std::string(10 << 20, 'x');
  const std::string b = boundedMessage(m);
  EXPECT_LE(b.size(), kMaxStatusMessageBytes);
  EXPECT_EQ(b.substr(0, 5), "id xx");
  EXPECT_NE(b.find(" ... ("), std::string::npos);
  EXPECT_TRUE(b.ends_with(" bytes cut)")) << b.substr(b.size() - 40);
  EXPECT_LE(boundedMessage(m, 10).size(), 10u);
}

}  // namespace
}  // namespace crihook
