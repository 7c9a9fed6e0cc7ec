#pragma once

// The node's hardware layout: CPUs, NUMA nodes, PCI devices with their
// chain of upstream bridges (so each device's PCIe switch and root port are
// known), GPUs and RDMA devices with their SR-IOV functions. A Snapshot is
// immutable once discovered; hooks and the report read it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sysfs.h"

namespace crihook::topology {

struct Cpu {
  int id = 0;
  int socket = -1;
  int core = -1;
  int node = -1;
  std::vector<int> siblings;  // SMT threads of the same core, itself included
};

struct NumaNode {
  int id = 0;
  int socket = -1;  // the socket of its CPUs
  std::vector<int> cpus;
  uint64_t memory_bytes = 0;
  std::vector<int> distances;  // to node 0, 1, ... as the kernel lists them
};

struct PciDevice {
  std::string address;                     // 0000:1a:00.0
  std::string vendor, device, class_code;  // "0x10de", "0x20b0", "0x030200"
  std::string driver;                      // bound driver, empty if none
  int numa_node = -1;
  std::string root_complex;          // pci0000:17
  std::vector<std::string> bridges;  // upstream bridges, root port first
  // The upstream port of the nearest PCIe switch above the device; empty
  // when the device sits directly on a root port.
  std::string pcie_switch;
  const std::string& rootPort() const;  // bridges.front(), or empty
};

// Where a device sits, as placement and the Device report need it.
struct Locality {
  int numa_node = -1;
  int socket = -1;
  std::string pcie_switch;  // empty: none
  std::string root_port;
  std::string root_complex;
};

struct Gpu {
  std::string address;
  std::string vendor;  // nvidia, amd, intel, or the PCI vendor id
  std::string model;
  int minor = -1;             // -1 when the driver does not say
  std::string uuid;           // empty when the driver does not say
  uint64_t memory_bytes = 0;  // from NVML, when it could be loaded
  bool health = true;
  Locality where;
};

struct RdmaPort {
  int number = 0;
  std::string state;       // "4: ACTIVE"
  std::string link_layer;  // InfiniBand, Ethernet
};

struct RdmaDevice {
  std::string name;  // mlx5_0, rocep24s0, ...
  std::string address;
  std::string driver;
  std::vector<RdmaPort> ports;
  std::string uverbs;      // uverbs0: /dev/infiniband/uverbs0
  std::string uverbs_dev;  // "231:192"
  std::vector<std::string> netdevs;
  std::string physical_function;               // set on a VF: its PF's address
  std::vector<std::string> virtual_functions;  // set on a PF: its VFs' addresses, in order
  Locality where;
  bool isVirtualFunction() const { return !physical_function.empty(); }
};

struct Snapshot {
  std::string root;  // what was read: "/" or a fixture tree
  std::vector<Cpu> cpus;
  std::vector<NumaNode> nodes;
  std::vector<PciDevice> pci;    // sorted by address
  std::vector<Gpu> gpus;         // sorted by address
  std::vector<RdmaDevice> rdma;  // sorted by name
  std::string nvidia_driver_version;
  // What could not be read or made sense of, each naming the path; the rest
  // of the snapshot stands.
  std::vector<std::string> warnings;

  const PciDevice* pciDevice(std::string_view address) const;
  const Gpu* gpu(std::string_view address) const;
  const Gpu* gpuByMinor(int minor) const;
  const RdmaDevice* rdmaByName(std::string_view name) const;
  const RdmaDevice* rdmaByAddress(std::string_view address) const;
  const Cpu* cpu(int id) const;
  int socketOfNode(int node) const;
};

// Reads the tree under `root`. Never fails: whatever cannot be read becomes
// a warning naming the path. Cheap (a few thousand small reads on a large
// server); call again to rediscover.
Snapshot discover(const SysRoot& root);

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. parseCpuList returns false on garbage.
bool parseCpuList(std::string_view text, std::vector<int>& out);
std::string formatCpuList(std::vector<int> cpus);

}  // namespace crihook::topology
