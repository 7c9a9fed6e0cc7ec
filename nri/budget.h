#pragma once

// NRI mode's events: which of the seam's stages each one runs, which ones
// crihookd subscribes to, and the time budget. The runtime waits for each NRI event's answer for
// at most its plugin_request_timeout (containerd: 2 s by default); a later
// answer closes the plugin's connection, and the runtime goes on without
// it: a GPU pod is created without its GPUs. So every hook that may take its
// whole timeout on the stages one event runs must fit under it together,
// less crihookd's own margin (Front::Options::answer_margin). crihookd
// checks this once at start-up (docs/nri.md); at run time the stages
// are cut at the event's deadline anyway.

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "cri/lifecycle.h"

namespace crihook::nri {

struct Stage {
  LifecycleMethod method;
  Phase phase;
};

// One NRI event and the seam's stages the front runs before answering it
// (docs/nri.md, "The mapping").
struct EventStages {
  std::string_view event;
  int32_t number;  // NRI's Event value (bit number - 1 of a subscription mask)
  std::vector<Stage> stages;
};
const std::vector<EventStages>& eventStages();
// The event that runs the stage (its number), and its bit in a mask.
int32_t eventOf(LifecycleMethod method, Phase phase);
inline int32_t eventBit(int32_t number) { return int32_t{1} << (number - 1); }

// The events to subscribe to (Configure's mask, bit `event - 1`): always
// those whose steps make, change the resources of, or remove a pod or
// container (crihookd keeps records of them, and re-applies the hooks'
// resources on an update); the others (Start, Stop) only when
// `has_hooks(method, phase)` says a hook is on one of their stages; and
// PostCreateContainer and PostUpdateContainer only when a hook is on their
// post-stage (else the front runs it with the pre-stage's answer). An
// event costs the runtime a round trip while every pod operation of the
// node waits.
using StageSubscribed = std::function<bool(LifecycleMethod, Phase)>;
int32_t subscribedEvents(const StageSubscribed& has_hooks);

// A hook on a stage that may take up to its timeout (one that runs inline
// takes microseconds and is not counted).
struct TimedHook {
  std::string name;
  std::chrono::milliseconds timeout;
};
using StageHooks = std::function<std::vector<TimedHook>(LifecycleMethod, Phase)>;

// Where the plugin_request_timeout checked comes from: crihookd's
// [nri] plugin_request_timeout (at start-up), or the runtime's own, which
// NRI >= 0.7 sends in ConfigureRequest (at each registration).
enum class TimeoutSource { kConfig, kRuntime };

// OK when, for every event, the timeouts of `hooks` on its stages add up to
// at most `plugin_request_timeout` - `margin`. Otherwise INVALID_ARGUMENT
// naming the event that overflows most, its hooks with their timeouts, where
// the timeout came from, and the plugin_request_timeout that would fit.
absl::Status checkBudget(const StageHooks& hooks, std::chrono::milliseconds plugin_request_timeout,
                         std::chrono::milliseconds margin,
                         TimeoutSource source = TimeoutSource::kConfig);

}  // namespace crihook::nri
