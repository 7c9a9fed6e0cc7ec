// Downstream: the upstream connections its calls are forwarded on (opened
// on demand, retired after the backend's GOAWAY, their loss answered).

#include "base/text.h"
#include "proxy/downstream.h"

namespace crihook::relay {

std::shared_ptr<Upstream> Downstream::currentUpstream() {
  if (upstream_ && (upstream_->closed() || upstream_->draining())) {
    if (!upstream_->closed()) draining_.push_back(upstream_);
    upstream_.reset();
  }
  return upstream_;
}

void Downstream::forward(Call& call) {
  if (!call.passThrough()) call.req_body.assign(call.forward_body);
  if (std::shared_ptr<Upstream> up = currentUpstream(); up && !connecting_) {
    if (up->submit(call)) return;
    // The session has no stream ids left: retire it, open another.
    draining_.push_back(up);
    upstream_.reset();
  }
  waiting_.push_back(call.down_id);
  if (connecting_) return;
  connecting_ = true;
  auto up = std::make_shared<Upstream>(loop(), this);
  upstream_ = up;
  auto self = std::static_pointer_cast<Downstream>(shared_from_this());
  up->connect(ctx_.backend_path, ctx_.connect_timeout,
              [self, up](const std::string& error) { self->onUpstreamConnected(up, error); });
}

void Downstream::onUpstreamConnected(const std::shared_ptr<Upstream>& up,
                                     const std::string& error) {
  connecting_ = false;
  if (closed() || up != upstream_) {
    up->detach();
    up->fail("no longer needed");
    return;
  }
  std::vector<int32_t> waiting;
  waiting.swap(waiting_);
  if (!error.empty()) {
    // Fail fast: kubelet retries, and the next call tries to connect again.
    upstream_.reset();
    up->detach();
    ctx_.log->warn("backend {} unavailable: {}", ctx_.backend_endpoint, error);
    for (int32_t id : waiting) {
      if (Call* call = find(id)) {
        answer(*call, absl::UnavailableError(cat("crihookd: backend ", ctx_.backend_endpoint,
                                                 " unavailable: ", error)));
      }
    }
    scheduleFlush();
    return;
  }
  for (int32_t id : waiting) {
    if (Call* call = find(id); call && !call->answered) forward(*call);
  }
}

void Downstream::onUpstreamGoaway(Upstream& up) {
  if (upstream_.get() == &up) {
    draining_.push_back(upstream_);
    upstream_.reset();
  }
}

void Downstream::onUpstreamLost(Upstream& up, const std::string& why) {
  ctx_.log->debug("backend connection closed: {}", why);
  std::vector<int32_t> affected;
  for (const auto& [up_id, down_id] : up.streams_) affected.push_back(down_id);
  up.streams_.clear();
  const absl::Status lost = absl::UnavailableError(cat("crihookd: backend connection lost: ", why));
  for (int32_t id : affected) {
    Call* call = find(id);
    if (call == nullptr) continue;
    call->up.reset();
    call->up_id = 0;
    if (call->resp_end) continue;
    if (!call->passThrough() && !call->resp_submitted) {
      replyWithStatus(*call, lost);
      onResponseEnd(*call);
    } else {
      answer(*call, lost);
    }
  }
  std::erase_if(draining_, [&](const auto& p) { return p.get() == &up; });
  if (upstream_.get() == &up) upstream_.reset();
  scheduleFlush();
}

}  // namespace crihook::relay
