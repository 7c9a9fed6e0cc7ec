// parseJsonBounded and shownJson: JSON from outside is parsed within bytes
// and nesting, and shown in messages cut short, never serialised whole.

#include "base/bounded_json.h"

#include <gtest/gtest.h>

#include "base/quote.h"

namespace crihook {
namespace {

std::string message(const absl::Status& s) { return std::string(s.message()); }

TEST(ParseJsonBounded, WithinBoundsIsParsed) {
  auto v = parseJsonBounded(R"({"a": [1, {"b": "[[["}]})", 1024, 3);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)["a"][1]["b"], "[[[");
}

// 60,000 nested `[` once crashed the daemon in the first recursive walk.
TEST(ParseJsonBounded, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  EXPECT_EQ(message(parseJsonBounded(deep, 1 << 20).status()), "nested deeper than 32");
  EXPECT_EQ(message(parseJsonBounded(R"([[[1]]])", 64, 2).status()), "nested deeper than 2");
  // Brackets inside strings (with escaped quotes) do not count.
  EXPECT_TRUE(parseJsonBounded(R"(["\"[[[[[[", "]]"])", 64, 1).ok());
}

TEST(ParseJsonBounded, TooLargeOrNotJsonIsRefused) {
  EXPECT_EQ(message(parseJsonBounded("[1,2,3]", 6).status()), "7 bytes, more than the 6 allowed");
  EXPECT_EQ(message(parseJsonBounded("{", 6).status()), "not valid JSON");
}

TEST(ShownJson, ValuesAreCutAndStringsQuoted) {
  EXPECT_EQ(shownJson(nlohmann::json("x\ny")), R"("x\x0ay")");
  EXPECT_EQ(shownJson(nlohmann::json(std::string(1 << 20, 'a'))),
            "\"" + std::string(kMaxQuotedBytes, 'a') + "\"...");
  EXPECT_EQ(shownJson(nlohmann::json::parse(R"({"a":1})")), R"({"a":1})");
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back("\xc3\xa9\n");
  const std::string s = shownJson(big);
  EXPECT_EQ(s.size(), kMaxQuotedBytes + 3);
  EXPECT_EQ(s.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace crihook
