#pragma once

// The node's topology as people read it: the GPU/NIC connection matrix as
// `nvidia-smi topo -m` prints it, a Graphviz picture of the machine, and
// where one pod's devices and CPUs sit. All computed from a Snapshot (sysfs
// only: no NVIDIA driver, no NVML), so they work on fixture trees and on
// nodes without the driver. Pure functions; thread-safe on a const Snapshot.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/topology.h"

namespace crihook::topology {

// How two devices are connected, nearest first, with nvidia-smi's names.
// NVLink (nvidia-smi's NV#) is not visible in sysfs: a pair of GPUs is
// classed by its PCIe path whatever NVLinks join them.
enum class Link {
  kSelf,  // X     the device itself
  kPix,   // PIX   at most one PCIe bridge or switch between them
  kPxb,   // PXB   several bridges or switches, but not the host bridge
  kPhb,   // PHB   through the host bridge: one root complex, different root ports
  kNode,  // NODE  different root complexes on one NUMA node
  kSys,   // SYS   different NUMA nodes (the SMP interconnect), or a node unknown
};
std::string_view linkName(Link link);  // "X", "PIX", ...

// A row (and column) of the matrix.
struct MatrixDevice {
  std::string label;                 // GPU0.., NIC0.. (nvidia-smi's names)
  const Gpu* gpu = nullptr;          // one of the two is set; both point into
  const RdmaDevice* rdma = nullptr;  // the Snapshot the matrix was made from
  const std::string& address() const;
  // The NUMA node the device is on; nullopt when nothing says (numa_node -1
  // on it and on every bridge above, on a machine of several nodes).
  std::optional<int> numa_node;
  // numa_node is not the device's own numa_node: a bridge's above it, or the
  // only node of the machine.
  bool numa_inferred = false;
  std::vector<int> cpus;  // numa_node's CPUs; empty when it is unknown
};

struct Matrix {
  // Every GPU (NVIDIA, AMD, Intel; by PCI address, as nvidia-smi numbers
  // them), then every RDMA device, VFs included (by name, numbers compared
  // as numbers: mlx5_2 before mlx5_10).
  std::vector<MatrixDevice> devices;
  std::vector<std::vector<Link>> links;  // links[i][j] == links[j][i]
};

// The matrix of `snap`, which must outlive it. Classes come from each
// device's chain of upstream bridges (topology.h): PIX when the bridges
// between the two belong to one switch (or are one bridge: functions of one
// card, a PF and its VFs), PXB when more, PHB when they meet only at the
// root complex; across root complexes NODE when both are on one NUMA node,
// SYS otherwise, and SYS when either's node is unknown (nothing shows they
// share one: a pair is never drawn nearer than it may be).
Matrix connectionMatrix(const Snapshot& snap);
// The rows would point into a Snapshot destroyed at the end of the call.
Matrix connectionMatrix(Snapshot&& snap) = delete;

// The matrix as text: a header row, one row per device with its CPU
// Affinity and NUMA Affinity ("1*" when inferred, "N/A" when unknown; CPU
// Affinity "none" for a node without CPUs: no cell is ever blank), the
// legend, and GPU and NIC legends naming each row's device. Columns are
// padded with spaces; text from sysfs in the legends is printable ASCII,
// cut short.
std::string matrixText(const Matrix& matrix);

// A Graphviz (DOT) graph of the machine: sockets -> NUMA nodes -> root
// complexes -> PCIe switches (outermost first) -> GPUs and RDMA devices, VFs
// under their PF; labelled with addresses, models, minors and NUMA nodes.
// Node IDs are made up here (no sysfs text in them); every label text taken
// from sysfs is escaped for a DOT string (quotes, backslashes; control and
// non-ASCII bytes as \xNN, '&' as "&amp;" so Graphviz reads no character
// entity) and cut at kMaxDotTextBytes.
inline constexpr size_t kMaxDotTextBytes = 64;
std::string dot(const Snapshot& snap);

// `text` as the inside of a DOT double-quoted string: printable ASCII kept,
// `"` and `\` backslash-escaped, `&` as "&amp;" (Graphviz turns "&#10;" in a
// label into a line break), every other byte as the visible text \xNN;
// at most `max_bytes` bytes of `text`, then "...". Exposed for the tests.
std::string dotEscape(std::string_view text, size_t max_bytes = kMaxDotTextBytes);

// One device of a pod as crihookd's records name it; the first of pci,
// name, uverbs, minor that the snapshot knows finds it.
struct PodDevice {
  std::string type;    // "gpu", "rdma"; anything else is listed as not placed
  int minor = -1;      // a GPU's minor (-1: not known)
  std::string pci;     // PCI address (an RDMA VF's own)
  std::string name;    // RDMA device name (mlx5_3)
  std::string uverbs;  // uverbs3
};

// Where a pod's devices and CPUs sit, a line each, indented by `indent`:
//   GPU3 (minor 3, 0000:3b:00.0): switch 0000:38:00.0, root complex
//     pci0000:37, NUMA 0, socket 0
//   NIC1 mlx5_1 (0000:3c:00.0): ...
//   cpus 0-7 on NUMA 0 (socket 0)
// (its switch, else its root port, else "on the root complex's bus"; "under
// no root complex sysfs shows" when sysfs places it under none),
// then what is wrong at a glance: the farthest link between its devices
// (matrix classes) and CPUs off the devices' NUMA nodes. `cpuset` empty:
// the pod is not pinned; nullopt: its CPUs are not known (nothing said of
// them). A device the snapshot does not know is said so.
std::string podPicture(const Snapshot& snap, const std::vector<PodDevice>& devices,
                       std::optional<std::string_view> cpuset, std::string_view indent = "  ");

}  // namespace crihook::topology
