#pragma once

// `crihookctl topology [--root DIR] [--output tree|json|device-crd|matrix|dot]
// [--format yaml|json] [--node NAME] [--pcie-id root-complex|switch]`: the
// node's NUMA, PCIe, GPU and RDMA layout as topology::discover reads it from
// sysfs under DIR (default /; a fixture tree in tests): a tree (the default;
// -o json: json), JSON, a Koordinator Device object (YAML or JSON; named
// NAME, default the host name; pcieID per --pcie-id), the GPU/NIC matrix as
// nvidia-smi topo -m prints it, or a Graphviz graph. With dot and
// device-crd, what discovery could not read goes to stderr as warnings (the
// output is for a renderer or a scheduler), and a Device report whose GPUs
// lack their memory adds a WARNING not to publish it where GPUs are shared.
// A value none of these is a usage error naming the flag.

#include "tools/crihookctl/command.h"

namespace crihook::ctl {

absl::StatusOr<int> cmdTopology(const Invocation& in);

}  // namespace crihook::ctl
