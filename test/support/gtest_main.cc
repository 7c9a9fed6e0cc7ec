// The main of every crihook test program (instead of gtest_main): runs the
// tests, and when not one test proved anything (every test that ran was
// skipped, or none ran) exits 77, which meson's gtest and exitcode protocols
// count as SKIP. gtest itself exits 0 then, and meson would report OK: a
// suite skipped for a missing tool would pass unnoticed.
//
// The reasons go to stdout on lines starting "crihook-skip: " (the test's
// name, then its first skip message cut to kMaxReasonBytes), where
// scripts/test-summary.py reads them from each phase's meson log for the closing line.
// A program with some tests passed and some skipped exits as gtest says (its
// skipped tests are listed in the JUnit XML).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

// meson's (and automake's) "this test was skipped".
constexpr int kSkipExitCode = 77;
// A skip message is one line in a closing summary: longer ones are cut.
constexpr size_t kMaxReasonBytes = 160;
// A program that skips many tests (one fixture's SetUp) names the first few.
constexpr int kMaxReasons = 3;

std::string firstSkipMessage(const ::testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const auto& part = result.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string m = part.message();
    // gtest prefixes "Skipped\n" to an empty or streamed message.
    if (m.rfind("Skipped\n", 0) == 0) m.erase(0, 8);
    for (char& c : m) {
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    }
    if (m.size() > kMaxReasonBytes) m = m.substr(0, kMaxReasonBytes) + "...";
    return m.empty() ? "(no reason given)" : m;
  }
  return "(no reason given)";
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleMock(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  // A list run (--gtest_list_tests) runs nothing and is no skip.
#ifdef GTEST_FLAG_GET
  const bool listing = GTEST_FLAG_GET(list_tests);
#else
  const bool listing = ::testing::GTEST_FLAG(list_tests);
#endif
  if (rc != 0 || listing) return rc;
  const int ran = unit.test_to_run_count();
  if (ran > 0 && unit.skipped_test_count() < ran) return rc;
  if (ran == 0) {
    std::printf("crihook-skip: no test ran\n");
    return kSkipExitCode;
  }
  int named = 0;
  for (int s = 0; s < unit.total_test_suite_count() && named < kMaxReasons; ++s) {
    const auto& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count() && named < kMaxReasons; ++t) {
      const auto& info = *suite.GetTestInfo(t);
      if (!info.should_run() || !info.result()->Skipped()) continue;
      std::printf("crihook-skip: %s.%s: %s\n", suite.name(), info.name(),
                  firstSkipMessage(*info.result()).c_str());
      ++named;
    }
  }
  std::fflush(stdout);
  return kSkipExitCode;
}
