// device_holders.h: which sandboxes hold a device shared by several pods,
// so that its first user initialises it and its last cleans it up; and which
// owes a device its cleanup, so that no pod gets it before.

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

// claim()'s holders; none when it was refused.
std::vector<std::string> claimed(DeviceHolders& holders, const DeviceRecord& r) {
  auto c = holders.claim(r);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : std::vector<std::string>{};
}

const DeviceFacts kGpu0{"gpu", 0, 0, "", "GPU-0", "0000:1a:00.0", "", "nvidia0"};
const DeviceFacts kGpu1{"gpu", 1, 1, "", "GPU-1", "0000:1b:00.0", "", "nvidia1"};

TEST(DeviceHolders, TheFirstHolderIsAloneEachLaterOneLearnsWhoHoldsItAlready) {
  DeviceHolders holders;
  const DeviceRecord a = record("half-a", {kGpu0});
  const DeviceRecord b = record("half-b", {kGpu0});
  const DeviceRecord c = record("whole-c", {kGpu0, kGpu1});
  EXPECT_THAT(claimed(holders, a), ElementsAre(""));
  EXPECT_THAT(claimed(holders, b), ElementsAre("ml/half-a"));
  // Per device, in the record's order: only GPU 0 is held by others.
  EXPECT_THAT(claimed(holders, c), ElementsAre(::testing::AnyOf("ml/half-a", "ml/half-b"), ""));
  // A sandbox claiming again (an init after an unfinished one) is not its own other.
  EXPECT_THAT(claimed(holders, a), ElementsAre(::testing::AnyOf("ml/half-b", "ml/whole-c")));
}

TEST(DeviceHolders, TheLastHolderIsTheOneThatFindsTheDeviceFree) {
  DeviceHolders holders;
  const DeviceRecord a = record("half-a", {kGpu0});
  const DeviceRecord b = record("half-b", {kGpu0});
  claimed(holders, a);
  claimed(holders, b);
  EXPECT_EQ(holders.heldBy(kGpu0, a.key), "ml/half-b");
  EXPECT_EQ(holders.heldBy(kGpu0, b.key), "ml/half-a");
  holders.release(a);
  EXPECT_EQ(holders.heldBy(kGpu0, b.key), "");  // b cleans it up
  EXPECT_EQ(holders.heldBy(kGpu0, a.key), "ml/half-b");
  holders.release(b);
  EXPECT_EQ(holders.heldBy(kGpu0, a.key), "");
  EXPECT_EQ(holders.heldBy(kGpu1, a.key), "");  // never held
  holders.release(b);                           // twice: nothing to release
  EXPECT_THAT(claimed(holders, b), ElementsAre(""));
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
  claimed(holders, record("a", {kGpu0}));
  EXPECT_THAT(claimed(holders, record("b", {same})), ElementsAre("ml/a"));
  EXPECT_THAT(claimed(holders, record("c", {fpga, no_pci})), ElementsAre("", ""));
}

// The last holder that lets go of a device it touched owes it its cleanup
// until that cleanup is done: meanwhile no sandbox can claim it (a reset
// between tenants is never skipped). A device still shared, untouched or
// already cleaned up is owed nothing.
TEST(DeviceHolders, ADeviceLeftUncleanedIsOwedAndGivenToNoOneUntilItsCleanup) {
  DeviceHolders holders;
  DeviceRecord a = record("train-a", {kGpu0});
  a.touched = 1;
  const DeviceRecord b = record("train-b", {kGpu0, kGpu1});
  claimed(holders, a);
  holders.release(a);  // its cleanup not done (yet)
  EXPECT_EQ(holders.owedBy(kGpu0, b.key), a.key);
  EXPECT_EQ(holders.owedBy(kGpu0, a.key), std::nullopt) << "not owed to itself";
  auto refused = holders.claim(b);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("still owes its cleanup after pod ml/train-a"));
  EXPECT_EQ(holders.heldBy(kGpu1, a.key), "") << "nothing claimed";
  holders.cleaned(kGpu0, a.key);
  EXPECT_EQ(holders.owedBy(kGpu0, b.key), std::nullopt);
  EXPECT_THAT(claimed(holders, b), ElementsAre("", ""));

  // Shared: the one that lets go first owes nothing; the last one does.
  DeviceRecord c = record("half-c", {kGpu1});
  c.touched = 1;
  DeviceHolders shared;
  DeviceRecord d = record("half-d", {kGpu1});
  d.touched = 1;
  claimed(shared, c);
  claimed(shared, d);
  shared.release(c);
  EXPECT_EQ(shared.owedBy(kGpu1, b.key), std::nullopt);
  shared.release(d);
  EXPECT_EQ(shared.owedBy(kGpu1, b.key), d.key);
  // Released again once cleaned up (forgotten): owed no more.
  d.cleaned = {true};
  shared.release(d);
  EXPECT_EQ(shared.owedBy(kGpu1, b.key), std::nullopt);

  // Untouched (an init that stopped before it) or cleaned: nothing owed.
  DeviceHolders other;
  DeviceRecord untouched = record("early", {kGpu0});
  claimed(other, untouched);
  other.release(untouched);
  DeviceRecord clean = record("done", {kGpu1});
  clean.touched = 1;
  clean.cleaned = {true};
  claimed(other, clean);
  other.release(clean);
  EXPECT_THAT(claimed(other, b), ElementsAre("", ""));
}

}  // namespace
}  // namespace crihook
