#pragma once

// /healthz and /readyz, and the routes of the metrics endpoint.
//
// /healthz: 200 when the runtime answers Version within kProbeTimeout, else
// 503 with the reason. The answer is cached for kHealthCacheFor, so a storm
// of probes costs the runtime at most one Version a second; probes run on a
// thread of their own, never on the endpoint's loop, so /metrics is served
// while the runtime hangs.
// /readyz: 200 once crihookd serves (listening, hooks loaded, first
// topology discovered), 503 with the phase while starting or stopping; the
// body's second line names the build (`crihookd 0.1.0 (git ...)`), so a
// probe of a node shows which crihookd answers.

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "base/mutex.h"
#include "metrics/http_endpoint.h"
#include "metrics/metric_registry.h"

namespace crihook::metrics {

// containerd answers Version in well under a millisecond; a second is a
// runtime that is not serving.
constexpr std::chrono::milliseconds kProbeTimeout{1000};
constexpr std::chrono::milliseconds kHealthCacheFor{1000};

class Readiness {
 public:
  // What makes crihookd not ready while it serves: "" when all is well,
  // else why (the state folder cannot be written). Called on /readyz;
  // thread-safe and non-blocking.
  using Check = std::function<std::string()>;

  // Thread-safe.
  void set(bool ready, std::string phase);
  // Ready once set(true) and every check says "" (else `phase` is the
  // first check's reason).
  bool ready(std::string* phase = nullptr) const;
  void addCheck(Check check);

 private:
  mutable Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::string phase_ ABSL_GUARDED_BY(mu_) = "starting";
  std::vector<Check> checks_ ABSL_GUARDED_BY(mu_);
};

class BackendHealth {
 public:
  // `probe(timeout)`: OK when the runtime answered in time, else why not.
  // Called on the health thread only.
  using Probe = std::function<absl::Status(std::chrono::milliseconds timeout)>;

  explicit BackendHealth(Probe probe, std::chrono::milliseconds timeout = kProbeTimeout,
                         std::chrono::milliseconds cache_for = kHealthCacheFor);
  ~BackendHealth();  // joins the health thread (a probe in progress ends by its timeout)

  // Calls `done` with the runtime's health: at once when the last probe is
  // fresher than `cache_for`, else on the health thread ("health-probe")
  // after one probe (all callers waiting meanwhile share it). Thread-safe.
  void check(std::function<void(absl::Status)> done);

  // How many probes ran (for tests).
  uint64_t probes() const;

 private:
  void loop();  // the health thread

  Probe probe_;
  const std::chrono::milliseconds timeout_, cache_for_;
  mutable Mutex mu_;
  CondVar cv_;  // waiting_ or stopping_ set
  std::vector<std::function<void(absl::Status)>> waiting_ ABSL_GUARDED_BY(mu_);
  absl::Status last_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("not probed yet");
  std::chrono::steady_clock::time_point last_at_ ABSL_GUARDED_BY(mu_){};
  bool have_last_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t probes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// Version at a CRI runtime (runtime.v1; a runtime that answers
// UNIMPLEMENTED there serves, just not v1, and counts as healthy). The
// channel is made on the first probe and kept; the probe is for one thread.
BackendHealth::Probe runtimeVersionProbe(const std::string& endpoint);

// /metrics (the registry's text exposition), /healthz, /readyz (its
// second line `build`, crihookd's --version line); anything else 404. The
// three must outlive the endpoint.
HttpEndpoint::Handler routes(const Registry& registry, BackendHealth& health,
                             const Readiness& readiness, std::string build);

}  // namespace crihook::metrics
