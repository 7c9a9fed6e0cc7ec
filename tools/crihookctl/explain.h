#pragma once

// `crihookctl explain CONTAINER-ID`: what crihookd's hooks did to a
// container, read from crihookd's state directory (hooks/state_store.h).

#include <ostream>
#include <string>

#include "cri-api/crihook_hook_v1.pb.h"

namespace crihook::ctl {

// Writes, for the container `id` of `state`: the configuration kubelet sent,
// every stage's hooks and each change with the hook that made it, what went
// to the runtime, and the resource decisions kept for UpdateContainerResources.
void explainContainer(const hook::v1::PodState& state, const std::string& id, std::ostream& out);

}  // namespace crihook::ctl
