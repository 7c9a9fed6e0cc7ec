// The seam to the OS (topology/sysfs.cc): a SysRoot reads regular files
// only, never waiting on a FIFO or a device, and resolves and follows links
// without leaving its root.

#include "topology/sysfs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "base/text.h"
#include "test/topology/topology_fixtures.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;

// sysfs is read as regular files of at most a page or so: a FIFO, a link into
// /dev or an oversized file in the tree is a file that cannot be read, and
// discovery neither blocks nor fills memory on it.
TEST_F(Fixtures, AFifoADeviceOrAHugeFileInTheTreeIsUnreadableNotWaitedOn) {
  TempDir odd;
  copyFixture("dgx", odd);
  const std::string cpu = odd.path() + "/sys/devices/system/cpu/";
  std::filesystem::remove(cpu + "cpu5/topology/core_id");
  ASSERT_EQ(::mkfifo((cpu + "cpu5/topology/core_id").c_str(), 0600), 0);
  std::filesystem::remove(cpu + "cpu6/topology/core_id");
  std::filesystem::create_symlink("/dev/zero", cpu + "cpu6/topology/core_id");
  std::filesystem::remove(cpu + "cpu7/topology/core_id");
  std::ofstream(cpu + "cpu7/topology/core_id") << "7";
  ASSERT_EQ(::truncate((cpu + "cpu7/topology/core_id").c_str(), 1 << 30), 0);  // sparse

  const auto start = std::chrono::steady_clock::now();
  const topo::Snapshot s = topo::discover(topo::SysRoot(odd.path()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const std::string root = topo::SysRoot(odd.path()).root();
  for (int c : {5, 6, 7}) {
    EXPECT_EQ(s.cpu(c)->core, -1) << c;
    EXPECT_THAT(s.warnings, ::testing::Contains(cat(root, "/sys/devices/system/cpu/cpu", c,
                                                    "/topology/core_id: cannot be read")));
  }
  EXPECT_EQ(s.cpus.size(), 64u);
  EXPECT_EQ(topo::SysRoot(odd.path()).read("sys/devices/system/cpu/cpu5/topology/core_id"),
            std::nullopt);
}

// What a sysfs attribute says, without the newline the kernel ends it with;
// a directory's entries sorted, whatever order readdir gives.
TEST(SysRoot, ReadDropsTheTrailingNewlineAndListIsSorted) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("sys/class/net"));
  std::ofstream(dir.file("sys/class/net/mtu")) << "1500\n";
  for (const char* name : {"eth1", "eth0", "ib0"})
    std::filesystem::create_directories(dir.file(cat("sys/class/net/", name)));
  const topo::SysRoot r(dir.path() + "//");
  EXPECT_EQ(r.root(), std::filesystem::canonical(dir.path()).string());
  EXPECT_EQ(r.read("sys/class/net/mtu"), "1500");
  EXPECT_EQ(r.read("sys/class/net/missing"), std::nullopt);
  EXPECT_EQ(r.read("sys/class/net/eth0"), std::nullopt) << "a directory is no attribute";
  EXPECT_THAT(r.list("sys/class/net"), ElementsAre("eth0", "eth1", "ib0", "mtu"));
  EXPECT_TRUE(r.list("sys/nowhere").empty());
  EXPECT_TRUE(r.exists("sys/class/net/ib0"));
  EXPECT_FALSE(r.exists("sys/class/net/ib1"));
}

// A link is followed to where it leads inside the root, by its text
// (follow) or by realpath (resolve); one that dangles or climbs out of the
// root leads nowhere, so no path discovery reads is outside it.
TEST(SysRoot, LinksLeadWithinTheRootAndNeverOutOfIt) {
  TempDir dir;
  const std::string devices = dir.file("sys/devices/pci0000:17/0000:17:00.0");
  std::filesystem::create_directories(devices);
  std::filesystem::create_directories(dir.file("sys/bus/pci/devices"));
  const std::string bus = dir.file("sys/bus/pci/devices/");
  std::filesystem::create_symlink("../../../devices/pci0000:17/0000:17:00.0", bus + "0000:17:00.0");
  std::filesystem::create_symlink("../../../devices/pci0000:17/0000:ff:00.0", bus + "0000:ff:00.0");
  std::filesystem::create_symlink("../../../../../etc", bus + "out");
  std::filesystem::create_symlink("/etc", bus + "absolute");
  const topo::SysRoot r(dir.path());
  const std::string dev = "sys/devices/pci0000:17/0000:17:00.0";
  EXPECT_EQ(r.follow("sys/bus/pci/devices/0000:17:00.0"), dev);
  EXPECT_EQ(r.resolve("sys/bus/pci/devices/0000:17:00.0"), dev);
  EXPECT_EQ(r.follow("sys/bus/pci/devices/0000:ff:00.0"), std::nullopt) << "a dangling link";
  EXPECT_EQ(r.resolve("sys/bus/pci/devices/0000:ff:00.0"), std::nullopt) << "a dangling link";
  EXPECT_EQ(r.follow("sys/bus/pci/devices/out"), std::nullopt) << "out of the root";
  EXPECT_EQ(r.resolve("sys/bus/pci/devices/out"), std::nullopt) << "out of the root";
  EXPECT_EQ(r.follow("sys/bus/pci/devices/absolute"), std::nullopt) << "out of the root";
  EXPECT_EQ(r.follow(dev), std::nullopt) << "not a link";
  EXPECT_EQ(r.resolve(""), "");
}

}  // namespace
}  // namespace crihook::testing
