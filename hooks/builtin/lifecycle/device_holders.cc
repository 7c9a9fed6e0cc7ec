#include "hooks/builtin/lifecycle/device_holders.h"

#include "base/text.h"

namespace crihook {

std::string DeviceHolders::deviceId(const DeviceFacts& d) {
  return cat(d.type, ":", d.pci.empty() ? std::to_string(d.minor) : d.pci);
}

std::vector<std::string> DeviceHolders::claim(const DeviceRecord& r) {
  MutexLock lock(mu_);
  std::vector<std::string> others;
  for (const DeviceFacts& d : r.devices) {
    auto& holders = holders_[deviceId(d)];
    std::string other;
    for (const auto& [k, pod] : holders) {
      if (!(k == r.key)) other = pod;
    }
    holders[r.key] = cat(r.pod.namespace_, "/", r.pod.name);
    others.push_back(other);
  }
  return others;
}

void DeviceHolders::release(const DeviceRecord& r) {
  MutexLock lock(mu_);
  for (const DeviceFacts& d : r.devices) {
    auto it = holders_.find(deviceId(d));
    if (it == holders_.end()) continue;
    it->second.erase(r.key);
    if (it->second.empty()) holders_.erase(it);
  }
}

std::string DeviceHolders::heldBy(const DeviceFacts& d, const SandboxKey& key) const {
  MutexLock lock(mu_);
  auto it = holders_.find(deviceId(d));
  if (it == holders_.end()) return "";
  for (const auto& [k, pod] : it->second) {
    if (!(k == key)) return pod;
  }
  return "";
}

}  // namespace crihook
