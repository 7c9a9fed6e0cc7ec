#pragma once

// What the topology tests share: make-fixtures.sh's machines loaded and
// copied (test/support/fixture_trees.h), what discovery says of their
// NVIDIA GPUs, and the Device report's minors checked as Koordinator reads
// them; a machine written by hand with what sysfs rarely shows. Each
// topology test program includes it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "topology/topology.h"

namespace crihook::testing {

namespace topo = ::crihook::topology;

// The dgx fixture's first GPU, under its two switches.
inline constexpr const char* kDgxGpu0 =
    "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0";

class Fixtures : public ::testing::Test {
 protected:
  static std::string fixture(const std::string& name) { return fixtureTree(name); }
  static topo::Snapshot load(const std::string& name) {
    return topo::discover(topo::SysRoot(fixture(name)));
  }
  // A fixture's tree copied into `to`, links as links, for a test to break.
  static void copyFixture(const std::string& name, const TempDir& to) {
    std::filesystem::copy(
        fixture(name), to.path(),
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  }
};

// What discovery says of a fixture's NVIDIA GPUs: NVML is only asked on the
// host, so their memory is unknown.
inline auto nvmlUnknown(int gpus) {
  return ::testing::AllOf(
      ::testing::StartsWith("NVML: not asked about a root other than / ("),
      ::testing::HasSubstr(std::to_string(gpus) + " NVIDIA GPU(s) is unknown"),
      ::testing::HasSubstr("the Device report has no koordinator.sh/gpu-memory for them"));
}

// Every entry as Koordinator's scheduler reads it: a minor on each.
inline void expectEveryDeviceHasAMinor(const nlohmann::json& device) {
  std::set<std::pair<std::string, int>> seen;
  for (const auto& d : device["spec"]["devices"]) {
    ASSERT_TRUE(d.contains("minor") && d["minor"].is_number_integer()) << d.dump();
    EXPECT_TRUE(seen.insert({d["type"].get<std::string>(), d["minor"].get<int>()}).second)
        << "minor twice: " << d.dump();
    EXPECT_GE(d["topology"]["nodeID"].get<int>(), 0) << d.dump();
  }
}

// A machine written here, not discovered: two NUMA nodes of one socket, the
// second without CPUs (a memory-only node, or one whose cpulist could not be
// read); a GPU on the root complex's own bus (no bridge above it: an
// integrated GPU, a GPU passed to a VM), one on node 1, and an RDMA device
// whose PCI device sysfs does not place under any root complex.
inline topo::Snapshot oddMachine() {
  topo::Snapshot s;
  s.nodes.push_back({.id = 0, .socket = 0, .cpus = {0, 1}});
  s.nodes.push_back({.id = 1, .socket = 0, .cpus = {}});
  s.cpus.push_back({.id = 0, .socket = 0, .core = 0, .node = 0});
  s.cpus.push_back({.id = 1, .socket = 0, .core = 1, .node = 0});
  topo::PciDevice igpu;
  igpu.address = "0000:00:02.0";
  igpu.root_complex = "pci0000:00";
  topo::PciDevice far;
  far.address = "0000:81:00.0";
  far.root_complex = "pci0000:80";
  far.bridges = {"0000:80:01.0"};
  far.numa_node = far.reported_numa_node = 1;
  topo::PciDevice loose;
  loose.address = "0000:99:00.0";
  s.pci = {igpu, far, loose};
  for (const topo::PciDevice& d : {igpu, far}) {
    topo::Gpu g;
    g.address = d.address;
    g.vendor = "intel";
    g.model = "intel 0x46a6";
    g.where = {.numa_node = d.numa_node,
               .socket = 0,
               .root_port = d.rootPort(),
               .root_complex = d.root_complex};
    s.gpus.push_back(g);
  }
  topo::RdmaDevice x;
  x.name = "rxe0";
  x.address = loose.address;
  x.where = {.numa_node = 0, .socket = 0};
  s.rdma.push_back(x);
  return s;
}

}  // namespace crihook::testing
