#pragma once

// Per CRI call numbers for every relayed call, intercepted or not:
// crihook_cri_calls_total and crihook_cri_call_duration_seconds by service,
// method and gRPC status code.
//
// The label values never come from the request: a :path is looked up in a
// table of the CRI's methods (runtime.v1 and runtime.v1alpha2
// RuntimeService and ImageService, from the generated descriptors) built
// once; any other path counts as service="other", method="other". So a
// client sending random paths cannot grow the series.

#include <absl/status/status.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "metrics/metric_registry.h"

namespace crihook::metrics {

class CallMetrics {
 public:
  // Registers the two families in `registry`, which must outlive this.
  explicit CallMetrics(Registry& registry);
  ~CallMetrics();

  // One finished call. Thread-safe, lock-free once the (method, code) series
  // exists (the first call of each pair takes the family's mutex once).
  void record(std::string_view path, absl::StatusCode code, std::chrono::nanoseconds duration);

 private:
  struct Method;
  Method& methodOf(std::string_view path);

  Family<Counter>& calls_;
  Family<Histogram>& duration_;
  std::unordered_map<std::string_view, std::unique_ptr<Method>> methods_;  // by :path
  std::unique_ptr<Method> other_;
};

// The gRPC status code's name as gRPC spells it ("OK", "DEADLINE_EXCEEDED").
std::string_view grpcCodeName(absl::StatusCode code);

}  // namespace crihook::metrics
