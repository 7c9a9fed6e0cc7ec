// metrics/metric_registry.cc: families, series, the cap, concurrent
// recording, and the text exposition format (which crihookctl reads back).

#include "metrics/metric_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "tools/crihookctl/status.h"

namespace crihook::metrics {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(RegistryTest, CountersAndGaugesHaveHelpTypeAndLabels) {
  Registry r;
  auto& calls = r.counter("crihook_x_total", "Things done.", {"kind"});
  calls.with({"a"}).inc();
  calls.with({"a"}).inc(2);
  calls.with({"b"}).inc();
  r.gauge("crihook_level", "A level.").with({}).set(-4);
  const std::string text = r.expose();
  EXPECT_THAT(text,
              HasSubstr("# HELP crihook_x_total Things done.\n# TYPE crihook_x_total counter\n"
                        "crihook_x_total{kind=\"a\"} 3\ncrihook_x_total{kind=\"b\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE crihook_level gauge\ncrihook_level -4\n"));
}

// A gauge function (connections open, calls in flight) is read anew at
// each scrape.
TEST(RegistryTest, AGaugeFunctionIsReadAtEachScrape) {
  Registry r;
  double open = 3;
  r.gaugeFunction("crihook_open", "Open now.", [&] { return open; });
  EXPECT_THAT(r.expose(), HasSubstr("# HELP crihook_open Open now.\n# TYPE crihook_open "
                                    "gauge\ncrihook_open 3\n"));
  open = 5;
  EXPECT_THAT(r.expose(), HasSubstr("\ncrihook_open 5\n"));
}

TEST(RegistryTest, AskingTwiceForAFamilyReturnsTheSameOne) {
  Registry r;
  auto& a = r.counter("crihook_y_total", "Y.", {"k"});
  auto& b = r.counter("crihook_y_total", "Y again.", {"k"});
  EXPECT_EQ(&a, &b);
  a.with({"v"}).inc();
  b.with({"v"}).inc();
  EXPECT_EQ(a.with({"v"}).value(), 2u);
  const std::string text = r.expose();
  EXPECT_EQ(text.find("# HELP crihook_y_total"), text.rfind("# HELP crihook_y_total"));
}

TEST(RegistryTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.counter("crihook_z_total", "back\\slash and\nnewline", {"v"})
      .with({"quote\" back\\slash\nnewline"})
      .inc();
  const std::string text = r.expose();
  EXPECT_THAT(text, HasSubstr("# HELP crihook_z_total back\\\\slash and\\nnewline\n"));
  EXPECT_THAT(text, HasSubstr("crihook_z_total{v=\"quote\\\" back\\\\slash\\nnewline\"} 1\n"));
  // Every sample is one line: the newline inside the value did not split it.
  EXPECT_THAT(text, Not(HasSubstr("\nnewline")));
}

TEST(RegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  static const std::vector<double> kBounds = {0.001, 0.01, 0.1};
  auto& h = r.histogram("crihook_h_seconds", "H.", {"m"}, kBounds).with({"x"});
  h.observe(0.0005);  // first bucket
  h.observe(0.001);   // le is inclusive: first bucket
  h.observe(0.05);    // third
  h.observe(7);       // +Inf only
  const std::string text = r.expose();
  EXPECT_THAT(text, HasSubstr("# TYPE crihook_h_seconds histogram\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"0.001\"} 2\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"0.01\"} 2\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"0.1\"} 3\n"
                              "crihook_h_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n"
                              "crihook_h_seconds_sum{m=\"x\"} 7.0515\n"
                              "crihook_h_seconds_count{m=\"x\"} 4\n"));
}

TEST(RegistryTest, DefaultLatencyBucketsSpan100usTo30s) {
  const auto& b = latencyBuckets();
  EXPECT_EQ(b.front(), 0.0001);
  EXPECT_EQ(b.back(), 30);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

TEST(RegistryTest, AFamilyStopsGrowingAtItsCap) {
  Registry r;
  auto& f = r.counter("crihook_many_total", "Many.", {"k"});
  for (size_t i = 0; i < kMaxSeriesPerFamily + 10; ++i) f.with({std::to_string(i)}).inc();
  size_t series = 0;
  uint64_t overflow = 0;
  f.forEach([&](const std::vector<std::string>& v, const Counter& c) {
    ++series;
    if (v[0] == "overflow") overflow = c.value();
  });
  EXPECT_EQ(series, kMaxSeriesPerFamily + 1);
  EXPECT_EQ(overflow, 10u);
}

TEST(RegistryTest, ConcurrentRecordingLosesNothing) {
  Registry r;
  auto& c = r.counter("crihook_c_total", "C.").with({});
  auto& h = r.histogram("crihook_d_seconds", "D.", {}).with({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(0.002);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  EXPECT_EQ(h.snapshot().count, 40000u);
  EXPECT_NEAR(h.snapshot().sum, 80.0, 1e-6);
}

TEST(ExpositionTest, CrihookctlParsesWhatTheRegistryWrites) {
  Registry r;
  r.counter("crihook_q_total", "Q.", {"a", "b"}).with({"x\"y\\z\nw", ""}).inc(5);
  r.histogram("crihook_r_seconds", "R.", {}).with({}).observe(0.2);
  auto samples = ctl::parseExposition(r.expose());
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_FALSE(samples->empty());
  EXPECT_EQ((*samples)[0].name, "crihook_q_total");
  EXPECT_EQ((*samples)[0].labels.at("a"), "x\"y\\z\nw");
  EXPECT_EQ((*samples)[0].value, 5);
  EXPECT_EQ(samples->back().name, "crihook_r_seconds_count");
  EXPECT_FALSE(ctl::parseExposition("crihook_bad{a=\"x} 1\n").ok());
  EXPECT_FALSE(ctl::parseExposition("crihook_bad 1x\n").ok());
}

}  // namespace
}  // namespace crihook::metrics
