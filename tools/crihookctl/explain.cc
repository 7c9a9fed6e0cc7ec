#include "tools/crihookctl/explain.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>

#include "base/text.h"
#include "hooks/adjustment_schema.h"
#include "hooks/apply.h"
#include "hooks/state_store.h"
#include "hooks/wire.h"

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

// One line per change of a stage's merged adjustment, with its owner; the
// lines are the schema's (hooks/adjustment_schema.h).
void changes(const hv1::StageDecision& d, std::ostream& out) {
  // Written by crihookd from validated adjustments; one that no longer
  // validates (a record edited by hand) is said so rather than half shown.
  auto a = fromWire(d.adjustment(), "recorded decision");
  if (!a.ok()) {
    out << "  " << a.status().message() << '\n';
    return;
  }
  auto line = [&](const std::string& what, const FieldKey& key) {
    auto it = d.owners().find(key.str());
    std::string text = cat("  ", what);
    text.resize(std::max<size_t>(text.size() + 2, 52), ' ');
    out << text << "by " << (it == d.owners().end() ? "?" : it->second) << '\n';
  };
  for (const FieldSpec* f : adjustmentSchema()) f->explain(*a, line);
}

// The N of "<prefix>N" at the end of `path` (after a '/'); nullopt
// otherwise. N is at most 3 digits: an NVIDIA minor is 0-254, a uverbs
// device's number is below that on any machine.
std::optional<int> numberAfter(const std::string& path, std::string_view prefix) {
  const size_t slash = path.rfind('/');
  const std::string_view name =
      std::string_view(path).substr(slash == std::string::npos ? 0 : slash + 1);
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 3 ||
      name.substr(0, prefix.size()) != prefix)
    return std::nullopt;
  int n = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

std::vector<topology::PodDevice> devicesOf(const v1::ContainerConfig& config) {
  std::vector<topology::PodDevice> out;
  for (const auto& d : config.devices()) {
    const std::string& path = d.host_path();
    if (auto minor = numberAfter(path, "nvidia")) {
      out.push_back({.type = "gpu", .minor = *minor});
    } else if (auto n = numberAfter(path, "uverbs");
               n && path.find("/infiniband/") != std::string::npos) {
      out.push_back({.type = "rdma", .uverbs = cat("uverbs", *n)});
    }
  }
  return out;
}

void explainContainer(const hv1::PodState& state, const std::string& id, std::ostream& out,
                      const topology::Snapshot* machine) {
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
    if (auto r = fromWire(c->resources(), "recorded resources"); r.ok()) applyToResources(*r, kept);
    out << "\nkept through UpdateContainerResources: " << resources(kept) << '\n';
  }
  if (machine == nullptr) return;
  // What the runtime got (or kubelet's, unchanged); the cpuset as updated
  // since, when it was.
  const v1::ContainerConfig& got = c->has_sent() ? c->sent() : c->requested();
  std::string cpuset = got.linux().resources().cpuset_cpus();
  if (c->has_resources() && !c->resources().cpuset_cpus().empty())
    cpuset = c->resources().cpuset_cpus();
  const std::vector<topology::PodDevice> devices = devicesOf(got);
  if (devices.empty() && cpuset.empty()) return;
  out << "\non the machine (" << machine->root << "):\n"
      << topology::podPicture(*machine, devices, cpuset);
}

absl::StatusOr<int> cmdExplain(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--state-dir", true}, {"--root", true}});
  if (!p.ok()) return p.status();
  if (auto s = needArgs(*p, 1, "a container ID"); !s.ok()) return s;
  const std::string dir = p->get("--state-dir", "/var/lib/crihook");
  std::string id;
  auto state = StateStore::findContainer(dir, p->positional[0], &id);
  if (!state.ok()) return state.status();
  if (in.options.json) {
    hv1::PodState only;
    *only.mutable_pod() = state->pod();
    for (const auto& c : state->containers()) {
      if (c.id() == id) *only.add_containers() = c;
    }
    in.out << messageJson(only);
    return 0;
  }
  const topology::Snapshot machine = topology::discover(topology::SysRoot(p->get("--root", "/")));
  explainContainer(*state, id, in.out, &machine);
  return 0;
}

}  // namespace crihook::ctl
