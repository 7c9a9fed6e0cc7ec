#include "metrics/hook_metrics.h"

namespace crihook::metrics {

HookMetrics::HookMetrics(Registry& r)
    : calls_(r.counter("crihook_hook_calls_total", "Hook runs, by hook and stage.",
                       {"hook", "stage"})),
      rejections_(r.counter("crihook_hook_rejections_total",
                            "Hook runs that rejected the CRI call.", {"hook", "stage"})),
      failures_(r.counter("crihook_hook_failures_total",
                          "Hook runs that failed (an error or a timeout), whatever the hook's "
                          "failure policy made of it.",
                          {"hook", "stage"})),
      timeouts_(r.counter("crihook_hook_timeouts_total",
                          "Hook runs cut at (or returning after) their time budget.",
                          {"hook", "stage"})),
      duration_(r.histogram("crihook_hook_duration_seconds",
                            "Time a hook run took, as the chain waited for it.",
                            {"hook", "stage"})),
      stuck_workers_(r.gauge("crihook_hook_stuck_workers",
                             "Hook workers still running a call that timed out (its answer will "
                             "be dropped).",
                             {"hook"})),
      unhealthy_(r.gauge("crihook_hook_unhealthy",
                         "1 while a hook is refused after timing out again and again.", {"hook"})),
      refused_(r.counter("crihook_hook_refused_total",
                         "Hook calls answered without running the hook, by reason (queue_full, "
                         "unhealthy).",
                         {"hook", "reason"})) {}

HookExecutorMetrics& HookMetrics::executor(const std::string& hook) {
  MutexLock lock(mu_);
  auto& slot = executors_[hook];
  if (!slot) {
    slot.reset(new HookExecutorMetrics{stuck_workers_.with({hook}), unhealthy_.with({hook}),
                                       refused_.with({hook, "queue_full"}),
                                       refused_.with({hook, "unhealthy"})});
  }
  return *slot;
}

HookStageMetrics& HookMetrics::of(const std::string& hook, const std::string& stage) {
  MutexLock lock(mu_);
  auto& slot = stages_[{hook, stage}];
  if (!slot) {
    const std::vector<std::string> labels = {hook, stage};
    slot.reset(new HookStageMetrics{calls_.with(labels), rejections_.with(labels),
                                    failures_.with(labels), timeouts_.with(labels),
                                    duration_.with(labels)});
  }
  return *slot;
}

DeviceMetrics::DeviceMetrics(Registry& r, const std::string& hook)
    : pending(r.gauge("crihook_device_cleanups_pending",
                      "Sandboxes whose device cleanup is owed (failed and retried, or not run "
                      "yet).",
                      {"hook"})
                  .with({hook})),
      hook_(hook),
      inits_(r.counter("crihook_device_inits_total",
                       "Devices initialised (every init action done).", {"hook", "type"})),
      init_failures_(r.counter("crihook_device_init_failures_total",
                               "Device inits that failed (the sandbox was refused).",
                               {"hook", "type"})),
      cleanups_(r.counter("crihook_device_cleanups_total",
                          "Devices cleaned up (every cleanup action done).", {"hook", "type"})),
      cleanup_failures_(r.counter("crihook_device_cleanup_failures_total",
                                  "Device cleanup attempts that failed (each is retried).",
                                  {"hook", "type"})) {}

Counter& DeviceMetrics::inits(const std::string& type) { return inits_.with({hook_, type}); }
Counter& DeviceMetrics::initFailures(const std::string& type) {
  return init_failures_.with({hook_, type});
}
Counter& DeviceMetrics::cleanups(const std::string& type) { return cleanups_.with({hook_, type}); }
Counter& DeviceMetrics::cleanupFailures(const std::string& type) {
  return cleanup_failures_.with({hook_, type});
}

}  // namespace crihook::metrics
