#include "proxy/ping_acks.h"

#include "proxy/h2_frame.h"

namespace crihook::relay {

void PingAcks::owe(std::string_view opaque) { owed_.append(opaque); }

bool PingAcks::dueNow(bool reply_expected) const {
  return !reply_expected || owed_.size() >= kMaxOwedPingAcks * 8;
}

absl::StatusOr<std::string> PingAcks::take() {
  unread_ += owed_.size() / 8;
  if (unread_ > kMaxUnreadPingAcks) {
    owed_.clear();
    return absl::ResourceExhaustedError(
        "kubelet sends PINGs faster than their ACKs reach it (it does not read, or the runtime "
        "stopped inside a frame)");
  }
  std::string frames;
  for (size_t i = 0; i + 8 <= owed_.size(); i += 8)
    h2::appendPingAck(frames, std::string_view(owed_).substr(i, 8));
  owed_.clear();
  return frames;
}

}  // namespace crihook::relay
