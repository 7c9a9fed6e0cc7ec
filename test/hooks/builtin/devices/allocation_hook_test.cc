// What every device hook shares (hooks/builtin/devices/allocation_hook.h):
// its settings, each refusal naming the setting.

#include "hooks/builtin/devices/allocation_hook.h"

#include <gtest/gtest.h>

#include "test/hooks/builtin/devices/device_hooks_fixture.h"

namespace crihook::testing {
namespace {

TEST_F(DeviceHooksTest, BadSettingsAreRefused) {
  auto err = [](const std::string& type, const std::string& json) {
    auto h = builtinHooks().create(type, type, json);
    return h.ok() ? std::string("accepted") : std::string(h.status().message());
  };
  EXPECT_EQ(err("gpu", R"({"device_root": "dev"})"),
            "hook gpu: settings.device_root: expected an absolute path, got \"dev\"");
  EXPECT_EQ(err("gpu", R"({"visible_devices": "all"})"),
            "hook gpu: settings.visible_devices: expected \"uuid\" or \"index\", got \"all\"");
  EXPECT_EQ(err("rdma", R"({"nccl_ib_hca": "yes"})"),
            "hook rdma: settings.nccl_ib_hca: expected true or false, got \"yes\"");
  EXPECT_EQ(err("cpuset", R"({"on_error": "retry"})"),
            "hook cpuset: settings.on_error: expected \"reject\" or \"skip\", got \"retry\"");
  EXPECT_EQ(err("cpuset", R"({"device_rot": "/dev"})"),
            "hook cpuset: settings.device_rot: unknown setting");
}

}  // namespace
}  // namespace crihook::testing
