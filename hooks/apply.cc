#include "hooks/apply.h"

#include <algorithm>

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;

void applyMap(const std::map<std::string, std::string>& set, const std::vector<std::string>& remove,
              google::protobuf::Map<std::string, std::string>& target) {
  for (const auto& [k, v] : set) target[k] = v;
  for (const std::string& k : remove) target.erase(k);
}

void applyEnv(const Adjustment& a, google::protobuf::RepeatedPtrField<v1::KeyValue>& envs) {
  for (const EnvVar& e : a.env) {
    bool found = false;
    for (v1::KeyValue& kv : envs) {
      if (kv.key() == e.name) {
        kv.set_value(e.value);
        found = true;
      }
    }
    if (!found) {
      v1::KeyValue* kv = envs.Add();
      kv->set_key(e.name);
      kv->set_value(e.value);
    }
  }
  for (const std::string& name : a.env_remove) {
    auto gone = std::remove_if(envs.begin(), envs.end(),
                               [&](const v1::KeyValue& kv) { return kv.key() == name; });
    envs.erase(gone, envs.end());
  }
}

// The entry at `path` in the container (mounts and devices are keyed by it),
// added at the end when there is none.
template <typename T>
T& upsertByContainerPath(google::protobuf::RepeatedPtrField<T>& list, const std::string& path) {
  for (T& x : list) {
    if (x.container_path() == path) return x;
  }
  T* added = list.Add();
  added->set_container_path(path);
  return *added;
}

}  // namespace

void applyToResources(const Adjustment& a, v1::LinuxContainerResources& r) {
  if (a.cpuset_cpus) r.set_cpuset_cpus(*a.cpuset_cpus);
  if (a.cpuset_mems) r.set_cpuset_mems(*a.cpuset_mems);
  if (a.cpu_shares) r.set_cpu_shares(*a.cpu_shares);
  if (a.cpu_quota) r.set_cpu_quota(*a.cpu_quota);
  if (a.cpu_period) r.set_cpu_period(*a.cpu_period);
  if (a.memory_limit_bytes) r.set_memory_limit_in_bytes(*a.memory_limit_bytes);
  if (a.memory_swap_limit_bytes) r.set_memory_swap_limit_in_bytes(*a.memory_swap_limit_bytes);
  if (a.oom_score_adj) r.set_oom_score_adj(*a.oom_score_adj);
  for (const auto& [size, limit] : a.hugepage_limits) {
    auto have =
        std::find_if(r.mutable_hugepage_limits()->begin(), r.mutable_hugepage_limits()->end(),
                     // (a copy: clang before 16 cannot capture a structured binding)
                     [page = size](const v1::HugepageLimit& h) { return h.page_size() == page; });
    v1::HugepageLimit* h =
        have != r.mutable_hugepage_limits()->end() ? &*have : r.add_hugepage_limits();
    h->set_page_size(size);
    h->set_limit(limit);
  }
  for (const auto& [k, v] : a.unified) (*r.mutable_unified())[k] = v;
}

void applyToContainer(const Adjustment& a, v1::ContainerConfig& c) {
  applyEnv(a, *c.mutable_envs());
  for (const MountSpec& m : a.mounts) {
    v1::Mount& out = upsertByContainerPath(*c.mutable_mounts(), m.container_path);
    out.set_host_path(m.host_path);
    out.set_readonly(m.readonly);
    out.set_propagation(static_cast<v1::MountPropagation>(m.propagation));
  }
  for (const DeviceSpec& d : a.devices) {
    v1::Device& out = upsertByContainerPath(*c.mutable_devices(), d.container_path);
    out.set_host_path(d.host_path);
    out.set_permissions(d.permissions);
  }
  for (const std::string& name : a.cdi_devices) {
    const auto& have = c.cdi_devices();
    if (std::none_of(have.begin(), have.end(),
                     [&](const v1::CDIDevice& x) { return x.name() == name; })) {
      c.add_cdi_devices()->set_name(name);
    }
  }
  applyToResources(a, *c.mutable_linux()->mutable_resources());
  applyMap(a.annotations, a.annotations_remove, *c.mutable_annotations());
  applyMap(a.labels, a.labels_remove, *c.mutable_labels());
}

void applyToSandbox(const Adjustment& a, v1::PodSandboxConfig& c) {
  applyMap(a.annotations, a.annotations_remove, *c.mutable_annotations());
  applyMap(a.labels, a.labels_remove, *c.mutable_labels());
  if (a.cgroup_parent) c.mutable_linux()->set_cgroup_parent(*a.cgroup_parent);
  if (Adjustment r = resourcesOnly(a); !r.empty())
    applyToResources(r, *c.mutable_linux()->mutable_resources());
}

}  // namespace crihook
