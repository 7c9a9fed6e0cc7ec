// lifecycle_settings.h: the device-lifecycle hook's settings, their
// defaults, and each wrong one named (the hook refusing them as a whole:
// lifecycle_hook_test.cc, BadSettingsNameTheSetting).

#include "hooks/builtin/lifecycle/lifecycle_settings.h"

#include <gtest/gtest.h>

namespace crihook {
namespace {

using std::chrono::milliseconds;

TEST(LifecycleSettings, DefaultsAreTakenFromTheDaemonsDirectories) {
  auto s = LifecycleSettings::parse("devices", "{}", BuiltinContext{"/var/lib/crihook", "/host"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state_dir, "/var/lib/crihook/devices");
  EXPECT_EQ(s->roots.sys_root, "/host");
  EXPECT_EQ(s->roots.device_root, "/dev");
  EXPECT_EQ(s->retry_initial, milliseconds(1000));
  EXPECT_EQ(s->retry_max, milliseconds(300000));
  EXPECT_EQ(s->orphan_grace, milliseconds(600000));
  EXPECT_TRUE(s->types.empty());
  // Without [hooks] state_dir the records are kept in memory only.
  auto none = LifecycleSettings::parse("devices", "{}", BuiltinContext{"", "/"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->state_dir, "");
}

TEST(LifecycleSettings, EveryKeyIsReadAndATypeWithoutSettingsHasNoActions) {
  auto s = LifecycleSettings::parse(
      "devices",
      R"({"gpu": {"init": [{"command": ["/bin/true", "{uuid}"]}, {"builtin": "check-node"}],
                  "cleanup": [{"builtin": "pci-reset"}]},
          "rdma": {"cleanup": [{"command": ["/bin/true"]}]},
          "state_dir": "/run/devices", "device_root": "/host/dev", "retry_initial": "50ms",
          "retry_max": "2s", "orphan_grace": "1m"})",
      BuiltinContext{"/var/lib/crihook", "/"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state_dir, "/run/devices");
  EXPECT_EQ(s->roots.device_root, "/host/dev");
  EXPECT_EQ(s->retry_initial, milliseconds(50));
  EXPECT_EQ(s->retry_max, milliseconds(2000));
  EXPECT_EQ(s->orphan_grace, milliseconds(60000));
  EXPECT_TRUE(s->configured("gpu"));
  EXPECT_TRUE(s->configured("rdma"));
  EXPECT_FALSE(s->configured("fpga"));
  const TypeActions& gpu = s->actionsOf("gpu");
  ASSERT_EQ(gpu.init.size(), 2u);
  EXPECT_EQ(gpu.init[0].describe(), "/bin/true {uuid}");
  EXPECT_EQ(gpu.init[1].describe(), "builtin check-node");
  ASSERT_EQ(gpu.cleanup.size(), 1u);
  EXPECT_EQ(gpu.cleanup[0].describe(), "builtin pci-reset");
  EXPECT_TRUE(s->actionsOf("rdma").init.empty());
  EXPECT_EQ(s->actionsOf("rdma").cleanup.size(), 1u);
  // A record read at start may name a type no longer configured.
  EXPECT_TRUE(s->actionsOf("fpga").init.empty());
  EXPECT_TRUE(s->actionsOf("fpga").cleanup.empty());
}

TEST(LifecycleSettings, AWrongSettingIsNamedWithWhyItIsWrong) {
  auto err = [](const std::string& json) {
    auto s = LifecycleSettings::parse("devices", json, BuiltinContext{"/var/lib/crihook", "/"});
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  EXPECT_EQ(err(R"({"gpu": []})"), "hook devices: settings.gpu: expected a table, got []");
  EXPECT_EQ(err(R"({"rdma": {"init": {}}})"),
            "hook devices: settings.rdma.init: expected an array of actions, got {}");
  EXPECT_EQ(err(R"({"fpga": {"cleanup": [{"builtin": "reboot"}]}})"),
            "hook devices: settings.fpga.cleanup[0].builtin: expected \"pci-reset\" or "
            "\"check-node\", got \"reboot\"");
  EXPECT_EQ(err(R"({"retry_initial": "soon"})"),
            "hook devices: settings.retry_initial: expected a duration such as \"2s\" or "
            "\"500ms\", got \"soon\"");
  EXPECT_EQ(err(R"({"device_root": "dev"})"),
            "hook devices: settings.device_root: expected an absolute path, got \"dev\"");
  EXPECT_EQ(err(R"({"retry_initial": "2s", "retry_max": "1s"})"),
            "hook devices: settings.retry_max: is less than retry_initial");
  EXPECT_EQ(err(R"({"orphan_grace": "1m", "retry_max": "1s", "retry_initial": "1s"})"), "ok");
  EXPECT_EQ(err("[]").substr(0, 14), "hook devices: ");
}

}  // namespace
}  // namespace crihook
