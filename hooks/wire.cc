#include "hooks/wire.h"

#include <chrono>
#include <cstdint>

#include "base/quote.h"
#include "base/text.h"

namespace crihook {
namespace {

// A hook's reply is bounded in bytes by gRPC (or the module's reply cap);
// each list or map of its adjustment at most this long, far above any
// container's env or mounts, is checked before anything is copied.
constexpr size_t kMaxAdjustmentEntries = 4096;

namespace v1 = ::runtime::v1;
namespace hv1 = ::crihook::hook::v1;
using Clock = std::chrono::steady_clock;

bool absolute(const std::string& p) { return !p.empty() && p[0] == '/'; }

std::string badEnvName(const std::string& name) {
  if (name.empty()) return "expected a variable name, got \"\"";
  if (name.find('=') != std::string::npos || name.find('\0') != std::string::npos)
    return cat("a variable name cannot hold '=' or NUL, got ", quote(name));
  return "";
}

// "0-3,8,10-11"
std::string badCpuList(const std::string& list) {
  if (list.empty()) return "expected a CPU or node list such as \"0-3,8\", got \"\"";
  size_t i = 0;
  while (i < list.size()) {
    auto number = [&](long& out) {
      size_t start = i;
      out = 0;
      while (i < list.size() && list[i] >= '0' && list[i] <= '9' && i - start < 6)
        out = out * 10 + (list[i++] - '0');
      return i > start;
    };
    long lo = 0, hi = 0;
    if (!number(lo)) break;
    hi = lo;
    if (i < list.size() && list[i] == '-') {
      ++i;
      if (!number(hi) || hi < lo) break;
    }
    if (i == list.size()) return "";
    if (list[i] != ',') break;
    ++i;
  }
  return cat("expected a CPU or node list such as \"0-3,8\", got ", quote(list));
}

// "vendor.com/class=name"
std::string badCdiName(const std::string& name) {
  auto slash = name.find('/');
  auto eq = name.find('=');
  if (slash == std::string::npos || slash == 0 || eq == std::string::npos || eq < slash + 2 ||
      eq + 1 == name.size())
    return cat("expected a fully qualified CDI device name vendor.com/class=name, got ",
               quote(name));
  return "";
}

std::string badPermissions(const std::string& p) {
  bool r = false, w = false, m = false;
  for (char c : p) {
    bool* seen = c == 'r' ? &r : c == 'w' ? &w : c == 'm' ? &m : nullptr;
    if (seen == nullptr || *seen)
      return cat("expected device cgroup letters from \"rwm\", each once, got ", quote(p));
    *seen = true;
  }
  return "";
}

}  // namespace

hv1::Adjustment toWire(const Adjustment& a) {
  hv1::Adjustment w;
  for (const EnvVar& e : a.env) {
    auto* kv = w.add_env();
    kv->set_key(e.name);
    kv->set_value(e.value);
  }
  for (const auto& n : a.env_remove) w.add_env_remove(n);
  for (const MountSpec& m : a.mounts) {
    auto* x = w.add_mounts();
    x->set_container_path(m.container_path);
    x->set_host_path(m.host_path);
    x->set_readonly(m.readonly);
    x->set_propagation(static_cast<v1::MountPropagation>(m.propagation));
  }
  for (const DeviceSpec& d : a.devices) {
    auto* x = w.add_devices();
    x->set_container_path(d.container_path);
    x->set_host_path(d.host_path);
    x->set_permissions(d.permissions);
  }
  for (const auto& c : a.cdi_devices) w.add_cdi_devices(c);
  if (a.cpuset_cpus) w.set_cpuset_cpus(*a.cpuset_cpus);
  if (a.cpuset_mems) w.set_cpuset_mems(*a.cpuset_mems);
  if (a.cpu_shares) w.set_cpu_shares(*a.cpu_shares);
  if (a.cpu_quota) w.set_cpu_quota(*a.cpu_quota);
  if (a.cpu_period) w.set_cpu_period(*a.cpu_period);
  if (a.memory_limit_bytes) w.set_memory_limit_bytes(*a.memory_limit_bytes);
  if (a.memory_swap_limit_bytes) w.set_memory_swap_limit_bytes(*a.memory_swap_limit_bytes);
  if (a.oom_score_adj) w.set_oom_score_adj(*a.oom_score_adj);
  for (const auto& [k, v] : a.hugepage_limits) (*w.mutable_hugepage_limits())[k] = v;
  for (const auto& [k, v] : a.unified) (*w.mutable_unified())[k] = v;
  for (const auto& [k, v] : a.annotations) (*w.mutable_annotations())[k] = v;
  for (const auto& k : a.annotations_remove) w.add_annotations_remove(k);
  for (const auto& [k, v] : a.labels) (*w.mutable_labels())[k] = v;
  for (const auto& k : a.labels_remove) w.add_labels_remove(k);
  if (a.cgroup_parent) w.set_cgroup_parent(*a.cgroup_parent);
  return w;
}

absl::StatusOr<Adjustment> fromWire(const hv1::Adjustment& w, std::string_view where) {
  auto bad = [&](std::string_view field, std::string_view why) {
    return absl::InvalidArgumentError(cat(where, ": adjustment.", field, ": ", why));
  };
  // A hook's reply is bounded in bytes by gRPC (or the module's reply cap);
  // its lists are bounded here, before anything is copied or merged.
  using Count = std::pair<const char*, int>;
  for (const Count& c :
       {Count{"env", w.env_size()}, Count{"env_remove", w.env_remove_size()},
        Count{"mounts", w.mounts_size()}, Count{"devices", w.devices_size()},
        Count{"cdi_devices", w.cdi_devices_size()},
        Count{"hugepage_limits", w.hugepage_limits_size()}, Count{"unified", w.unified_size()},
        Count{"annotations", w.annotations_size()},
        Count{"annotations_remove", w.annotations_remove_size()}, Count{"labels", w.labels_size()},
        Count{"labels_remove", w.labels_remove_size()}}) {
    if (static_cast<size_t>(c.second) > kMaxAdjustmentEntries)
      return bad(c.first, cat(c.second, " entries, more than ", kMaxAdjustmentEntries));
  }
  Adjustment a;
  for (int i = 0; i < w.env_size(); ++i) {
    if (auto why = badEnvName(w.env(i).key()); !why.empty())
      return bad(cat("env[", i, "].key"), why);
    a.env.push_back({w.env(i).key(), w.env(i).value()});
  }
  for (int i = 0; i < w.env_remove_size(); ++i) {
    if (auto why = badEnvName(w.env_remove(i)); !why.empty())
      return bad(cat("env_remove[", i, "]"), why);
    a.env_remove.push_back(w.env_remove(i));
  }
  // Mounts and devices: both paths absolute.
  auto checkPaths = [&](const char* list, int i, const auto& x) -> absl::Status {
    for (auto [name, path] : {std::pair{"container_path", &x.container_path()},
                              std::pair{"host_path", &x.host_path()}}) {
      if (!absolute(*path))
        return bad(cat(list, "[", i, "].", name),
                   cat("expected an absolute path, got ", quote(*path)));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < w.mounts_size(); ++i) {
    const auto& m = w.mounts(i);
    if (auto s = checkPaths("mounts", i, m); !s.ok()) return s;
    a.mounts.push_back({m.container_path(), m.host_path(), m.readonly(), m.propagation()});
  }
  for (int i = 0; i < w.devices_size(); ++i) {
    const auto& d = w.devices(i);
    if (auto s = checkPaths("devices", i, d); !s.ok()) return s;
    if (auto why = badPermissions(d.permissions()); !why.empty())
      return bad(cat("devices[", i, "].permissions"), why);
    a.devices.push_back({d.container_path(), d.host_path(),
                         d.permissions().empty() ? std::string("rw") : d.permissions()});
  }
  for (int i = 0; i < w.cdi_devices_size(); ++i) {
    if (auto why = badCdiName(w.cdi_devices(i)); !why.empty())
      return bad(cat("cdi_devices[", i, "]"), why);
    a.cdi_devices.push_back(w.cdi_devices(i));
  }
  if (w.has_cpuset_cpus()) {
    if (auto why = badCpuList(w.cpuset_cpus()); !why.empty()) return bad("cpuset_cpus", why);
    a.cpuset_cpus = w.cpuset_cpus();
  }
  if (w.has_cpuset_mems()) {
    if (auto why = badCpuList(w.cpuset_mems()); !why.empty()) return bad("cpuset_mems", why);
    a.cpuset_mems = w.cpuset_mems();
  }
  struct Limit {
    const char* name;
    bool has;
    int64_t value, min;
    std::optional<int64_t>* out;
    int64_t max = INT64_MAX;
  };
  for (const Limit& l : {Limit{"cpu_shares", w.has_cpu_shares(), w.cpu_shares(), 0, &a.cpu_shares},
                         Limit{"cpu_quota", w.has_cpu_quota(), w.cpu_quota(), -1, &a.cpu_quota},
                         Limit{"cpu_period", w.has_cpu_period(), w.cpu_period(), 0, &a.cpu_period},
                         Limit{"memory_limit_bytes", w.has_memory_limit_bytes(),
                               w.memory_limit_bytes(), 0, &a.memory_limit_bytes},
                         Limit{"memory_swap_limit_bytes", w.has_memory_swap_limit_bytes(),
                               w.memory_swap_limit_bytes(), 0, &a.memory_swap_limit_bytes},
                         // The kernel's range for /proc/<pid>/oom_score_adj.
                         Limit{"oom_score_adj", w.has_oom_score_adj(), w.oom_score_adj(), -1000,
                               &a.oom_score_adj, 1000}}) {
    if (!l.has) continue;
    if (l.value < l.min || l.value > l.max) {
      return bad(l.name, l.max == INT64_MAX
                             ? cat("expected at least ", l.min, ", got ", l.value)
                             : cat("expected ", l.min, " to ", l.max, ", got ", l.value));
    }
    *l.out = l.value;
  }
  for (const auto& [k, v] : w.hugepage_limits()) {
    if (k.empty()) return bad("hugepage_limits", "expected a page size such as \"2MB\", got \"\"");
    a.hugepage_limits[k] = v;
  }
  for (const auto& [k, v] : w.unified()) {
    if (k.empty() || k.find('/') != std::string::npos)
      return bad("unified",
                 cat("expected a cgroup file name such as \"memory.high\", got ", quote(k)));
    a.unified[k] = v;
  }
  for (const auto& [k, v] : w.annotations()) {
    if (k.empty()) return bad("annotations", "expected a key, got \"\"");
    a.annotations[k] = v;
  }
  a.annotations_remove.assign(w.annotations_remove().begin(), w.annotations_remove().end());
  for (const auto& [k, v] : w.labels()) {
    if (k.empty()) return bad("labels", "expected a key, got \"\"");
    a.labels[k] = v;
  }
  a.labels_remove.assign(w.labels_remove().begin(), w.labels_remove().end());
  if (w.has_cgroup_parent()) a.cgroup_parent = w.cgroup_parent();
  return a;
}

hv1::StageDecision stageDecision(const std::string& stage, const std::vector<std::string>& ran,
                                 const MergedAdjustment& merged) {
  hv1::StageDecision d;
  d.set_stage(stage);
  for (const auto& h : ran) d.add_hooks(h);
  *d.mutable_adjustment() = toWire(merged.result());
  for (const auto& [field, owner] : merged.owners()) (*d.mutable_owners())[field] = owner;
  d.set_unix_millis(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count());
  return d;
}

hv1::HookRequest hookRequest(const HookInput& in) {
  hv1::HookRequest r;
  r.set_stage(stageName(in.method, in.phase));
  r.set_api(std::string(apiName(in.api)));
  if (in.pod) *r.mutable_pod() = *in.pod;
  if (in.container) *r.mutable_container() = *in.container;
  if (in.method == LifecycleMethod::kUpdateContainerResources && in.request) {
    const auto& req = static_cast<const v1::UpdateContainerResourcesRequest&>(*in.request);
    if (req.has_linux()) *r.mutable_resources() = req.linux();
  }
  if (in.phase == Phase::kPost) {
    r.set_runtime_code(static_cast<int>(in.backend_status.code()));
    r.set_runtime_message(std::string(in.backend_status.message()));
  }
  if (in.deadline != Clock::time_point::max()) {
    r.set_timeout_millis(std::max<int64_t>(
        0,
        std::chrono::duration_cast<std::chrono::milliseconds>(in.deadline - Clock::now()).count()));
  }
  return r;
}

HookDecision hookDecision(const hv1::HookResponse& reply, Phase phase, const std::string& hook) {
  if (reply.decision() == hv1::HookResponse::REJECT) {
    int code = reply.reject_code();
    if (code <= 0 || code > 16) code = static_cast<int>(absl::StatusCode::kFailedPrecondition);
    // The hook's own words, cut to what a status message may hold.
    return HookDecision::reject(absl::Status(static_cast<absl::StatusCode>(code),
                                             reply.reject_message().empty()
                                                 ? "no reason given"
                                                 : boundedMessage(reply.reject_message())));
  }
  if (reply.decision() != hv1::HookResponse::CONTINUE) {
    return HookDecision::error(absl::InvalidArgumentError(
        cat("reply of hook ", hook, ": decision: unknown value ", reply.decision())));
  }
  if (phase == Phase::kPost || !reply.has_adjustment()) return HookDecision::proceed();
  auto a = fromWire(reply.adjustment(), cat("reply of hook ", hook));
  if (!a.ok()) return HookDecision::error(a.status());
  return HookDecision::proceed(std::move(*a));
}

const std::vector<StageId>& allStages() {
  static const std::vector<StageId> stages = [] {
    std::vector<StageId> s;
    for (auto m : {LifecycleMethod::kRunPodSandbox, LifecycleMethod::kStopPodSandbox,
                   LifecycleMethod::kRemovePodSandbox, LifecycleMethod::kCreateContainer,
                   LifecycleMethod::kStartContainer, LifecycleMethod::kStopContainer,
                   LifecycleMethod::kRemoveContainer, LifecycleMethod::kUpdateContainerResources}) {
      s.push_back({m, Phase::kPre});
      s.push_back({m, Phase::kPost});
    }
    return s;
  }();
  return stages;
}

uint32_t stageMask(const std::vector<StageId>& stages) {
  uint32_t mask = 0;
  for (const StageId& s : stages) mask |= stageBit(s.method, s.phase);
  return mask;
}

absl::StatusOr<StageId> parseStage(std::string_view name) {
  std::string valid;
  for (const StageId& s : allStages()) {
    std::string n = stageName(s.method, s.phase);
    if (n == name) return s;
    valid += valid.empty() ? n : ", " + n;
  }
  return absl::InvalidArgumentError(cat("unknown stage \"", name, "\"; expected one of ", valid));
}

}  // namespace crihook
