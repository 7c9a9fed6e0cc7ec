#pragma once

// Remote hook servers (tier 3), over gRPC on Unix sockets, reached by the
// chain as Hooks:
//  - crihook's own protocol (crihook.hook.v1.HookService), configured as
//    [[hook]] endpoint = ...: can return everything an Adjustment holds and
//    reject a call;
//  - Koordinator's RuntimeHookService (runtime.v1alpha1), registered by
//    files in /etc/runtime/hookserver.d (hookserver_dir.h): labels,
//    annotations, cgroup parent and resources, as koord-runtime-proxy sends
//    them, so koordlet works unchanged.
// Each call carries the chain's deadline for the hook; a server that is down,
// crashes mid-call or answers garbage is a hook failure (its failure policy
// decides), named in the message.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/hook.h"
#include "hooks/wire.h"

namespace crihook {

// The label by which a pod opts out of Koordinator hook servers (so a hook
// server can itself run as a pod).
inline constexpr const char* kSkipHookServerLabel = "runtimeproxy.koordinator.sh/skip-hookserver";

// How many of a server's calls are in flight at once, and how many more may
// wait for one of them (base/call_slots.h): a server that hangs holds
// `calls` of crihookd's calls to it, `queue` more wait out their own
// timeout, and any more are answered at once with RESOURCE_EXHAUSTED under
// its failure policy. No server's calls wait for another's.
struct RemoteHookLimits {
  size_t calls;
  size_t queue;
};

// A Koordinator hook server's (hookserver.d has no setting for them):
// koordlet answers in milliseconds (bench/koord_hook_latency: p99 200 ms on
// a saturated node), so 16 at once covers the burst of a node starting its
// pods; 64 more wait rather than lose the server's answer.
inline constexpr RemoteHookLimits kKoordinatorServerLimits{16, 64};

// `limits`: the [[hook]]'s workers (calls) and queue.
std::shared_ptr<Hook> makeCrihookRemoteHook(std::string name, std::string socket_path,
                                            std::vector<StageId> stages, RemoteHookLimits limits);

// `stages`: Koordinator's hook types ("PreRunPodSandbox", ...) as crihook
// stages (koordinatorStage()).
std::shared_ptr<Hook> makeKoordinatorHook(std::string name, std::string socket_path,
                                          std::vector<StageId> stages,
                                          RemoteHookLimits limits = kKoordinatorServerLimits);

// Koordinator's runtime hook type name -> stage: PreRunPodSandbox,
// PostStopPodSandbox, PreCreateContainer, PreStartContainer,
// PostStartContainer, PostStopContainer, PreUpdateContainerResources.
// INVALID_ARGUMENT for anything else, listing these.
absl::StatusOr<StageId> koordinatorStage(std::string_view hook_type);

// True for the hook types Koordinator defines that its RuntimeHookService has
// no call for (PreRemoveRunPodSandbox: koordlet serves it through NRI only).
bool isKoordinatorStageWithoutRpc(std::string_view hook_type);

}  // namespace crihook
