#pragma once

// `crihookctl explain CONTAINER-ID`: what crihookd's hooks did to a
// container, read from crihookd's state directory (hooks/state_store.h).

#include <ostream>
#include <string>
#include <vector>

#include "cri-api/crihook_hook_v1.pb.h"
#include "tools/crihookctl/command.h"
#include "topology/topology.h"
#include "topology/views.h"

namespace crihook::ctl {

// The command: `explain [--state-dir DIR] [--root DIR] ID`. The container
// whose ID starts with ID in crihookd's state (DIR, default
// /var/lib/crihook), explained (-o json: its pod's record with only that
// container), and with the node's topology under --root (default /) where
// its devices sit. An error naming the ID and the directory (exit 1) when no
// container, or more than one, matches.
absl::StatusOr<int> cmdExplain(const Invocation& in);

// Writes, for the container `id` of `state`: the configuration kubelet sent,
// every stage's hooks and each change with the hook that made it, what went
// to the runtime, and the resource decisions kept for UpdateContainerResources;
// then, with a `machine`, where its devices and CPUs sit on it (placedOn).
void explainContainer(const hook::v1::PodState& state, const std::string& id, std::ostream& out,
                      const topology::Snapshot* machine = nullptr);

// The devices a container got, from the host paths of its CRI devices:
// <dir>/nvidiaN is the GPU of minor N, <dir>/infiniband/uverbsN that RDMA
// device; other nodes (nvidiactl, rdma_cm, ...) are not devices of their own.
std::vector<topology::PodDevice> devicesOf(const ::runtime::v1::ContainerConfig& config);

}  // namespace crihook::ctl
