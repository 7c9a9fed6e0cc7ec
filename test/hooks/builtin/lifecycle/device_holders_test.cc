// device_holders.h: which sandboxes hold a device shared by several pods,
// so that its first user initialises it and its last cleans it up.

#include "hooks/builtin/lifecycle/device_holders.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace crihook {
namespace {

using ::testing::ElementsAre;

DeviceRecord record(const std::string& name, std::vector<DeviceFacts> devices) {
  DeviceRecord r;
  r.key = {"uid-" + name, 0};
  r.pod = {"ml", name, "uid-" + name};
  r.devices = std::move(devices);
  return r;
}

const DeviceFacts kGpu0{"gpu", 0, 0, "", "GPU-0", "0000:1a:00.0", "", "nvidia0"};
const DeviceFacts kGpu1{"gpu", 1, 1, "", "GPU-1", "0000:1b:00.0", "", "nvidia1"};

TEST(DeviceHolders, TheFirstHolderIsAloneEachLaterOneLearnsWhoHoldsItAlready) {
  DeviceHolders holders;
  const DeviceRecord a = record("half-a", {kGpu0});
  const DeviceRecord b = record("half-b", {kGpu0});
  const DeviceRecord c = record("whole-c", {kGpu0, kGpu1});
  EXPECT_THAT(holders.claim(a), ElementsAre(""));
  EXPECT_THAT(holders.claim(b), ElementsAre("ml/half-a"));
  // Per device, in the record's order: only GPU 0 is held by others.
  EXPECT_THAT(holders.claim(c), ElementsAre(::testing::AnyOf("ml/half-a", "ml/half-b"), ""));
  // A sandbox claiming again (an init after an unfinished one) is not its own other.
  EXPECT_THAT(holders.claim(a), ElementsAre(::testing::AnyOf("ml/half-b", "ml/whole-c")));
}

TEST(DeviceHolders, TheLastHolderIsTheOneThatFindsTheDeviceFree) {
  DeviceHolders holders;
  const DeviceRecord a = record("half-a", {kGpu0});
  const DeviceRecord b = record("half-b", {kGpu0});
  holders.claim(a);
  holders.claim(b);
  EXPECT_EQ(holders.heldBy(kGpu0, a.key), "ml/half-b");
  EXPECT_EQ(holders.heldBy(kGpu0, b.key), "ml/half-a");
  holders.release(a);
  EXPECT_EQ(holders.heldBy(kGpu0, b.key), "");  // b cleans it up
  EXPECT_EQ(holders.heldBy(kGpu0, a.key), "ml/half-b");
  holders.release(b);
  EXPECT_EQ(holders.heldBy(kGpu0, a.key), "");
  EXPECT_EQ(holders.heldBy(kGpu1, a.key), "");  // never held
  holders.release(b);                           // twice: nothing to release
  EXPECT_THAT(holders.claim(b), ElementsAre(""));
}

TEST(DeviceHolders, ADeviceIsKnownByItsTypeAndPciAddressOrItsMinorWithoutOne) {
  EXPECT_EQ(DeviceHolders::deviceId(kGpu0), "gpu:0000:1a:00.0");
  const DeviceFacts no_pci{"gpu", 0, 3, "", "", "", "", "nvidia3"};
  EXPECT_EQ(DeviceHolders::deviceId(no_pci), "gpu:3");
  const DeviceFacts fpga{"fpga", 0, 3, "", "", "", "", ""};
  EXPECT_EQ(DeviceHolders::deviceId(fpga), "fpga:3");
  // The same GPU named at another index by another pod is the same device.
  DeviceFacts same = kGpu0;
  same.index = 4;
  DeviceHolders holders;
  holders.claim(record("a", {kGpu0}));
  EXPECT_THAT(holders.claim(record("b", {same})), ElementsAre("ml/a"));
  EXPECT_THAT(holders.claim(record("c", {fpga, no_pci})), ElementsAre("", ""));
}

}  // namespace
}  // namespace crihook
