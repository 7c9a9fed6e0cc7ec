#include "nri/translate.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "base/quote.h"
#include "base/text.h"

namespace crihook::nri {

namespace v1 = ::runtime::v1;

namespace {

// "NAME=value" (NRI's env) into CRI's key and value; a string without "="
// is a name with an empty value, as the OCI runtime reads it.
void addEnv(v1::ContainerConfig& config, const std::string& entry) {
  const size_t eq = entry.find('=');
  auto* kv = config.add_envs();
  kv->set_key(entry.substr(0, eq));
  kv->set_value(eq == std::string::npos ? std::string() : entry.substr(eq + 1));
}

bool hasOption(const api::Mount& m, std::string_view option) {
  return std::find(m.options().begin(), m.options().end(), option) != m.options().end();
}

v1::Mount mountOf(const api::Mount& m) {
  v1::Mount out;
  out.set_container_path(m.destination());
  out.set_host_path(m.source());
  out.set_readonly(hasOption(m, "ro"));
  if (hasOption(m, "rshared") || hasOption(m, "shared")) {
    out.set_propagation(v1::PROPAGATION_BIDIRECTIONAL);
  } else if (hasOption(m, "rslave") || hasOption(m, "slave")) {
    out.set_propagation(v1::PROPAGATION_HOST_TO_CONTAINER);
  }
  return out;
}

// The bind mount NRI makes of a CRI mount.
api::Mount nriMountOf(const v1::Mount& m) {
  api::Mount out;
  out.set_destination(m.container_path());
  out.set_type("bind");
  out.set_source(m.host_path());
  out.add_options("rbind");
  out.add_options(m.readonly() ? "ro" : "rw");
  switch (m.propagation()) {
    case v1::PROPAGATION_BIDIRECTIONAL:
      out.add_options("rshared");
      break;
    case v1::PROPAGATION_HOST_TO_CONTAINER:
      out.add_options("rslave");
      break;
    default:
      out.add_options("rprivate");
      break;
  }
  return out;
}

std::map<std::string, std::string> envMap(const v1::ContainerConfig& c) {
  std::map<std::string, std::string> env;
  for (const auto& kv : c.envs()) env[kv.key()] = kv.value();
  return env;
}

bool sameMount(const v1::Mount& a, const v1::Mount& b) {
  return a.host_path() == b.host_path() && a.readonly() == b.readonly() &&
         a.propagation() == b.propagation();
}

bool sameDevice(const v1::Device& a, const v1::Device& b) {
  return a.host_path() == b.host_path() && a.permissions() == b.permissions();
}

template <class Map>
bool sameMap(const Map& a, const Map& b) {
  return a.size() == b.size() && std::all_of(a.begin(), a.end(), [&](const auto& kv) {
           auto it = b.find(kv.first);
           return it != b.end() && it->second == kv.second;
         });
}

// Hugepage limits and cgroup v2 keys, whose messages have the same fields
// in CRI and NRI.
template <class From, class To>
void copyHugepagesAndUnified(const From& from, To& to) {
  for (const auto& h : from.hugepage_limits()) {
    auto* l = to.add_hugepage_limits();
    l->set_page_size(h.page_size());
    l->set_limit(h.limit());
  }
  for (const auto& [k, v] : from.unified()) (*to.mutable_unified())[k] = v;
}

// Env: NRI sets a name in place or appends it, in the order given, and
// removes "-NAME"; the hooks' order of new names is the request's. A name
// the container already has is removed before it is set: NRI refuses a
// second plugin's value for a name an earlier plugin set (koordlet's own
// plugin sets NVIDIA_VISIBLE_DEVICES) unless the later one removes it
// first, and the value the hooks decided is meant to stand.
void adjustEnv(const v1::ContainerConfig& b, const v1::ContainerConfig& a,
               api::ContainerAdjustment& adj) {
  const auto env_before = envMap(b);
  const auto env_after = envMap(a);
  for (const auto& kv : a.envs()) {
    auto it = env_before.find(kv.key());
    if (it != env_before.end() && it->second == kv.value()) continue;
    if (it != env_before.end()) adj.add_env()->set_key("-" + kv.key());
    auto* e = adj.add_env();
    e->set_key(kv.key());
    e->set_value(kv.value());
  }
  for (const auto& [name, value] : env_before) {
    if (!env_after.count(name)) adj.add_env()->set_key("-" + name);
  }
}

// Annotations set (new or changed) and removed ("-KEY").
void adjustAnnotations(const v1::ContainerConfig& b, const v1::ContainerConfig& a,
                       api::ContainerAdjustment& adj) {
  for (const auto& [k, v] : a.annotations()) {
    auto it = b.annotations().find(k);
    if (it == b.annotations().end() || it->second != v) (*adj.mutable_annotations())[k] = v;
  }
  for (const auto& [k, v] : b.annotations()) {
    if (!a.annotations().count(k)) (*adj.mutable_annotations())["-" + k] = "";
  }
}

// Mounts added or replaced, by container path, as bind mounts; removed ones
// as "-/path".
void adjustMounts(const v1::ContainerConfig& b, const v1::ContainerConfig& a,
                  api::ContainerAdjustment& adj) {
  std::map<std::string, const v1::Mount*> mounts_before;
  for (const auto& m : b.mounts()) mounts_before[m.container_path()] = &m;
  std::set<std::string> mounts_after;
  for (const auto& m : a.mounts()) {
    mounts_after.insert(m.container_path());
    auto it = mounts_before.find(m.container_path());
    if (it != mounts_before.end() && sameMount(*it->second, m)) continue;
    *adj.add_mounts() = nriMountOf(m);
  }
  for (const auto& [path, m] : mounts_before) {
    if (!mounts_after.count(path)) adj.add_mounts()->set_destination("-" + path);
  }
}

// The device node NRI creates for `d`, its type and numbers from `lookup`;
// permissions NRI cannot narrow are noted in `answer`.
absl::Status addDevice(const v1::Device& d, const DeviceLookup& lookup, ContainerAnswer& answer) {
  auto node = lookup(d.host_path());
  if (!node.ok()) {
    return absl::Status(node.status().code(),
                        cat("device ", quote(d.container_path()), ": ", node.status().message()));
  }
  auto* dev = answer.adjust.mutable_linux()->add_devices();
  dev->set_path(d.container_path());
  dev->set_type(std::string(1, node->type));
  dev->set_major(node->major);
  dev->set_minor(node->minor);
  dev->mutable_file_mode()->set_value(node->file_mode);
  // NRI allows "rw" (and "m" for a block device) whatever is asked.
  const std::string wanted = d.permissions().empty() ? "rwm" : d.permissions();
  if (wanted.find('r') == std::string::npos || wanted.find('w') == std::string::npos) {
    answer.not_applied.push_back(cat("device ", quote(d.container_path()), ": permissions \"",
                                     wanted, "\": NRI 0.6.1 allows rw"));
  }
  return absl::OkStatus();
}

// Devices added or replaced, by container path; removed ones as "-/path".
// The first device `lookup` cannot resolve is the error.
absl::Status adjustDevices(const v1::ContainerConfig& b, const v1::ContainerConfig& a,
                           const DeviceLookup& lookup, ContainerAnswer& answer) {
  std::map<std::string, const v1::Device*> devices_before;
  for (const auto& d : b.devices()) devices_before[d.container_path()] = &d;
  std::set<std::string> devices_after;
  for (const auto& d : a.devices()) {
    devices_after.insert(d.container_path());
    auto it = devices_before.find(d.container_path());
    if (it != devices_before.end() && sameDevice(*it->second, d)) continue;
    if (absl::Status st = addDevice(d, lookup, answer); !st.ok()) return st;
  }
  for (const auto& [path, d] : devices_before) {
    if (!devices_after.count(path))
      answer.adjust.mutable_linux()->add_devices()->set_path("-" + path);
  }
  return absl::OkStatus();
}

// The CPU and memory fields NRI applies at creation that changed from `rb`
// to `ra`, set in `res`; whether any did.
bool adjustCpuAndMemory(const v1::LinuxContainerResources& rb,
                        const v1::LinuxContainerResources& ra, api::LinuxResources& res) {
  bool changed = false;
  if (ra.cpuset_cpus() != rb.cpuset_cpus()) {
    res.mutable_cpu()->set_cpus(ra.cpuset_cpus());
    changed = true;
  }
  if (ra.cpuset_mems() != rb.cpuset_mems()) {
    res.mutable_cpu()->set_mems(ra.cpuset_mems());
    changed = true;
  }
  if (ra.cpu_shares() != rb.cpu_shares()) {
    res.mutable_cpu()->mutable_shares()->set_value(static_cast<uint64_t>(ra.cpu_shares()));
    changed = true;
  }
  if (ra.cpu_quota() != rb.cpu_quota()) {
    res.mutable_cpu()->mutable_quota()->set_value(ra.cpu_quota());
    changed = true;
  }
  if (ra.cpu_period() != rb.cpu_period()) {
    res.mutable_cpu()->mutable_period()->set_value(static_cast<uint64_t>(ra.cpu_period()));
    changed = true;
  }
  if (ra.memory_limit_in_bytes() != rb.memory_limit_in_bytes()) {
    res.mutable_memory()->mutable_limit()->set_value(ra.memory_limit_in_bytes());
    changed = true;
  }
  return changed;
}

// The hugepage limits and cgroup v2 keys that changed from `rb` to `ra`, set
// in `res`; whether any did.
bool adjustHugepagesAndUnified(const v1::LinuxContainerResources& rb,
                               const v1::LinuxContainerResources& ra, api::LinuxResources& res) {
  bool changed = false;
  std::map<std::string, uint64_t> huge_before;
  for (const auto& h : rb.hugepage_limits()) huge_before[h.page_size()] = h.limit();
  for (const auto& h : ra.hugepage_limits()) {
    auto it = huge_before.find(h.page_size());
    if (it != huge_before.end() && it->second == h.limit()) continue;
    auto* l = res.add_hugepage_limits();
    l->set_page_size(h.page_size());
    l->set_limit(h.limit());
    changed = true;
  }
  for (const auto& [k, v] : ra.unified()) {
    auto it = rb.unified().find(k);
    if (it != rb.unified().end() && it->second == v) continue;
    (*res.mutable_unified())[k] = v;
    changed = true;
  }
  return changed;
}

// The Linux resources NRI applies at creation, when any changed; those it
// cannot are noted.
void adjustResources(const v1::LinuxContainerResources& rb, const v1::LinuxContainerResources& ra,
                     ContainerAnswer& answer) {
  api::LinuxResources res;
  bool changed = adjustCpuAndMemory(rb, ra, res);
  if (ra.memory_swap_limit_in_bytes() != rb.memory_swap_limit_in_bytes())
    answer.not_applied.push_back(
        "memory swap limit: NRI 0.6.1 sets swap to the memory limit at creation");
  if (ra.oom_score_adj() != rb.oom_score_adj())
    answer.not_applied.push_back("oom_score_adj: NRI 0.6.1 cannot change it (0.7.0 can)");
  changed = adjustHugepagesAndUnified(rb, ra, res) || changed;
  if (changed) *answer.adjust.mutable_linux()->mutable_resources() = std::move(res);
}

}  // namespace

v1::LinuxContainerResources resourcesOf(const api::LinuxResources& r) {
  v1::LinuxContainerResources out;
  if (r.has_cpu()) {
    const api::LinuxCPU& cpu = r.cpu();
    if (cpu.has_shares()) out.set_cpu_shares(static_cast<int64_t>(cpu.shares().value()));
    if (cpu.has_quota()) out.set_cpu_quota(cpu.quota().value());
    if (cpu.has_period()) out.set_cpu_period(static_cast<int64_t>(cpu.period().value()));
    out.set_cpuset_cpus(cpu.cpus());
    out.set_cpuset_mems(cpu.mems());
  }
  if (r.has_memory()) {
    if (r.memory().has_limit()) out.set_memory_limit_in_bytes(r.memory().limit().value());
    if (r.memory().has_swap()) out.set_memory_swap_limit_in_bytes(r.memory().swap().value());
  }
  copyHugepagesAndUnified(r, out);
  return out;
}

api::LinuxResources nriResourcesOf(const v1::LinuxContainerResources& r) {
  api::LinuxResources out;
  auto& cpu = *out.mutable_cpu();
  if (r.cpu_shares() != 0) cpu.mutable_shares()->set_value(static_cast<uint64_t>(r.cpu_shares()));
  if (r.cpu_quota() != 0) cpu.mutable_quota()->set_value(r.cpu_quota());
  if (r.cpu_period() != 0) cpu.mutable_period()->set_value(static_cast<uint64_t>(r.cpu_period()));
  cpu.set_cpus(r.cpuset_cpus());
  cpu.set_mems(r.cpuset_mems());
  if (r.memory_limit_in_bytes() != 0)
    out.mutable_memory()->mutable_limit()->set_value(r.memory_limit_in_bytes());
  if (r.memory_swap_limit_in_bytes() != 0)
    out.mutable_memory()->mutable_swap()->set_value(r.memory_swap_limit_in_bytes());
  copyHugepagesAndUnified(r, out);
  return out;
}

v1::RunPodSandboxRequest runPodSandboxRequestOf(const api::PodSandbox& pod) {
  v1::RunPodSandboxRequest req;
  v1::PodSandboxConfig& c = *req.mutable_config();
  c.mutable_metadata()->set_name(pod.name());
  c.mutable_metadata()->set_uid(pod.uid());
  c.mutable_metadata()->set_namespace_(pod.namespace_());
  for (const auto& [k, v] : pod.labels()) (*c.mutable_labels())[k] = v;
  for (const auto& [k, v] : pod.annotations()) (*c.mutable_annotations())[k] = v;
  req.set_runtime_handler(pod.runtime_handler());
  if (pod.has_linux()) {
    auto& linux = *c.mutable_linux();
    linux.set_cgroup_parent(pod.linux().cgroup_parent());
    if (pod.linux().has_pod_overhead())
      *linux.mutable_overhead() = resourcesOf(pod.linux().pod_overhead());
    if (pod.linux().has_pod_resources())
      *linux.mutable_resources() = resourcesOf(pod.linux().pod_resources());
  }
  return req;
}

v1::CreateContainerRequest createContainerRequestOf(const api::PodSandbox& pod,
                                                    const api::Container& container) {
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(pod.id());
  *req.mutable_sandbox_config() = runPodSandboxRequestOf(pod).config();
  v1::ContainerConfig& c = *req.mutable_config();
  c.mutable_metadata()->set_name(container.name());
  for (const auto& a : container.args()) c.add_command(a);
  for (const auto& e : container.env()) addEnv(c, e);
  for (const auto& m : container.mounts()) *c.add_mounts() = mountOf(m);
  for (const auto& [k, v] : container.labels()) (*c.mutable_labels())[k] = v;
  for (const auto& [k, v] : container.annotations()) (*c.mutable_annotations())[k] = v;
  if (container.has_linux()) {
    for (const auto& d : container.linux().devices()) {
      auto* dev = c.add_devices();
      dev->set_container_path(d.path());
      dev->set_host_path(d.path());
      dev->set_permissions("rwm");
    }
    if (container.linux().has_resources())
      *c.mutable_linux()->mutable_resources() = resourcesOf(container.linux().resources());
  }
  return req;
}

absl::StatusOr<DeviceNode> statDevice(const std::string& host_path) {
  if (host_path.empty() || host_path[0] != '/')
    return absl::InvalidArgumentError(cat("device ", quote(host_path), ": not an absolute path"));
  struct stat st {};
  if (::stat(host_path.c_str(), &st) != 0)
    return absl::NotFoundError(cat("device ", quote(host_path), ": ", std::strerror(errno)));
  DeviceNode node;
  if (S_ISCHR(st.st_mode)) {
    node.type = 'c';
  } else if (S_ISBLK(st.st_mode)) {
    node.type = 'b';
  } else {
    return absl::InvalidArgumentError(
        cat("device ", quote(host_path), ": not a character or block device"));
  }
  node.major = major(st.st_rdev);
  node.minor = minor(st.st_rdev);
  node.file_mode = st.st_mode & 07777;
  return node;
}

absl::StatusOr<ContainerAnswer> adjustmentOf(const v1::CreateContainerRequest& before,
                                             const v1::CreateContainerRequest& after,
                                             const DeviceLookup& lookup) {
  ContainerAnswer answer;
  api::ContainerAdjustment& adj = answer.adjust;
  const v1::ContainerConfig& b = before.config();
  const v1::ContainerConfig& a = after.config();
  adjustEnv(b, a, adj);
  adjustAnnotations(b, a, adj);
  if (!sameMap(a.labels(), b.labels()))
    answer.not_applied.push_back("labels: NRI cannot change a container's labels");
  adjustMounts(b, a, adj);
  if (absl::Status st = adjustDevices(b, a, lookup, answer); !st.ok()) return st;
  if (a.cdi_devices_size() != b.cdi_devices_size())
    answer.not_applied.push_back("CDI devices: NRI 0.6.1 has none (0.7.0 does)");
  adjustResources(b.linux().resources(), a.linux().resources(), answer);
  if (a.linux().security_context().supplemental_groups_size() !=
      b.linux().security_context().supplemental_groups_size()) {
    answer.not_applied.push_back("supplemental groups: NRI 0.6.1 cannot change them");
  }
  if (after.sandbox_config().linux().cgroup_parent() !=
      before.sandbox_config().linux().cgroup_parent())
    answer.not_applied.push_back("cgroup parent: NRI 0.6.1 cannot move a pod");
  return answer;
}

}  // namespace crihook::nri
