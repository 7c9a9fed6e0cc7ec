#include "proxy/relayed_streams.h"

#include <algorithm>

#include "proxy/call_budget.h"
#include "proxy/h2_frame.h"
#include "proxy/h2_headers.h"
#include "proxy/reencoder.h"

namespace crihook::relay {

RelayedStreams::Stream* RelayedStreams::find(uint32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : &it->second;
}

RelayedStreams::Stream& RelayedStreams::open(uint32_t id, std::string path) {
  Stream& s = streams_.try_emplace(id, ctx_.max_message_bytes).first->second;
  s.path = std::move(path);
  ctx_.active_calls.add();
  return s;
}

void RelayedStreams::end(uint32_t id, const absl::Status& status) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  if (!it->second.cut) {
    recordCall(ctx_, it->second.path, status.code(), it->second.start);
    ctx_.active_calls.done();
  }
  streams_.erase(it);
}

bool RelayedStreams::cut(uint32_t id, const absl::Status& status, uint32_t reset_code,
                         uint32_t max_frame, std::string& kubelet) {
  Stream* s = find(id);
  if (s == nullptr || s->cut) return false;
  if (reset_code != 0) {
    h2::appendRstStream(kubelet, id, reset_code);
  } else {
    appendEnd(kubelet, id, *s, status, max_frame);
  }
  recordCall(ctx_, s->path, status.code(), s->start);
  ctx_.active_calls.done();
  s->cut = true;
  s->cut_at = Clock::now();
  return true;
}

void RelayedStreams::appendEnd(std::string& frames, uint32_t id, const Stream& s,
                               const absl::Status& status, uint32_t max_frame) {
  if (!s.reply_headers) {
    h2::appendHeaderBlock(frames, id, literalBlock(trailersOnly(status)), true, max_frame);
  } else if (s.reply.atBoundary() || s.reply.cleanCut()) {  // cleanCut: a reply over the limit
    h2::appendHeaderBlock(frames, id, literalBlock(statusTrailers(status)), true, max_frame);
  } else {
    h2::appendRstStream(frames, id, h2::error::kInternalError);
  }
}

std::vector<uint32_t> RelayedStreams::idsAbove(uint32_t above) const {
  std::vector<uint32_t> ids;
  for (const auto& [id, s] : streams_) {
    if (id > above) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

void RelayedStreams::dropCut(Clock::time_point now) {
  std::erase_if(streams_, [&](const auto& e) {
    return e.second.cut && now - e.second.cut_at >= kZombieLinger;
  });
}

void RelayedStreams::closeAll() {
  for (auto& [id, s] : streams_) {
    if (s.cut) continue;
    ctx_.active_calls.done();
    recordCall(ctx_, s.path, absl::StatusCode::kCancelled, s.start);
  }
  streams_.clear();
}

}  // namespace crihook::relay
