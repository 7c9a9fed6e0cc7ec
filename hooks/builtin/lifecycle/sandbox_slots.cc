#include "hooks/builtin/lifecycle/sandbox_slots.h"

namespace crihook {

std::shared_ptr<Slot> SandboxSlots::find(const SandboxKey& key, bool create) {
  MutexLock lock(mu_);
  auto it = slots_.find(key);
  if (it != slots_.end()) return it->second;
  if (!create) return nullptr;
  return slots_[key] = std::make_shared<Slot>();
}

bool SandboxSlots::holds(const SandboxKey& key, const Slot* slot) const {
  MutexLock lock(mu_);
  auto it = slots_.find(key);
  return it != slots_.end() && it->second.get() == slot;
}

void SandboxSlots::forgetEmpty(const SandboxKey& key, const Slot* slot) {
  MutexLock lock(mu_);
  auto it = slots_.find(key);
  if (it != slots_.end() && it->second.get() == slot) slots_.erase(it);
}

std::vector<SandboxSlots::Entry> SandboxSlots::all() const {
  MutexLock lock(mu_);
  return {slots_.begin(), slots_.end()};
}

void SandboxSlots::add(const SandboxKey& key, std::shared_ptr<Slot> slot,
                       const std::string& sandbox_id) {
  MutexLock lock(mu_);
  if (!sandbox_id.empty()) by_sandbox_[sandbox_id] = key;
  slots_[key] = std::move(slot);
}

void SandboxSlots::forget(const SandboxKey& key, const std::string& sandbox_id) {
  MutexLock lock(mu_);
  if (!sandbox_id.empty()) by_sandbox_.erase(sandbox_id);
  slots_.erase(key);
}

void SandboxSlots::index(const std::string& id, const SandboxKey& key) {
  MutexLock lock(mu_);
  by_sandbox_[id] = key;
}

std::optional<SandboxKey> SandboxSlots::keyOf(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = by_sandbox_.find(id);
  if (it == by_sandbox_.end()) return std::nullopt;
  return it->second;
}

}  // namespace crihook
