#pragma once

// `crihookctl explain CONTAINER-ID`: what crihookd's hooks did to a
// container, read from crihookd's state directory (hooks/state_store.h).

#include <ostream>
#include <string>
#include <vector>

#include "cri-api/crihook_hook_v1.pb.h"
#include "topology/topology.h"
#include "topology/views.h"

namespace crihook::ctl {

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
