#include "hooks/adjustment.h"

#include "base/quote.h"
#include "base/text.h"

namespace crihook {
namespace {

constexpr std::string_view kRemoved = "<removed>";

// A value a hook set (it may come from a pod annotation), shown in a
// conflict message.
std::string quoted(std::string_view v) { return v == kRemoved ? std::string(v) : quote(v); }

// "env:NAME" -> "env NAME" for messages.
std::string label(std::string field) {
  if (auto colon = field.find(':'); colon != std::string::npos) field[colon] = ' ';
  return field;
}

std::string describe(const MountSpec& m) {
  return cat(m.host_path, m.readonly ? " (ro)" : " (rw)", " propagation ", m.propagation);
}

std::string describe(const DeviceSpec& d) { return cat(d.host_path, " ", d.permissions); }

}  // namespace

bool Adjustment::empty() const {
  return env.empty() && env_remove.empty() && mounts.empty() && devices.empty() &&
         cdi_devices.empty() && !cpuset_cpus && !cpuset_mems && !cpu_shares && !cpu_quota &&
         !cpu_period && !memory_limit_bytes && !memory_swap_limit_bytes && !oom_score_adj &&
         hugepage_limits.empty() && unified.empty() && annotations.empty() &&
         annotations_remove.empty() && labels.empty() && labels_remove.empty() && !cgroup_parent;
}

Adjustment resourcesOnly(const Adjustment& a) {
  Adjustment r;
  r.cpuset_cpus = a.cpuset_cpus;
  r.cpuset_mems = a.cpuset_mems;
  r.cpu_shares = a.cpu_shares;
  r.cpu_quota = a.cpu_quota;
  r.cpu_period = a.cpu_period;
  r.memory_limit_bytes = a.memory_limit_bytes;
  r.memory_swap_limit_bytes = a.memory_swap_limit_bytes;
  r.oom_score_adj = a.oom_score_adj;
  r.hugepage_limits = a.hugepage_limits;
  r.unified = a.unified;
  return r;
}

std::string MergedAdjustment::ownerOf(const std::string& field) const {
  auto it = owners_.find(field);
  return it == owners_.end() ? std::string() : it->second;
}

absl::Status MergedAdjustment::add(const std::string& hook, const Adjustment& a) {
  // Work on copies so a conflict leaves the merge as it was.
  Adjustment m = merged_;
  std::map<std::string, std::string> owners = owners_;
  // Claims `field` for `hook` with `value` (printable). Returns whether the
  // caller should store the new value.
  auto claim = [&](const std::string& field, const std::string& old_value, const std::string& value,
                   bool& store) -> absl::Status {
    auto it = owners.find(field);
    store = false;
    if (it == owners.end()) {
      owners[field] = hook;
      store = true;
      return absl::OkStatus();
    }
    if (old_value == value) return absl::OkStatus();  // the same decision twice
    if (precedence_ && precedence_(hook, it->second, precedence_ctx_)) {
      it->second = hook;
      store = true;
      return absl::OkStatus();
    }
    if (precedence_ && precedence_(it->second, hook, precedence_ctx_)) return absl::OkStatus();
    return absl::FailedPreconditionError(cat("hook ", it->second, " and hook ", hook, " both set ",
                                             label(field), ": ", quoted(old_value), " vs ",
                                             quoted(value)));
  };

  // env: set and remove share one key per name.
  auto envValue = [&](const std::string& name) -> std::string {
    for (const EnvVar& e : m.env) {
      if (e.name == name) return e.value;
    }
    return std::string(kRemoved);
  };
  for (const EnvVar& e : a.env) {
    bool store = false;
    if (auto s = claim("env:" + e.name, envValue(e.name), e.value, store); !s.ok()) return s;
    if (!store) continue;
    std::erase(m.env_remove, e.name);
    bool found = false;
    for (EnvVar& have : m.env) {
      if (have.name == e.name) {
        have.value = e.value;
        found = true;
      }
    }
    if (!found) m.env.push_back(e);
  }
  for (const std::string& name : a.env_remove) {
    bool store = false;
    if (auto s = claim("env:" + name, envValue(name), std::string(kRemoved), store); !s.ok())
      return s;
    if (!store) continue;
    std::erase_if(m.env, [&](const EnvVar& e) { return e.name == name; });
    if (std::find(m.env_remove.begin(), m.env_remove.end(), name) == m.env_remove.end())
      m.env_remove.push_back(name);
  }

  // Mounts and devices, keyed by their path in the container.
  auto keyed = [&](auto& list, const auto& items, const char* kind) -> absl::Status {
    for (const auto& item : items) {
      auto have = std::find_if(list.begin(), list.end(), [&](const auto& x) {
        return x.container_path == item.container_path;
      });
      bool store = false;
      const std::string old_value = have == list.end() ? std::string() : describe(*have);
      if (auto s = claim(cat(kind, ":", item.container_path), old_value, describe(item), store);
          !s.ok())
        return s;
      if (!store) continue;
      if (have != list.end()) {
        *have = item;
      } else {
        list.push_back(item);
      }
    }
    return absl::OkStatus();
  };
  if (auto s = keyed(m.mounts, a.mounts, "mount"); !s.ok()) return s;
  if (auto s = keyed(m.devices, a.devices, "device"); !s.ok()) return s;

  for (const std::string& name : a.cdi_devices) {
    bool store = false;
    (void)claim("cdi:" + name, name, name, store);  // naming a device twice is no conflict
    if (std::find(m.cdi_devices.begin(), m.cdi_devices.end(), name) == m.cdi_devices.end()) {
      m.cdi_devices.push_back(name);
    }
  }

  auto scalar = [&](const char* field, auto& have, const auto& want) -> absl::Status {
    if (!want) return absl::OkStatus();
    bool store = false;
    const std::string old_value = have ? cat(*have) : std::string();
    if (auto s = claim(field, old_value, cat(*want), store); !s.ok()) return s;
    if (store) have = want;
    return absl::OkStatus();
  };
  for (auto s :
       {scalar("cpuset_cpus", m.cpuset_cpus, a.cpuset_cpus),
        scalar("cpuset_mems", m.cpuset_mems, a.cpuset_mems),
        scalar("cpu_shares", m.cpu_shares, a.cpu_shares),
        scalar("cpu_quota", m.cpu_quota, a.cpu_quota),
        scalar("cpu_period", m.cpu_period, a.cpu_period),
        scalar("memory_limit_bytes", m.memory_limit_bytes, a.memory_limit_bytes),
        scalar("memory_swap_limit_bytes", m.memory_swap_limit_bytes, a.memory_swap_limit_bytes),
        scalar("oom_score_adj", m.oom_score_adj, a.oom_score_adj),
        scalar("cgroup_parent", m.cgroup_parent, a.cgroup_parent)}) {
    if (!s.ok()) return s;
  }

  // Keyed maps with removal: annotations and labels; plain keyed maps: hugepages, unified.
  auto mapped = [&](const char* kind, auto& have, const auto& want,
                    std::vector<std::string>* removed,
                    const std::vector<std::string>* remove) -> absl::Status {
    auto current = [&](const std::string& key) -> std::string {
      auto it = have.find(key);
      return it == have.end() ? std::string(kRemoved) : cat(it->second);
    };
    for (const auto& [key, value] : want) {
      bool store = false;
      if (auto s = claim(cat(kind, ":", key), current(key), cat(value), store); !s.ok()) return s;
      if (!store) continue;
      have[key] = value;
      if (removed) std::erase(*removed, key);
    }
    if (remove) {
      for (const std::string& key : *remove) {
        bool store = false;
        if (auto s = claim(cat(kind, ":", key), current(key), std::string(kRemoved), store);
            !s.ok())
          return s;
        if (!store) continue;
        have.erase(key);
        if (std::find(removed->begin(), removed->end(), key) == removed->end())
          removed->push_back(key);
      }
    }
    return absl::OkStatus();
  };
  if (auto s = mapped("hugepage", m.hugepage_limits, a.hugepage_limits, nullptr, nullptr); !s.ok())
    return s;
  if (auto s = mapped("unified", m.unified, a.unified, nullptr, nullptr); !s.ok()) return s;
  if (auto s = mapped("annotation", m.annotations, a.annotations, &m.annotations_remove,
                      &a.annotations_remove);
      !s.ok()) {
    return s;
  }
  if (auto s = mapped("label", m.labels, a.labels, &m.labels_remove, &a.labels_remove); !s.ok())
    return s;

  merged_ = std::move(m);
  owners_ = std::move(owners);
  return absl::OkStatus();
}

}  // namespace crihook
