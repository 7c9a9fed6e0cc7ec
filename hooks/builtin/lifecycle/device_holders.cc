#include "hooks/builtin/lifecycle/device_holders.h"

#include "base/text.h"

namespace crihook {

std::string DeviceHolders::deviceId(const DeviceFacts& d) {
  return cat(d.type, ":", d.pci.empty() ? std::to_string(d.minor) : d.pci);
}

absl::StatusOr<std::vector<std::string>> DeviceHolders::claim(const DeviceRecord& r) {
  MutexLock lock(mu_);
  for (const DeviceFacts& d : r.devices) {
    auto it = owed_.find(deviceId(d));
    if (it == owed_.end()) continue;
    for (const auto& [k, pod] : it->second) {
      if (!(k == r.key))
        return absl::UnavailableError(cat(d.describe(), " still owes its cleanup after pod ", pod));
    }
  }
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
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const std::string id = deviceId(r.devices[i]);
    bool last = true;
    if (auto it = holders_.find(id); it != holders_.end()) {
      it->second.erase(r.key);
      last = it->second.empty();
      if (last) holders_.erase(it);
    }
    const bool clean = i < r.cleaned.size() && r.cleaned[i];
    if (last && i < r.touched && !clean) {
      owed_[id][r.key] = cat(r.pod.namespace_, "/", r.pod.name);
    } else if (auto o = owed_.find(id); o != owed_.end()) {
      o->second.erase(r.key);
      if (o->second.empty()) owed_.erase(o);
    }
  }
}

void DeviceHolders::cleaned(const DeviceFacts& d, const SandboxKey& key) {
  MutexLock lock(mu_);
  auto o = owed_.find(deviceId(d));
  if (o == owed_.end()) return;
  o->second.erase(key);
  if (o->second.empty()) owed_.erase(o);
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

std::optional<SandboxKey> DeviceHolders::owedBy(const DeviceFacts& d, const SandboxKey& key) const {
  MutexLock lock(mu_);
  auto it = owed_.find(deviceId(d));
  if (it == owed_.end()) return std::nullopt;
  for (const auto& [k, pod] : it->second) {
    if (!(k == key)) return k;
  }
  return std::nullopt;
}

}  // namespace crihook
