#pragma once

// The node's hardware layout: CPUs, NUMA nodes, PCI devices with their
// chain of upstream bridges (so each device's PCIe switch and root port are
// known), GPUs and RDMA devices with their SR-IOV functions. A Snapshot is
// immutable once discovered; hooks and the report read it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/sysfs.h"

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
  // What the device's numa_node says; -1 where the firmware does not tell
  // the kernel (some BIOSes leave it out for some or all devices).
  int reported_numa_node = -1;
  // The node the device is on, as placement, the hooks and the Device report
  // use it: reported_numa_node, else that of the nearest upstream bridge that
  // has one, else the first NUMA node (node 0). Never -1.
  int numa_node = 0;
  // Empty when numa_node is the device's own; else the address of the bridge
  // it was taken from, or "none" when no bridge above knew either.
  std::string numa_node_from;
  std::string root_complex;          // pci0000:17
  std::vector<std::string> bridges;  // upstream bridges, root port first
  // The upstream port of the nearest PCIe switch above the device; empty
  // when the device sits directly on a root port.
  std::string pcie_switch;
  const std::string& rootPort() const;  // bridges.front(), or empty
};

// Where a device sits, as placement and the Device report need it.
struct Locality {
  int numa_node = 0;           // PciDevice::numa_node: never -1
  std::string numa_node_from;  // PciDevice::numa_node_from
  int socket = -1;             // the socket of numa_node's CPUs; -1 if it has none
  std::string pcie_switch;     // empty: none
  std::string root_port;
  std::string root_complex;
};

// What "the same PCIe" means for a Device's topology.pcieID and for the
// topology-check hook's SamePCIe (placement.h), one meaning for both so the
// report and the check never disagree.
//  kRootComplex  the CPU root complex the device hangs off ("pci0000:17"), as
//                Koordinator's koordlet reports it: every device under one
//                root complex is the same PCIe, switches or not.
//  kSwitch       the upstream port of the nearest PCIe switch above the
//                device, or, without a switch, its root port: the devices
//                that exchange data without crossing the CPU.
enum class PcieScope { kRootComplex, kSwitch };
std::string_view pcieScopeName(PcieScope scope);  // "root-complex", "switch"
// The device's PCIe identity in that meaning; empty when sysfs did not show it.
const std::string& pcieId(const Locality& where, PcieScope scope);

// A GPU: a display controller (PCI class 0x03) of NVIDIA, AMD or Intel. Other
// display controllers (a server BMC's ASPEED or Matrox VGA) are plain PCI
// devices, never GPUs.
struct Gpu {
  std::string address;
  std::string vendor;  // nvidia, amd, intel
  std::string model;
  // The NVIDIA driver manages it: driver "nvidia" bound, or listed under
  // /proc/driver/nvidia/gpus. Only these are in the Device report (what
  // koordlet reports too), and only these have a minor.
  bool nvidia_driver = false;
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
  std::vector<int> virtual_function_numbers;   // the N of each one's virtfn<N> link
  Locality where;
  bool isVirtualFunction() const { return !physical_function.empty(); }
  // Healthy as koordlet judges it: it has ports and every port's state is
  // ACTIVE ("4: ACTIVE"; ACTIVE_DEFER counts too).
  bool portsActive() const;
};

// A tree that is wrong everywhere (65536 CPUs online, none with a topology
// directory) says so in a thousand warnings as well as in 200000: crihookd
// logs each, crihookctl prints each.
inline constexpr size_t kMaxWarnings = 1000;

// Linux's own bounds: NR_CPUS is at most 8192 (x86-64's MAXSMP), and
// MAX_NUMNODES at most 1 << 10. An id past them is a broken or hostile tree's,
// not a machine's; discovery drops it with a warning, for each one would cost
// a few file reads and a line in every view.
inline constexpr int kMaxCpus = 8192;
inline constexpr int kMaxNumaNodes = 1024;

struct Snapshot {
  std::string root;  // what was read: "/" or a fixture tree
  std::vector<Cpu> cpus;
  std::vector<NumaNode> nodes;
  std::vector<PciDevice> pci;    // sorted by address
  std::vector<Gpu> gpus;         // sorted by address
  std::vector<RdmaDevice> rdma;  // sorted by name
  std::string nvidia_driver_version;
  // What could not be read or made sense of, each naming the path; the rest
  // of the snapshot stands. At most kMaxWarnings, then one saying how many
  // more there were.
  std::vector<std::string> warnings;

  const PciDevice* pciDevice(std::string_view address) const;
  const Gpu* gpu(std::string_view address) const;
  const Gpu* gpuByMinor(int minor) const;
  const RdmaDevice* rdmaByName(std::string_view name) const;
  const RdmaDevice* rdmaByAddress(std::string_view address) const;
  const Cpu* cpu(int id) const;
  int socketOfNode(int node) const;
};

// The NVML library discovery asks by default (the NVIDIA driver's; never a
// build dependency).
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

struct DiscoverOptions {
  // The NVML library asked for the memory size and health of the NVIDIA
  // GPUs: a name dlopen looks up, or a path. Unset: kNvmlLibrary, asked only
  // when the root is "/" (NVML answers for the running host, not for a
  // fixture tree). Set: that library, whatever the root (a test's fake NVML
  // answering for a fixture tree's GPUs).
  std::optional<std::string> nvml_library;
};

// Reads the tree under `root`. Never fails: whatever cannot be read becomes
// a warning naming the path, and so does what the Device report will lack
// because of it (NVIDIA GPUs whose memory NVML did not give, one without a
// minor). Cheap (a few thousand small reads on a large
// server); call again to rediscover.
Snapshot discover(const SysRoot& root, const DiscoverOptions& options = {});

// A PCI address as the kernel names a device: dddd:bb:dd.f in lower-case
// hex, device 00-1f, function 0-7, the domain 4 to 8 digits (Intel VMD's
// domains are 10000 and up). What passes becomes a sysfs path.
bool isPciAddress(std::string_view text);

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. parseCpuList returns false on garbage.
bool parseCpuList(std::string_view text, std::vector<int>& out);
std::string formatCpuList(std::vector<int> cpus);
// formatCpuList's, or "none" for no CPUs: what a person reads, where an
// empty list would read as a blank.
std::string cpusOrNone(const std::vector<int>& cpus);

}  // namespace crihook::topology
