#pragma once

// The device-lifecycle hook's sandboxes: one slot per sandbox (pod UID and
// attempt) that holds its record and the lock that serialises everything
// done for it (an init, a cleanup, a retry, reconciling), and an index of
// them by the runtime's sandbox id.
//
// Locks: each Slot's `mu` guards that slot; the table's own mutex guards
// the map of slots and the index. Lock order: a slot's lock before the
// table's; the table's is held for a lookup only, never while waiting for a
// slot's lock, so a long action under one slot's lock never holds up
// another sandbox.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "hooks/builtin/lifecycle/records.h"

namespace crihook {

// One sandbox's record and its lock.
struct Slot {
  Mutex mu;
  std::optional<DeviceRecord> record ABSL_GUARDED_BY(mu);
  // Read at start: reconciling squares it with the runtime.
  bool from_disk ABSL_GUARDED_BY(mu) = false;
  // RunPodSandbox calls for this sandbox between their pre and post stage,
  // and whether one ended so that the runtime may have made the sandbox
  // anyway: then a failed call does not clean up (the sandbox may exist).
  int running_calls ABSL_GUARDED_BY(mu) = 0;
  bool maybe_created ABSL_GUARDED_BY(mu) = false;
};

class SandboxSlots {
 public:
  using Entry = std::pair<SandboxKey, std::shared_ptr<Slot>>;

  // Calls fn(slot) with the sandbox's slot locked, made empty first when
  // there is none and `create`; false without calling it when there is none
  // and !create. A slot forgotten while this waited for its lock is not
  // handed to `fn` (a record put in it would be lost): the lookup starts
  // again. A slot `fn` leaves without a record is not kept: the table holds
  // no slot that holds nothing, whatever a caller asked to make. `fn` is
  // declared ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu).
  template <typename Fn>
  bool withSlot(const SandboxKey& key, bool create, Fn&& fn) {
    for (;;) {
      std::shared_ptr<Slot> s = find(key, create);
      if (!s) return false;
      MutexLock lock(s->mu);
      if (!holds(key, s.get())) continue;
      // Called so, not as fn(*s): clang's analysis then maps fn's
      // ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu) to this slot (through a plain
      // call it shifts the arguments by one and names `fn.mu`).
      fn.operator()(*s);
      if (!s->record) forgetEmpty(key, s.get());
      return true;
    }
  }

  // The sandbox's slot, not locked; null when there is none and !create.
  std::shared_ptr<Slot> find(const SandboxKey& key, bool create = false);
  // Every slot, not locked, in key order: a snapshot of the table.
  std::vector<Entry> all() const;
  // Adds a slot read at start (before any call), indexed by its sandbox id
  // unless that is empty.
  void add(const SandboxKey& key, std::shared_ptr<Slot> slot, const std::string& sandbox_id);
  // Removes the sandbox's slot, and `sandbox_id` from the index unless empty.
  // Called with the slot's lock held: whoever waits for it then finds it gone.
  void forget(const SandboxKey& key, const std::string& sandbox_id);

  // The runtime's sandbox `id` is `key`'s; which sandbox an id is.
  void index(const std::string& id, const SandboxKey& key);
  std::optional<SandboxKey> keyOf(const std::string& id) const;

 private:
  // Whether `slot` is still the sandbox's.
  bool holds(const SandboxKey& key, const Slot* slot) const;
  // Removes `slot`, left without a record (so never indexed), while it is
  // still the sandbox's.
  void forgetEmpty(const SandboxKey& key, const Slot* slot);

  mutable Mutex mu_;
  std::map<SandboxKey, std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SandboxKey> by_sandbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace crihook
