#include "proxy/flow_ledger.h"

#include <algorithm>

namespace crihook::relay {

namespace {
constexpr int64_t kMaxWindow = (int64_t{1} << 31) - 1;
}  // namespace

bool FlowLedger::onKubeletInitialWindow(uint32_t size) {
  if (size > kMaxWindow) return false;
  const int64_t delta = int64_t{size} - kubelet_initial_;
  kubelet_initial_ = size;
  // RFC 9113 6.9.2: the change applies to every open stream's window, which
  // may go negative; the connection window is not changed by SETTINGS.
  for (auto& [stream, window] : own_) window += delta;
  return true;
}

uint32_t FlowLedger::forwardedIncrement(uint32_t increment) {
  kubelet_window_ += increment;
  const int64_t repaid = std::min<int64_t>(debt_, increment);
  debt_ -= repaid;
  return static_cast<uint32_t>(increment - repaid);
}

void FlowLedger::onKubeletStreamUpdate(uint32_t stream, uint32_t increment) {
  if (auto it = own_.find(stream); it != own_.end()) it->second += increment;
}

int64_t FlowLedger::ownRoom(uint32_t stream) const {
  auto it = own_.find(stream);
  if (it == own_.end()) return 0;
  return std::max<int64_t>(0, std::min(kubelet_window_, it->second));
}

void FlowLedger::onOwnSent(uint32_t stream, uint32_t length) {
  kubelet_window_ -= length;
  debt_ += length;
  if (auto it = own_.find(stream); it != own_.end()) it->second -= length;
}

void FlowLedger::openOwn(uint32_t stream) { own_.emplace(stream, kubelet_initial_); }

}  // namespace crihook::relay
