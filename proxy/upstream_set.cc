#include "proxy/upstream_set.h"

#include <cassert>

#include "base/text.h"

namespace crihook::relay {

std::shared_ptr<Upstream> UpstreamSet::current() {
  if (upstream_ && (upstream_->closed() || upstream_->draining())) {
    if (!upstream_->closed()) draining_.push_back(upstream_);
    upstream_.reset();
  }
  return upstream_;
}

void UpstreamSet::forward(Call& call) {
  assert(loop_.inLoop());
  if (!call.passThrough()) call.req_body.assign(call.forward_body);
  if (std::shared_ptr<Upstream> up = current(); up && !connecting_) {
    if (up->submit(call)) return;
    // The session has no stream ids left: retire it, open another.
    draining_.push_back(up);
    upstream_.reset();
  }
  waiting_.push_back(call.down_id);
  if (connecting_) return;
  connecting_ = true;
  auto up = std::make_shared<Upstream>(loop_, &owner_);
  upstream_ = up;
  // The owner holds this set: keeping it alive keeps `this`.
  up->connect(ctx_.backend_path, ctx_.connect_timeout,
              [this, owner = owner_.sharedOwner(), up](const std::string& error) {
                onConnected(up, error);
              });
}

void UpstreamSet::onConnected(const std::shared_ptr<Upstream>& up, const std::string& error) {
  connecting_ = false;
  if (owner_.closed() || up != upstream_) {
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
      if (Call* call = owner_.find(id)) {
        owner_.answer(*call, absl::UnavailableError(cat("crihookd: backend ", ctx_.backend_endpoint,
                                                        " unavailable: ", error)));
      }
    }
    owner_.scheduleFlush();
    return;
  }
  for (int32_t id : waiting) {
    if (Call* call = owner_.find(id); call && !call->answered) forward(*call);
  }
}

void UpstreamSet::onGoaway(Upstream& up) {
  if (upstream_.get() == &up) {
    draining_.push_back(upstream_);
    upstream_.reset();
  }
}

void UpstreamSet::onLost(Upstream& up, const std::string& why) {
  ctx_.log->debug("backend connection closed: {}", why);
  const std::vector<int32_t> affected = up.takeCalls();
  const absl::Status lost = absl::UnavailableError(cat("crihookd: backend connection lost: ", why));
  for (int32_t id : affected) {
    Call* call = owner_.find(id);
    if (call == nullptr) continue;
    call->up.reset();
    call->up_id = 0;
    if (call->resp_end) continue;
    if (!call->passThrough()) {
      replyWithStatus(*call, lost);
      owner_.onResponseEnd(*call);
    } else {
      owner_.answer(*call, lost);
    }
  }
  std::erase_if(draining_, [&](const auto& p) { return p.get() == &up; });
  if (upstream_.get() == &up) upstream_.reset();
  owner_.scheduleFlush();
}

void UpstreamSet::dropAll(const std::string& why) {
  for (auto& up : draining_) {
    up->detach();
    up->fail(why);
  }
  draining_.clear();
  if (upstream_) {
    upstream_->detach();
    upstream_->fail(why);
    upstream_.reset();
  }
  waiting_.clear();
}

}  // namespace crihook::relay
