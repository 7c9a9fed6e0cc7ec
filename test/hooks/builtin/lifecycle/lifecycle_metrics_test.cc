// lifecycle_metrics.h: the device-lifecycle hook's counts per device type,
// and the sandboxes that owe a cleanup.

#include "hooks/builtin/lifecycle/lifecycle_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "metrics/metric_registry.h"

namespace crihook {
namespace {

using ::testing::HasSubstr;

TEST(LifecycleMetrics, InitsAndCleanupsAreCountedPerHookAndType) {
  metrics::Registry registry;
  LifecycleMetrics m(&registry, "devices");
  m.initDone("gpu");
  m.initDone("gpu");
  m.initFailed("rdma");
  m.cleanupDone("gpu");
  m.cleanupFailed("fpga");
  const std::string text = registry.expose();
  EXPECT_THAT(text, HasSubstr("crihook_device_inits_total{hook=\"devices\",type=\"gpu\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("crihook_device_init_failures_total{hook=\"devices\",type=\"rdma\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("crihook_device_cleanups_total{hook=\"devices\",type=\"gpu\"} 1\n"));
  EXPECT_THAT(
      text, HasSubstr("crihook_device_cleanup_failures_total{hook=\"devices\",type=\"fpga\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("crihook_device_cleanups_pending{hook=\"devices\"} 0\n"));
}

TEST(LifecycleMetrics, ASandboxOwingACleanupIsCountedOnceUntilItOwesNothing) {
  metrics::Registry registry;
  metrics::Gauge& pending =
      registry.gauge("crihook_device_cleanups_pending", "p", {"hook"}).with({"devices"});
  pending.set(7);  // a hook of this name made before: the new one starts from its records
  LifecycleMetrics m(&registry, "devices");
  EXPECT_EQ(pending.value(), 0);
  const SandboxKey a{"uid-a", 0}, b{"uid-b", 0}, a1{"uid-a", 1};
  m.setPending(a, true);
  m.setPending(a, true);  // saved again while still owed
  m.setPending(b, true);
  m.setPending(a1, true);
  EXPECT_EQ(pending.value(), 3);
  m.setPending(a, false);
  m.setPending(b, false);
  m.setPending(b, false);
  EXPECT_EQ(pending.value(), 1);
}

}  // namespace
}  // namespace crihook
