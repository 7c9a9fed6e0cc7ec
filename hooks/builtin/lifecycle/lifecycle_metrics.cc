#include "hooks/builtin/lifecycle/lifecycle_metrics.h"

namespace crihook {

LifecycleMetrics::LifecycleMetrics(metrics::Registry* registry, const std::string& hook)
    : series_(registry ? std::make_unique<metrics::DeviceMetrics>(*registry, hook) : nullptr) {
  if (series_) series_->pending.set(0);  // none owed until the records say so
}

void LifecycleMetrics::initDone(const std::string& type) {
  if (series_) series_->inits(type).inc();
}

void LifecycleMetrics::initFailed(const std::string& type) {
  if (series_) series_->initFailures(type).inc();
}

void LifecycleMetrics::cleanupDone(const std::string& type) {
  if (series_) series_->cleanups(type).inc();
}

void LifecycleMetrics::cleanupFailed(const std::string& type) {
  if (series_) series_->cleanupFailures(type).inc();
}

void LifecycleMetrics::setPending(const SandboxKey& key, bool pending) {
  if (!series_) return;
  MutexLock lock(mu_);
  if (pending) {
    pending_.insert(key);
  } else {
    pending_.erase(key);
  }
  series_->pending.set(static_cast<int64_t>(pending_.size()));
}

}  // namespace crihook
