#include "tools/crihookctl/explain.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>

#include "base/text.h"

namespace crihook::ctl {
namespace {

namespace v1 = ::runtime::v1;
namespace hv1 = ::crihook::hook::v1;

std::string joinKv(const google::protobuf::Map<std::string, std::string>& m) {
  std::map<std::string, std::string> sorted(m.begin(), m.end());
  std::string out;
  for (const auto& [k, v] : sorted) out += cat(out.empty() ? "" : ", ", k, "=", v);
  return out.empty() ? "-" : out;
}

std::string resources(const v1::LinuxContainerResources& r) {
  std::string out;
  auto add = [&](std::string_view name, const std::string& v) {
    out += cat(out.empty() ? "" : " ", name, "=", v);
  };
  if (!r.cpuset_cpus().empty()) add("cpuset_cpus", r.cpuset_cpus());
  if (!r.cpuset_mems().empty()) add("cpuset_mems", r.cpuset_mems());
  if (r.cpu_shares()) add("cpu_shares", cat(r.cpu_shares()));
  if (r.cpu_quota()) add("cpu_quota", cat(r.cpu_quota()));
  if (r.cpu_period()) add("cpu_period", cat(r.cpu_period()));
  if (r.memory_limit_in_bytes()) add("memory_limit_in_bytes", cat(r.memory_limit_in_bytes()));
  if (r.memory_swap_limit_in_bytes())
    add("memory_swap_limit_in_bytes", cat(r.memory_swap_limit_in_bytes()));
  if (r.oom_score_adj()) add("oom_score_adj", cat(r.oom_score_adj()));
  for (const auto& h : r.hugepage_limits()) add(cat("hugepages-", h.page_size()), cat(h.limit()));
  for (const auto& [k, v] : r.unified()) add(k, v);
  return out.empty() ? "-" : out;
}

void summary(const v1::ContainerConfig& c, std::ostream& out) {
  std::string env;
  for (const auto& e : c.envs()) env += cat(env.empty() ? "" : ", ", e.key(), "=", e.value());
  out << "  env:         " << (env.empty() ? "-" : env) << '\n';
  for (const auto& m : c.mounts()) {
    out << "  mount:       " << m.container_path() << " <- " << m.host_path()
        << (m.readonly() ? " (ro)" : " (rw)") << '\n';
  }
  for (const auto& d : c.devices()) {
    out << "  device:      " << d.container_path() << " <- " << d.host_path() << " "
        << d.permissions() << '\n';
  }
  for (const auto& d : c.cdi_devices()) out << "  cdi device:  " << d.name() << '\n';
  out << "  resources:   " << resources(c.linux().resources()) << '\n';
  out << "  annotations: " << joinKv(c.annotations()) << '\n';
  out << "  labels:      " << joinKv(c.labels()) << '\n';
}

std::string when(int64_t unix_millis) {
  std::time_t t = static_cast<std::time_t>(unix_millis / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// One line per change of a stage's merged adjustment, with its owner.
void changes(const hv1::StageDecision& d, std::ostream& out) {
  const auto& a = d.adjustment();
  auto line = [&](const std::string& what, const std::string& owner_key) {
    auto it = d.owners().find(owner_key);
    std::string text = cat("  ", what);
    text.resize(std::max<size_t>(text.size() + 2, 52), ' ');
    out << text << "by " << (it == d.owners().end() ? "?" : it->second) << '\n';
  };
  for (const auto& e : a.env()) line(cat("set env ", e.key(), "=", e.value()), "env:" + e.key());
  for (const auto& n : a.env_remove()) line(cat("unset env ", n), "env:" + n);
  for (const auto& m : a.mounts()) {
    line(cat("mount ", m.container_path(), " <- ", m.host_path(), m.readonly() ? " (ro)" : ""),
         "mount:" + m.container_path());
  }
  for (const auto& dev : a.devices()) {
    line(cat("device ", dev.container_path(), " <- ", dev.host_path(), " ", dev.permissions()),
         "device:" + dev.container_path());
  }
  for (const auto& c : a.cdi_devices()) line(cat("cdi device ", c), "cdi:" + c);
  if (a.has_cpuset_cpus()) line(cat("cpuset_cpus ", a.cpuset_cpus()), "cpuset_cpus");
  if (a.has_cpuset_mems()) line(cat("cpuset_mems ", a.cpuset_mems()), "cpuset_mems");
  if (a.has_cpu_shares()) line(cat("cpu_shares ", a.cpu_shares()), "cpu_shares");
  if (a.has_cpu_quota()) line(cat("cpu_quota ", a.cpu_quota()), "cpu_quota");
  if (a.has_cpu_period()) line(cat("cpu_period ", a.cpu_period()), "cpu_period");
  if (a.has_memory_limit_bytes())
    line(cat("memory_limit_bytes ", a.memory_limit_bytes()), "memory_limit_bytes");
  if (a.has_memory_swap_limit_bytes()) {
    line(cat("memory_swap_limit_bytes ", a.memory_swap_limit_bytes()), "memory_swap_limit_bytes");
  }
  if (a.has_oom_score_adj()) line(cat("oom_score_adj ", a.oom_score_adj()), "oom_score_adj");
  for (const auto& [k, v] : a.hugepage_limits())
    line(cat("hugepages ", k, " ", v), "hugepage:" + k);
  for (const auto& [k, v] : a.unified()) line(cat("unified ", k, "=", v), "unified:" + k);
  for (const auto& [k, v] : a.annotations()) line(cat("annotation ", k, "=", v), "annotation:" + k);
  for (const auto& k : a.annotations_remove())
    line(cat("remove annotation ", k), "annotation:" + k);
  for (const auto& [k, v] : a.labels()) line(cat("label ", k, "=", v), "label:" + k);
  for (const auto& k : a.labels_remove()) line(cat("remove label ", k), "label:" + k);
  if (a.has_cgroup_parent()) line(cat("cgroup_parent ", a.cgroup_parent()), "cgroup_parent");
}

}  // namespace

void explainContainer(const hv1::PodState& state, const std::string& id, std::ostream& out) {
  const hv1::ContainerRecord* c = nullptr;
  for (const auto& x : state.containers()) {
    if (x.id() == id) c = &x;
  }
  if (c == nullptr) return;
  const auto& pod = state.pod().config().metadata();
  out << "container " << c->id() << " (" << c->requested().metadata().name() << ")\n"
      << "pod       " << pod.namespace_() << "/" << pod.name() << " (sandbox " << c->sandbox_id()
      << ")\n\n";
  out << "kubelet sent:\n";
  summary(c->requested(), out);
  for (const auto& d : c->decisions()) {
    std::string hooks;
    for (const auto& h : d.hooks()) hooks += cat(hooks.empty() ? "" : ", ", h);
    out << "\n" << d.stage() << " at " << when(d.unix_millis()) << ", hooks run: " << hooks << '\n';
    std::ostringstream lines;
    changes(d, lines);
    out << (lines.str().empty() ? "  no changes\n" : lines.str());
  }
  if (c->decisions_size() == 0) out << "\nno hook ran on this container\n";
  out << "\nsent to the runtime:\n";
  if (c->has_sent()) {
    summary(c->sent(), out);
  } else {
    out << "  what kubelet sent, unchanged\n";
  }
  if (c->has_resources()) {
    v1::LinuxContainerResources kept;
    const auto& r = c->resources();
    if (r.has_cpuset_cpus()) kept.set_cpuset_cpus(r.cpuset_cpus());
    if (r.has_cpuset_mems()) kept.set_cpuset_mems(r.cpuset_mems());
    if (r.has_cpu_shares()) kept.set_cpu_shares(r.cpu_shares());
    if (r.has_cpu_quota()) kept.set_cpu_quota(r.cpu_quota());
    if (r.has_cpu_period()) kept.set_cpu_period(r.cpu_period());
    if (r.has_memory_limit_bytes()) kept.set_memory_limit_in_bytes(r.memory_limit_bytes());
    if (r.has_memory_swap_limit_bytes())
      kept.set_memory_swap_limit_in_bytes(r.memory_swap_limit_bytes());
    if (r.has_oom_score_adj()) kept.set_oom_score_adj(r.oom_score_adj());
    for (const auto& [k, v] : r.unified()) (*kept.mutable_unified())[k] = v;
    out << "\nkept through UpdateContainerResources: " << resources(kept) << '\n';
  }
}

}  // namespace crihook::ctl
