#include "nri/budget.h"

#include "base/text.h"

namespace crihook::nri {

namespace {

using M = LifecycleMethod;
constexpr Phase kPre = Phase::kPre;
constexpr Phase kPost = Phase::kPost;

}  // namespace

const std::vector<EventStages>& eventStages() {
  // As nri/front.cc answers them: a pre-stage before the answer; a
  // post-stage at the Post* event, or with the pre-stage when NRI reports
  // the step done.
  static const std::vector<EventStages> kStages = {
      {"RunPodSandbox", 1, {{M::kRunPodSandbox, kPre}, {M::kRunPodSandbox, kPost}}},
      {"CreateContainer", 4, {{M::kCreateContainer, kPre}}},
      {"PostCreateContainer", 5, {{M::kCreateContainer, kPost}}},
      {"StartContainer", 6, {{M::kStartContainer, kPre}}},
      {"PostStartContainer", 7, {{M::kStartContainer, kPost}}},
      {"UpdateContainer", 8, {{M::kUpdateContainerResources, kPre}}},
      {"PostUpdateContainer", 9, {{M::kUpdateContainerResources, kPost}}},
      {"StopContainer", 10, {{M::kStopContainer, kPre}, {M::kStopContainer, kPost}}},
      {"StopPodSandbox", 2, {{M::kStopPodSandbox, kPre}, {M::kStopPodSandbox, kPost}}},
      {"RemoveContainer", 11, {{M::kRemoveContainer, kPre}, {M::kRemoveContainer, kPost}}},
      {"RemovePodSandbox", 3, {{M::kRemovePodSandbox, kPre}, {M::kRemovePodSandbox, kPost}}},
  };
  return kStages;
}

int32_t eventOf(LifecycleMethod method, Phase phase) {
  for (const EventStages& e : eventStages()) {
    for (const Stage& s : e.stages) {
      if (s.method == method && s.phase == phase) return e.number;
    }
  }
  return 0;  // unreachable: every stage has its event (nri_budget checks)
}

int32_t subscribedEvents(const StageSubscribed& has_hooks) {
  int32_t mask = 0;
  for (const EventStages& e : eventStages()) {
    bool wanted = false;
    for (const Stage& s : e.stages) {
      // Create's and Update's post-stages go with their pre-stage's answer
      // unless a hook waits for their Post* event (nri/front.h).
      const bool folded =
          s.phase == Phase::kPost && (s.method == LifecycleMethod::kCreateContainer ||
                                      s.method == LifecycleMethod::kUpdateContainerResources);
      wanted = wanted || has_hooks(s.method, s.phase) ||
               (!folded && (specOf(s.method).effect != Effect::kNone ||
                            specOf(s.method).mutableResources != nullptr));
    }
    if (wanted) mask |= eventBit(e.number);
  }
  return mask;
}

absl::Status checkBudget(const StageHooks& hooks, std::chrono::milliseconds plugin_request_timeout,
                         std::chrono::milliseconds margin, TimeoutSource source) {
  const std::chrono::milliseconds budget = plugin_request_timeout - margin;
  const EventStages* worst = nullptr;
  std::chrono::milliseconds worst_sum{0};
  std::string worst_list;
  for (const EventStages& e : eventStages()) {
    std::chrono::milliseconds sum{0};
    std::string list;
    for (const Stage& s : e.stages) {
      for (const TimedHook& h : hooks(s.method, s.phase)) {
        sum += h.timeout;
        list += cat(list.empty() ? "" : " + ", h.name, " (", durationText(h.timeout), ", ",
                    s.phase == Phase::kPre ? "pre" : "post", ")");
      }
    }
    if (sum > budget && sum > worst_sum) {
      worst = &e;
      worst_sum = sum;
      worst_list = std::move(list);
    }
  }
  if (worst == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(cat(
      "NRI event ", worst->event, " runs hooks for up to ", durationText(worst_sum), ": ",
      worst_list,
      "; the runtime drops a plugin that answers later than its plugin_request_timeout (",
      source == TimeoutSource::kConfig ? "nri.plugin_request_timeout = "
                                       : "the runtime's own, sent at NRI Configure: ",
      durationText(plugin_request_timeout), ", less crihookd's margin of ", durationText(margin),
      "), and the pod goes on without its "
      "hooks. Raise plugin_request_timeout in containerd's [plugins.\"io.containerd.nri.v1.nri\"] "
      "and nri.plugin_request_timeout to at least ",
      durationText(worst_sum + margin), ", or lower those hooks' timeouts"));
}

}  // namespace crihook::nri
