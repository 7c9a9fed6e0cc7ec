// base/logging.h: the line every logger writes (the format docs/operations.md
// shows an operator) and the level, for loggers made before and after it is set.

#include "base/logging.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace crihook {
namespace {

// What `write` logs to stderr.
template <typename Write>
std::string stderrOf(Write write) {
  ::testing::internal::CaptureStderr();
  write();
  return ::testing::internal::GetCapturedStderr();
}

TEST(LoggingTest, ALineIsTimeLevelLoggerAndMessage) {
  auto log = logger("logging-test");
  const std::string out = stderrOf([&] {
    log->info("hello {}", 1);
    log->warn("careful");
  });
  // 2026-12-04T15:53:31.889784+00:00 I hook: ...
  const std::string time =
      R"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}[+-][0-9]{2}:[0-9]{2})";
  EXPECT_TRUE(std::regex_match(
      out, std::regex(time + " I logging-test: hello 1\n" + time + " W logging-test: careful\n")))
      << out;
  EXPECT_EQ(logger("logging-test"), log) << "one logger per name";
}

TEST(LoggingTest, TheLevelAppliesToLoggersMadeBeforeAndAfterIt) {
  auto before = logger("logging-before");
  setLogLevel("debug");
  auto after = logger("logging-after");
  EXPECT_NE(stderrOf([&] { before->debug("shown"); }), "");
  EXPECT_NE(stderrOf([&] { after->debug("shown"); }), "");
  setLogLevel("warn");
  auto later = logger("logging-later");
  EXPECT_EQ(stderrOf([&] {
              before->info("hidden");
              after->info("hidden");
              later->info("hidden");
            }),
            "");
  EXPECT_NE(stderrOf([&] { later->warn("shown"); }), "");
  setLogLevel("info");
}

}  // namespace
}  // namespace crihook
