// state_version.h: the version every state file carries, and the check every
// reader makes before trusting the rest. How the pod records use it is
// state_store_test's (FilesCarryTheirVersion..., ANewerVersionIsSkipped...).
#include "hooks/state_version.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace crihook {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<uint32_t> versionOf(const std::string& json, uint32_t newest = 2) {
  return stateVersionOf(nlohmann::json::parse(json), newest, "pod record /s/pods/sb1.json");
}

TEST(StateVersion, AFileWithoutAVersionIsVersionOneAndOneWithItsOwnIsRead) {
  EXPECT_EQ(versionOf(R"({"pod": {}})").value(), 1u);
  EXPECT_EQ(versionOf(R"({"version": 1, "pod": {}})").value(), 1u);
  EXPECT_EQ(versionOf(R"({"version": 2})").value(), 2u);
}

TEST(StateVersion, ANewerVersionIsRefusedNamingTheFileAndTheVersionsRead) {
  auto v = versionOf(R"({"version": 3})");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(v.status().message(),
            "pod record /s/pods/sb1.json: format version 3; this crihookd reads versions 1 to 2 "
            "(the file was written by a newer crihookd)");
}

TEST(StateVersion, AVersionThatIsNotAPositiveIntegerIsInvalidAndCutShort) {
  for (const char* bad : {R"({"version": 0})", R"({"version": -1})", R"({"version": 1.5})",
                          R"({"version": "1"})", R"({"version": 4294967296})"}) {
    auto v = versionOf(bad);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(v.status().message()),
                HasSubstr("pod record /s/pods/sb1.json: version: expected a positive integer"))
        << bad;
  }
  auto v = versionOf(R"({"version": ")" + std::string(100, 'x') + R"("})");
  EXPECT_LT(v.status().message().size(), 140u) << v.status();
  EXPECT_EQ(versionOf("[1]").status().message(), "pod record /s/pods/sb1.json: not a JSON object");
}

}  // namespace
}  // namespace crihook
