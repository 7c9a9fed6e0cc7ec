#include "metrics/call_metrics.h"

#include "base/text.h"
#include "cri-api/runtime_v1.rpcs.h"

namespace crihook::metrics {

namespace {

// gRPC's codes 0..16.
constexpr size_t kCodes = 17;

}  // namespace

struct CallMetrics::Method {
  std::string path;  // owns the key of methods_
  std::string service, name;
  // Created on the first call with that code, then read lock-free.
  std::array<std::atomic<Counter*>, kCodes> calls{};
  std::array<std::atomic<Histogram*>, kCodes> duration{};
};

std::string_view grpcCodeName(absl::StatusCode code) {
  static constexpr std::array<std::string_view, kCodes> kNames = {"OK",
                                                                  "CANCELLED",
                                                                  "UNKNOWN",
                                                                  "INVALID_ARGUMENT",
                                                                  "DEADLINE_EXCEEDED",
                                                                  "NOT_FOUND",
                                                                  "ALREADY_EXISTS",
                                                                  "PERMISSION_DENIED",
                                                                  "RESOURCE_EXHAUSTED",
                                                                  "FAILED_PRECONDITION",
                                                                  "ABORTED",
                                                                  "OUT_OF_RANGE",
                                                                  "UNIMPLEMENTED",
                                                                  "INTERNAL",
                                                                  "UNAVAILABLE",
                                                                  "DATA_LOSS",
                                                                  "UNAUTHENTICATED"};
  const auto i = static_cast<size_t>(code);
  return i < kCodes ? kNames[i] : "UNKNOWN";
}

CallMetrics::CallMetrics(Registry& registry)
    : calls_(registry.counter("crihook_cri_calls_total",
                              "CRI calls relayed to the runtime, by method and gRPC status code "
                              "(also calls crihookd answered itself: refused, hook rejections).",
                              {"service", "method", "code"})),
      duration_(registry.histogram("crihook_cri_call_duration_seconds",
                                   "Time from a CRI call's request headers to its final status, "
                                   "hooks included.",
                                   {"service", "method", "code"})) {
  // runtime.v1alpha2 has the same services and (a subset of the) method
  // names; kubelets before 1.26 speak it.
  for (const criapi::Rpc& rpc : criapi::kRuntimeRpcs) {
    for (const char* api : {"runtime.v1", "runtime.v1alpha2"}) {
      auto method = std::make_unique<Method>();
      method->service = cat(api, ".", rpc.service);
      method->name = std::string(rpc.method);
      method->path = cat("/", method->service, "/", method->name);
      const std::string_view key = method->path;
      methods_.emplace(key, std::move(method));
    }
  }
  other_ = std::make_unique<Method>();
  other_->service = "other";
  other_->name = "other";
}

CallMetrics::~CallMetrics() = default;

CallMetrics::Method& CallMetrics::methodOf(std::string_view path) {
  auto it = methods_.find(path);
  return it == methods_.end() ? *other_ : *it->second;
}

void CallMetrics::record(std::string_view path, absl::StatusCode code,
                         std::chrono::nanoseconds duration) {
  Method& m = methodOf(path);
  size_t c = static_cast<size_t>(code);
  if (c >= kCodes) c = static_cast<size_t>(absl::StatusCode::kUnknown);
  Counter* counter = m.calls[c].load(std::memory_order_acquire);
  Histogram* histogram = m.duration[c].load(std::memory_order_acquire);
  if (counter == nullptr || histogram == nullptr) {
    // Family::with returns the same series to every thread that races here.
    const std::vector<std::string> labels = {
        m.service, m.name, std::string(grpcCodeName(static_cast<absl::StatusCode>(c)))};
    counter = &calls_.with(labels);
    histogram = &duration_.with(labels);
    m.calls[c].store(counter, std::memory_order_release);
    m.duration[c].store(histogram, std::memory_order_release);
  }
  counter->inc();
  histogram->observe(std::chrono::duration<double>(duration).count());
}

}  // namespace crihook::metrics
