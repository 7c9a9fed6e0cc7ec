#include "metrics/health.h"

#include "base/grpc_channel.h"
#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "cri-api/runtime_v1.pb.h"

namespace crihook::metrics {

using Clock = std::chrono::steady_clock;

void Readiness::set(bool ready, std::string phase) {
  MutexLock lock(mu_);
  ready_ = ready;
  phase_ = std::move(phase);
}

bool Readiness::ready(std::string* phase) const {
  MutexLock lock(mu_);
  if (phase) *phase = phase_;
  if (!ready_) return false;
  for (const Check& check : checks_) {
    if (std::string why = check(); !why.empty()) {
      if (phase) *phase = std::move(why);
      return false;
    }
  }
  return true;
}

void Readiness::addCheck(Check check) {
  MutexLock lock(mu_);
  checks_.push_back(std::move(check));
}

BackendHealth::BackendHealth(Probe probe, std::chrono::milliseconds timeout,
                             std::chrono::milliseconds cache_for)
    : probe_(std::move(probe)), timeout_(timeout), cache_for_(cache_for) {
  thread_ = namedThread("health-probe", [this] { loop(); });
}

BackendHealth::~BackendHealth() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notifyAll();
  thread_.join();
}

uint64_t BackendHealth::probes() const {
  MutexLock lock(mu_);
  return probes_;
}

void BackendHealth::check(std::function<void(absl::Status)> done) {
  absl::Status cached;
  {
    MutexLock lock(mu_);
    if (!have_last_ || Clock::now() - last_at_ >= cache_for_) {
      waiting_.push_back(std::move(done));
      cv_.notifyAll();
      return;
    }
    cached = last_;
  }
  done(cached);
}

void BackendHealth::loop() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && waiting_.empty()) cv_.wait(lock);
    if (stopping_) break;
    // The probe and the callers' replies run outside the lock.
    lock.unlock();
    absl::Status s;
    try {
      s = probe_(timeout_);
    } catch (const std::exception& e) {
      s = absl::InternalError(cat("health probe threw: ", e.what()));
    }
    lock.lock();
    ++probes_;
    last_ = s;
    last_at_ = Clock::now();
    have_last_ = true;
    std::vector<std::function<void(absl::Status)>> waiting;
    waiting.swap(waiting_);
    lock.unlock();
    for (auto& w : waiting) w(s);
    lock.lock();
  }
  // Whoever still waits learns that crihookd is stopping.
  std::vector<std::function<void(absl::Status)>> waiting;
  waiting.swap(waiting_);
  lock.unlock();
  for (auto& w : waiting) w(absl::UnavailableError("crihookd is stopping"));
}

BackendHealth::Probe runtimeVersionProbe(const std::string& endpoint) {
  const std::string path = endpoint.starts_with("unix://") ? endpoint.substr(7) : endpoint;
  // Connects on each probe (of at most one per cache period), none until the first.
  auto channel = std::make_shared<const GrpcChannel>(path);
  const std::string request = runtime::v1::VersionRequest().SerializeAsString();
  return [channel, request, endpoint](std::chrono::milliseconds timeout) -> absl::Status {
    auto reply =
        channel->call("/runtime.v1.RuntimeService/Version", request, Clock::now() + timeout);
    if (reply.ok() || reply.status().code() == absl::StatusCode::kUnimplemented) {
      return absl::OkStatus();
    }
    return absl::UnavailableError(cat("runtime ", endpoint, " did not answer Version within ",
                                      timeout.count(),
                                      "ms: ", boundedMessage(sv(reply.status().message()))));
  };
}

HttpEndpoint::Handler routes(const Registry& registry, BackendHealth& health,
                             const Readiness& readiness, std::string build) {
  return [&registry, &health, &readiness, build = std::move(build)](
             const std::string& path, std::function<void(HttpResponse)> reply) {
    if (path == "/metrics") {
      reply({200, "text/plain; version=0.0.4; charset=utf-8", registry.expose()});
    } else if (path == "/healthz") {
      health.check([reply](absl::Status s) {
        if (s.ok()) {
          reply({200, "text/plain; charset=utf-8", "ok\n"});
        } else {
          reply({503, "text/plain; charset=utf-8", cat(sv(s.message()), "\n")});
        }
      });
    } else if (path == "/readyz") {
      std::string phase;
      if (readiness.ready(&phase)) {
        reply({200, "text/plain; charset=utf-8", cat("ok\n", build, "\n")});
      } else {
        reply({503, "text/plain; charset=utf-8", cat("not ready: ", phase, "\n", build, "\n")});
      }
    } else {
      reply({404, "text/plain; charset=utf-8", "not found: try /metrics, /healthz, /readyz\n"});
    }
  };
}

}  // namespace crihook::metrics
