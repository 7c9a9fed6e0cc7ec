// e2e_env.h: which values of CRIHOOK_E2E_REQUIRED make the e2e suites
// mandatory, and what the machine is checked for.

#include "test/support/e2e_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace crihook::testing {
namespace {

class E2eRequiredTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("CRIHOOK_E2E_REQUIRED"); }
  static bool with(const char* value) {
    ::setenv("CRIHOOK_E2E_REQUIRED", value, 1);
    return e2eRequired();
  }
};

TEST_F(E2eRequiredTest, AnyTruthySpellingCounts) {
  for (const char* v : {"1", "true", "TRUE", "True", "yes", "Yes", "on", "ON", " on ", "\ttrue\n"})
    EXPECT_TRUE(with(v)) << '"' << v << '"';
}

TEST_F(E2eRequiredTest, AnythingElseDoesNot) {
  ::unsetenv("CRIHOOK_E2E_REQUIRED");
  EXPECT_FALSE(e2eRequired());
  for (const char* v : {"", "0", "false", "no", "off", "2", "y", "truthy", "1 1", "enabled"})
    EXPECT_FALSE(with(v)) << '"' << v << '"';
}

TEST(E2eMissingTest, NamesWhatThisMachineLacks) {
  const std::string missing = e2eMissing();
  EXPECT_EQ(missing.find(" root") != std::string::npos, ::geteuid() != 0) << missing;
  // With an empty PATH no command is found.
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", "/nonexistent", 1);
  const std::string none = e2eMissing();
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_NE(none.find(" containerd runc ctr busybox"), std::string::npos) << none;
}

}  // namespace
}  // namespace crihook::testing
