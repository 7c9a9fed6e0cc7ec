#include "hooks/adjustment_schema.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "base/quote.h"
#include "base/text.h"

namespace crihook {
namespace {

namespace v1 = ::runtime::v1;
namespace hv1 = ::crihook::hook::v1;
namespace pb = ::google::protobuf;

// ---- Checks of what comes from outside (a reply, a module's answer, a setting).

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

std::string badIn(int64_t v, int64_t min, int64_t max) {
  if (v >= min && v <= max) return "";
  return max == INT64_MAX ? cat("expected at least ", min, ", got ", v)
                          : cat("expected ", min, " to ", max, ", got ", v);
}

// badIn as a row's check: badUnlessIn<0> (0 or more), badUnlessIn<-1, 100>.
template <int64_t Min, int64_t Max = INT64_MAX>
std::string badUnlessIn(const int64_t& v) {
  return badIn(v, Min, Max);
}

std::string badMapKey(const std::string& k) { return k.empty() ? "expected a key, got \"\"" : ""; }

// The container and host paths of a mount or device on the wire: both
// absolute. `list` and `index` name the entry ("mounts[0].host_path").
template <typename Wire>
absl::Status checkPaths(const Wire& entry, std::string_view list, int index,
                        const FieldSpec::Bad& bad) {
  for (auto [name, path] : {std::pair{"container_path", &entry.container_path()},
                            std::pair{"host_path", &entry.host_path()}}) {
    if (!absolute(*path))
      return bad(cat(list, "[", index, "].", name),
                 cat("expected an absolute path, got ", quote(*path)));
  }
  return absl::OkStatus();
}

// ---- Reflection on the generated messages, for scalar fields named by the row.

const pb::FieldDescriptor* fieldOf(const pb::Descriptor* d, std::string_view name) {
  if (name.empty()) return nullptr;
  const pb::FieldDescriptor* f = d->FindFieldByName(std::string(name));
  // A row naming a field the proto lacks is a programming error the schema
  // test catches; fail loudly rather than apply nothing.
  if (f == nullptr) std::abort();
  return f;
}

template <typename T>
T getField(const pb::Message& m, const pb::FieldDescriptor* f) {
  if constexpr (std::is_same_v<T, std::string>) {
    return m.GetReflection()->GetString(m, f);
  } else {
    return m.GetReflection()->GetInt64(m, f);
  }
}

template <typename T>
void setField(pb::Message& m, const pb::FieldDescriptor* f, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    m.GetReflection()->SetString(&m, f, v);
  } else {
    m.GetReflection()->SetInt64(&m, f, v);
  }
}

// The entry of a CRI list keyed by container path (ContainerConfig.mounts,
// .devices) at `path`: the last one there, or a new one at the end. The
// caller fills in the rest, so a hook's entry replaces what was at its path.
template <typename Entry>
Entry& entryAt(pb::RepeatedPtrField<Entry>& list, const std::string& path) {
  Entry* out = nullptr;
  for (Entry& x : list) {
    if (x.container_path() == path) out = &x;
  }
  if (out == nullptr) {
    out = list.Add();
    out->set_container_path(path);
  }
  return *out;
}

// ---- The kinds of field: what a row is, and the FieldSpec that reads it.

// One value: cpuset, CPU, memory, OOM score (resources), the cgroup parent.
template <typename T>
struct ScalarRow {
  Field field;
  std::string_view name;  // also its wire field's name
  std::optional<T> Adjustment::*member;
  std::string_view resource_field;  // in LinuxContainerResources; empty if not a resource
  std::string_view cri;
  // "" when the value is acceptable, else why not; null: every value is.
  std::string (*bad)(const T&) = nullptr;
  // Sandbox placement for non-resources (the cgroup parent): RunPodSandbox's
  // config, and the one CreateContainer carries.
  void (*to_sandbox)(v1::PodSandboxConfig&, const T&) = nullptr;
  // Koordinator: whether an answer's value is taken (koord-runtime-proxy's
  // updateResource()); null when Koordinator does not map it.
  bool (*koordinator_takes)(const T&) = nullptr;
  std::string_view koordinator = "";
};

template <typename T>
class ScalarField final : public FieldSpec {
 public:
  explicit ScalarField(const ScalarRow<T>& r)
      : FieldSpec(r.field, r.name, FieldKind::kScalar,
                  (r.resource_field.empty() ? 0u : kInContainer | kInSandbox | kInResources) |
                      (r.to_sandbox ? kInSandbox | kInContainer : 0u),
                  r.cri, r.koordinator),
        row_(r),
        wire_(fieldOf(hv1::Adjustment::descriptor(), row_.name)),
        resource_(fieldOf(v1::LinuxContainerResources::descriptor(), row_.resource_field)) {}

  bool present(const Adjustment& a) const override { return (a.*row_.member).has_value(); }
  void overlay(const Adjustment& from, Adjustment& to) const override {
    if (from.*row_.member) to.*row_.member = from.*row_.member;
  }
  absl::Status merge(const Adjustment& from, Adjustment& into, Claims& claims) const override {
    const auto& want = from.*row_.member;
    auto& have = into.*row_.member;
    if (!want) return absl::OkStatus();
    bool store = false;
    const std::string old_value = have ? cat(*have) : std::string();
    if (auto s = claims.claim(field, "", old_value, cat(*want), store); !s.ok()) return s;
    if (store) have = want;
    return absl::OkStatus();
  }
  std::vector<std::string_view> wireFields() const override { return {name}; }
  void toWire(const Adjustment& a, hv1::Adjustment& w) const override {
    if (const auto& v = a.*row_.member) setField(w, wire_, *v);
  }
  absl::Status fromWire(const hv1::Adjustment& w, Adjustment& a, const Bad& bad) const override {
    if (!w.GetReflection()->HasField(w, wire_)) return absl::OkStatus();
    T v = getField<T>(w, wire_);
    if (row_.bad) {
      if (std::string why = row_.bad(v); !why.empty()) return bad(name, why);
    }
    a.*row_.member = std::move(v);
    return absl::OkStatus();
  }
  void applyToContainer(const Adjustment& a, v1::ContainerConfig&,
                        v1::PodSandboxConfig* sandbox) const override {
    if (const auto& v = a.*row_.member; v && row_.to_sandbox && sandbox)
      row_.to_sandbox(*sandbox, *v);
  }
  void applyToSandbox(const Adjustment& a, v1::PodSandboxConfig& c) const override {
    if (const auto& v = a.*row_.member; v && row_.to_sandbox) row_.to_sandbox(c, *v);
  }
  void applyToResources(const Adjustment& a, v1::LinuxContainerResources& r) const override {
    if (const auto& v = a.*row_.member; v && resource_) setField(r, resource_, *v);
  }
  void takeKoordinatorResources(const v1::LinuxContainerResources& sent,
                                const v1::LinuxContainerResources& answer,
                                Adjustment& a) const override {
    if (!resource_ || !row_.koordinator_takes) return;
    T v = getField<T>(answer, resource_);
    if (row_.koordinator_takes(v) && v != getField<T>(sent, resource_)) a.*row_.member = v;
  }
  void explain(const Adjustment& a, const Line& line) const override {
    if (const auto& v = a.*row_.member) line(cat(name, " ", *v), {field, ""});
  }

 private:
  const ScalarRow<T> row_;
  const pb::FieldDescriptor* wire_;
  const pb::FieldDescriptor* resource_;
};

// Mounts and devices: entries keyed by their path in the container, on the
// wire (Wire) and in the CRI request (Cri). Both paths of an entry from the
// wire must be absolute (checkPaths); in the request, a hook's entry replaces
// the one at its container path (entryAt).
template <typename T, typename Wire, typename Cri>
struct PathKeyedRow {
  Field field;
  std::string_view name;       // "mount"
  std::string_view wire_name;  // "mounts"
  std::vector<T> Adjustment::*member;
  std::string_view cri;
  const pb::RepeatedPtrField<Wire>* (*wire)(const hv1::Adjustment&);
  pb::RepeatedPtrField<Wire>* (*wire_mut)(hv1::Adjustment&);
  void (*to_wire)(const T&, Wire&);
  // Checks the rest of one entry whose paths are checked (its index names
  // it) and converts it.
  absl::Status (*from_wire)(const Wire&, int index, const FieldSpec::Bad&, T& out);
  std::string (*describe)(const T&);  // a value in a conflict message
  std::string (*explain)(const T&);   // explain's line
  pb::RepeatedPtrField<Cri>* (*cri_list)(v1::ContainerConfig&);
  void (*to_cri)(const T&, Cri&);  // fills in the entry at its container path
};

template <typename T, typename Wire, typename Cri>
class PathKeyedField final : public FieldSpec {
 public:
  explicit PathKeyedField(const PathKeyedRow<T, Wire, Cri>& r)
      : FieldSpec(r.field, r.name, FieldKind::kKeyedList, kInContainer, r.cri, ""), row_(r) {}

  bool present(const Adjustment& a) const override { return !(a.*row_.member).empty(); }
  void overlay(const Adjustment& from, Adjustment& to) const override {
    for (const T& item : from.*row_.member) upsert(to.*row_.member, item);
  }
  absl::Status merge(const Adjustment& from, Adjustment& into, Claims& claims) const override {
    auto& list = into.*row_.member;
    for (const T& item : from.*row_.member) {
      auto have = find(list, item.container_path);
      bool store = false;
      const std::string old_value = have == list.end() ? std::string() : row_.describe(*have);
      if (auto s = claims.claim(field, item.container_path, old_value, row_.describe(item), store);
          !s.ok())
        return s;
      if (store) upsert(list, item);
    }
    return absl::OkStatus();
  }
  std::vector<std::string_view> wireFields() const override { return {row_.wire_name}; }
  void toWire(const Adjustment& a, hv1::Adjustment& w) const override {
    for (const T& item : a.*row_.member) row_.to_wire(item, *row_.wire_mut(w)->Add());
  }
  absl::Status fromWire(const hv1::Adjustment& w, Adjustment& a, const Bad& bad) const override {
    const auto& list = *row_.wire(w);
    for (int i = 0; i < list.size(); ++i) {
      if (auto s = checkPaths(list[i], row_.wire_name, i, bad); !s.ok()) return s;
      T item;
      if (auto s = row_.from_wire(list[i], i, bad, item); !s.ok()) return s;
      (a.*row_.member).push_back(std::move(item));
    }
    return absl::OkStatus();
  }
  void applyToContainer(const Adjustment& a, v1::ContainerConfig& c,
                        v1::PodSandboxConfig*) const override {
    for (const T& item : a.*row_.member)
      row_.to_cri(item, entryAt(*row_.cri_list(c), item.container_path));
  }
  void explain(const Adjustment& a, const Line& line) const override {
    for (const T& item : a.*row_.member) line(row_.explain(item), {field, item.container_path});
  }

 private:
  static auto find(std::vector<T>& list, const std::string& path) {
    return std::find_if(list.begin(), list.end(),
                        [&](const T& x) { return x.container_path == path; });
  }
  static void upsert(std::vector<T>& list, const T& item) {
    if (auto have = find(list, item.container_path); have != list.end()) {
      *have = item;
    } else {
      list.push_back(item);
    }
  }
  const PathKeyedRow<T, Wire, Cri> row_;
};
// The environment: set in order (a name already present keeps its place)
// and removal, one owner per name.
class EnvField final : public FieldSpec {
 public:
  EnvField()
      : FieldSpec(Field::kEnv, "env", FieldKind::kKeyedList, kInContainer, "ContainerConfig.envs",
                  "ContainerResourceHookResponse.container_envs (CreateContainer)") {}

  bool present(const Adjustment& a) const override {
    return !a.env.empty() || !a.env_remove.empty();
  }
  void overlay(const Adjustment& from, Adjustment& to) const override {
    for (const EnvVar& e : from.env) set(to, e);
    for (const std::string& n : from.env_remove) remove(to, n);
  }
  absl::Status merge(const Adjustment& from, Adjustment& into, Claims& claims) const override {
    auto value = [&](const std::string& name) -> std::string {
      for (const EnvVar& e : into.env) {
        if (e.name == name) return e.value;
      }
      return std::string(kRemoved);
    };
    for (const EnvVar& e : from.env) {
      bool store = false;
      if (auto s = claims.claim(field, e.name, value(e.name), e.value, store); !s.ok()) return s;
      if (store) set(into, e);
    }
    for (const std::string& name : from.env_remove) {
      bool store = false;
      if (auto s = claims.claim(field, name, value(name), std::string(kRemoved), store); !s.ok())
        return s;
      if (store) remove(into, name);
    }
    return absl::OkStatus();
  }
  std::vector<std::string_view> wireFields() const override { return {"env", "env_remove"}; }
  void toWire(const Adjustment& a, hv1::Adjustment& w) const override {
    for (const EnvVar& e : a.env) {
      auto* kv = w.add_env();
      kv->set_key(e.name);
      kv->set_value(e.value);
    }
    for (const auto& n : a.env_remove) w.add_env_remove(n);
  }
  absl::Status fromWire(const hv1::Adjustment& w, Adjustment& a, const Bad& bad) const override {
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
    return absl::OkStatus();
  }
  void applyToContainer(const Adjustment& a, v1::ContainerConfig& c,
                        v1::PodSandboxConfig*) const override {
    auto& envs = *c.mutable_envs();
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
  void explain(const Adjustment& a, const Line& line) const override {
    for (const EnvVar& e : a.env) line(cat("set env ", e.name, "=", e.value), {field, e.name});
    for (const auto& n : a.env_remove) line(cat("unset env ", n), {field, n});
  }

 private:
  static void set(Adjustment& a, const EnvVar& e) {
    std::erase(a.env_remove, e.name);
    bool found = false;
    for (EnvVar& have : a.env) {
      if (have.name == e.name) {
        have.value = e.value;
        found = true;
      }
    }
    if (!found) a.env.push_back(e);
  }
  static void remove(Adjustment& a, const std::string& name) {
    std::erase_if(a.env, [&](const EnvVar& e) { return e.name == name; });
    if (std::find(a.env_remove.begin(), a.env_remove.end(), name) == a.env_remove.end())
      a.env_remove.push_back(name);
  }
};

// Names or ids, each once (CDI devices, supplemental groups): the same
// entry from two hooks is one entry, never a conflict; the first hook
// naming it stays its owner.
template <typename T, typename WireList>
struct SetRow {
  Field field;
  std::string_view name;       // "cdi"
  std::string_view wire_name;  // "cdi_devices"
  std::vector<T> Adjustment::*member;
  std::string_view cri;
  const WireList* (*wire)(const hv1::Adjustment&);
  WireList* (*wire_mut)(hv1::Adjustment&);
  std::string (*bad)(const T&);  // "" when acceptable, else why not
  std::string (*explain)(const T&);
  void (*apply)(const T&, v1::ContainerConfig&);  // adds it unless there
};

template <typename T, typename WireList>
class SetField final : public FieldSpec {
 public:
  explicit SetField(const SetRow<T, WireList>& r)
      : FieldSpec(r.field, r.name, FieldKind::kSet, kInContainer, r.cri, ""), row_(r) {}

  bool present(const Adjustment& a) const override { return !(a.*row_.member).empty(); }
  void overlay(const Adjustment& from, Adjustment& to) const override { add(from, to); }
  absl::Status merge(const Adjustment& from, Adjustment& into, Claims& claims) const override {
    for (const T& item : from.*row_.member) {
      bool store = false;
      const std::string key = cat(item);
      (void)claims.claim(field, key, key, key, store);  // the same value: never a conflict
    }
    add(from, into);
    return absl::OkStatus();
  }
  std::vector<std::string_view> wireFields() const override { return {row_.wire_name}; }
  void toWire(const Adjustment& a, hv1::Adjustment& w) const override {
    WireList& out = *row_.wire_mut(w);
    for (const T& item : a.*row_.member) out.Add(T(item));
  }
  absl::Status fromWire(const hv1::Adjustment& w, Adjustment& a, const Bad& bad) const override {
    const WireList& list = *row_.wire(w);
    for (int i = 0; i < list.size(); ++i) {
      if (auto why = row_.bad(list.Get(i)); !why.empty())
        return bad(cat(row_.wire_name, "[", i, "]"), why);
      (a.*row_.member).push_back(list.Get(i));
    }
    return absl::OkStatus();
  }
  void applyToContainer(const Adjustment& a, v1::ContainerConfig& c,
                        v1::PodSandboxConfig*) const override {
    for (const T& item : a.*row_.member) row_.apply(item, c);
  }
  void explain(const Adjustment& a, const Line& line) const override {
    for (const T& item : a.*row_.member) line(row_.explain(item), {field, cat(item)});
  }

 private:
  void add(const Adjustment& from, Adjustment& to) const {
    auto& have = to.*row_.member;
    for (const T& item : from.*row_.member) {
      if (std::find(have.begin(), have.end(), item) == have.end()) have.push_back(item);
    }
  }
  const SetRow<T, WireList> row_;
};

// Key -> value, each key its own owner; annotations and labels also remove keys.
template <typename V>
struct MapRow {
  Field field;
  std::string_view name;       // "annotation"
  std::string_view wire_name;  // "annotations"
  std::map<std::string, V> Adjustment::*member;
  std::string_view cri;
  unsigned lands;
  const pb::Map<std::string, V>* (*wire)(const hv1::Adjustment&);
  pb::Map<std::string, V>* (*wire_mut)(hv1::Adjustment&);
  // "" for an acceptable key, else why not.
  std::string (*bad_key)(const std::string&);
  std::string (*explain)(const std::string& key, const V& value);
  // Where it lands; null where it does not.
  pb::Map<std::string, std::string>* (*container)(v1::ContainerConfig&) = nullptr;
  pb::Map<std::string, std::string>* (*sandbox)(v1::PodSandboxConfig&) = nullptr;
  void (*resources)(const std::string& key, const V& value, v1::LinuxContainerResources&) = nullptr;
  // The removal list, when the field has one.
  std::vector<std::string> Adjustment::*removed = nullptr;
  std::string_view wire_remove_name = "";
  const pb::RepeatedPtrField<std::string>* (*wire_remove)(const hv1::Adjustment&) = nullptr;
  pb::RepeatedPtrField<std::string>* (*wire_remove_mut)(hv1::Adjustment&) = nullptr;
  // Koordinator: the answer's map in container resources, merged key by key.
  const pb::Map<std::string, std::string>* (*koordinator_map)(const v1::LinuxContainerResources&) =
      nullptr;
  std::string_view koordinator = "";
};

template <typename V>
class MapField final : public FieldSpec {
 public:
  using WireMap = pb::Map<std::string, V>;
  using Names = pb::RepeatedPtrField<std::string>;
  explicit MapField(const MapRow<V>& r)
      : FieldSpec(r.field, r.name, FieldKind::kMap, r.lands, r.cri, r.koordinator), row_(r) {}

  bool present(const Adjustment& a) const override {
    return !(a.*row_.member).empty() || (row_.removed && !(a.*row_.removed).empty());
  }
  void overlay(const Adjustment& from, Adjustment& to) const override {
    for (const auto& [k, v] : from.*row_.member) set(to, k, v);
    if (row_.removed) {
      for (const auto& k : from.*row_.removed) remove(to, k);
    }
  }
  absl::Status merge(const Adjustment& from, Adjustment& into, Claims& claims) const override {
    const auto& have = into.*row_.member;
    auto current = [&](const std::string& key) -> std::string {
      auto it = have.find(key);
      return it == have.end() ? std::string(kRemoved) : cat(it->second);
    };
    for (const auto& [key, value] : from.*row_.member) {
      bool store = false;
      if (auto s = claims.claim(field, key, current(key), cat(value), store); !s.ok()) return s;
      if (store) set(into, key, value);
    }
    if (!row_.removed) return absl::OkStatus();
    for (const std::string& key : from.*row_.removed) {
      bool store = false;
      if (auto s = claims.claim(field, key, current(key), std::string(kRemoved), store); !s.ok())
        return s;
      if (store) remove(into, key);
    }
    return absl::OkStatus();
  }
  std::vector<std::string_view> wireFields() const override {
    if (row_.removed) return {row_.wire_name, row_.wire_remove_name};
    return {row_.wire_name};
  }
  void toWire(const Adjustment& a, hv1::Adjustment& w) const override {
    if (!(a.*row_.member).empty()) {
      WireMap& out = *row_.wire_mut(w);
      for (const auto& [k, v] : a.*row_.member) out[k] = v;
    }
    if (row_.removed) {
      for (const auto& k : a.*row_.removed) row_.wire_remove_mut(w)->Add(std::string(k));
    }
  }
  absl::Status fromWire(const hv1::Adjustment& w, Adjustment& a, const Bad& bad) const override {
    for (const auto& [k, v] : *row_.wire(w)) {
      if (auto why = row_.bad_key(k); !why.empty()) return bad(row_.wire_name, why);
      (a.*row_.member)[k] = v;
    }
    if (row_.removed) {
      const Names& names = *row_.wire_remove(w);
      (a.*row_.removed).assign(names.begin(), names.end());
    }
    return absl::OkStatus();
  }
  void applyToContainer(const Adjustment& a, v1::ContainerConfig& c,
                        v1::PodSandboxConfig*) const override {
    if (row_.container && present(a)) applyMap(a, *row_.container(c));
  }
  void applyToSandbox(const Adjustment& a, v1::PodSandboxConfig& c) const override {
    if (row_.sandbox && present(a)) applyMap(a, *row_.sandbox(c));
  }
  void applyToResources(const Adjustment& a, v1::LinuxContainerResources& r) const override {
    if (!row_.resources) return;
    for (const auto& [k, v] : a.*row_.member) row_.resources(k, v, r);
  }
  void takeKoordinatorResources(const v1::LinuxContainerResources& sent,
                                const v1::LinuxContainerResources& answer,
                                Adjustment& a) const override {
    if constexpr (std::is_same_v<V, std::string>) {
      if (!row_.koordinator_map) return;
      const auto& was = *row_.koordinator_map(sent);
      for (const auto& [k, v] : *row_.koordinator_map(answer)) {
        auto it = was.find(k);
        if (it == was.end() || it->second != v) (a.*row_.member)[k] = v;
      }
    }
  }
  void explain(const Adjustment& a, const Line& line) const override {
    for (const auto& [k, v] : a.*row_.member) line(row_.explain(k, v), {field, k});
    if (row_.removed) {
      for (const auto& k : a.*row_.removed) line(cat("remove ", name, " ", k), {field, k});
    }
  }

 private:
  void set(Adjustment& a, const std::string& key, const V& value) const {
    (a.*row_.member)[key] = value;
    if (row_.removed) std::erase(a.*row_.removed, key);
  }
  void remove(Adjustment& a, const std::string& key) const {
    (a.*row_.member).erase(key);
    auto& removed = a.*row_.removed;
    if (std::find(removed.begin(), removed.end(), key) == removed.end()) removed.push_back(key);
  }
  void applyMap(const Adjustment& a, pb::Map<std::string, std::string>& target) const {
    if constexpr (std::is_same_v<V, std::string>) {
      for (const auto& [k, v] : a.*row_.member) target[k] = v;
      if (row_.removed) {
        for (const std::string& k : a.*row_.removed) target.erase(k);
      }
    }
  }
  const MapRow<V> row_;
};

// ---- The rows, in merge order: one per field, each beside what only it needs.

// The environment: its own kind (EnvField, above).

// Mounts.

// A mount onto the wire (hv1::Mount) or into the request (v1::Mount): the two
// messages spell it alike.
template <typename Out>
void mountTo(const MountSpec& m, Out& out) {
  out.set_container_path(m.container_path);
  out.set_host_path(m.host_path);
  out.set_readonly(m.readonly);
  out.set_propagation(static_cast<v1::MountPropagation>(m.propagation));
}

absl::Status mountFromWire(const hv1::Mount& m, int, const FieldSpec::Bad&, MountSpec& out) {
  out = {m.container_path(), m.host_path(), m.readonly(), m.propagation()};
  return absl::OkStatus();
}

std::string describeMount(const MountSpec& m) {
  return cat(m.host_path, m.readonly ? " (ro)" : " (rw)", " propagation ", m.propagation);
}

std::string explainMount(const MountSpec& m) {
  return cat("mount ", m.container_path, " <- ", m.host_path, m.readonly ? " (ro)" : "");
}

constexpr PathKeyedRow<MountSpec, hv1::Mount, v1::Mount> kMountRow{
    .field = Field::kMount,
    .name = "mount",
    .wire_name = "mounts",
    .member = &Adjustment::mounts,
    .cri = "ContainerConfig.mounts",
    .wire = [](const hv1::Adjustment& w) { return &w.mounts(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_mounts(); },
    .to_wire = mountTo<hv1::Mount>,
    .from_wire = mountFromWire,
    .describe = describeMount,
    .explain = explainMount,
    .cri_list = [](v1::ContainerConfig& c) { return c.mutable_mounts(); },
    .to_cri = mountTo<v1::Mount>,
};

// Devices.

// A device onto the wire (hv1::Device) or into the request (v1::Device).
template <typename Out>
void deviceTo(const DeviceSpec& d, Out& out) {
  out.set_container_path(d.container_path);
  out.set_host_path(d.host_path);
  out.set_permissions(d.permissions);
}

absl::Status deviceFromWire(const hv1::Device& d, int i, const FieldSpec::Bad& bad,
                            DeviceSpec& out) {
  if (auto why = badPermissions(d.permissions()); !why.empty())
    return bad(cat("devices[", i, "].permissions"), why);
  out = {d.container_path(), d.host_path(),
         d.permissions().empty() ? std::string("rw") : d.permissions()};
  return absl::OkStatus();
}

std::string describeDevice(const DeviceSpec& d) { return cat(d.host_path, " ", d.permissions); }

std::string explainDevice(const DeviceSpec& d) {
  return cat("device ", d.container_path, " <- ", d.host_path, " ", d.permissions);
}

constexpr PathKeyedRow<DeviceSpec, hv1::Device, v1::Device> kDeviceRow{
    .field = Field::kDevice,
    .name = "device",
    .wire_name = "devices",
    .member = &Adjustment::devices,
    .cri = "ContainerConfig.devices",
    .wire = [](const hv1::Adjustment& w) { return &w.devices(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_devices(); },
    .to_wire = deviceTo<hv1::Device>,
    .from_wire = deviceFromWire,
    .describe = describeDevice,
    .explain = explainDevice,
    .cri_list = [](v1::ContainerConfig& c) { return c.mutable_devices(); },
    .to_cri = deviceTo<v1::Device>,
};

// CDI devices.

std::string explainCdi(const std::string& name) { return cat("cdi device ", name); }

void addCdi(const std::string& name, v1::ContainerConfig& c) {
  const auto& have = c.cdi_devices();
  if (std::none_of(have.begin(), have.end(),
                   [&](const v1::CDIDevice& x) { return x.name() == name; })) {
    c.add_cdi_devices()->set_name(name);
  }
}

constexpr SetRow<std::string, pb::RepeatedPtrField<std::string>> kCdiRow{
    .field = Field::kCdi,
    .name = "cdi",
    .wire_name = "cdi_devices",
    .member = &Adjustment::cdi_devices,
    .cri = "ContainerConfig.cdi_devices",
    .wire = [](const hv1::Adjustment& w) { return &w.cdi_devices(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_cdi_devices(); },
    .bad = badCdiName,
    .explain = explainCdi,
    .apply = addCdi,
};

// Resources: where each lands in LinuxContainerResources, its bounds, and
// which answers of a Koordinator server count (koord-runtime-proxy's
// updateResource(): quota when non-zero, -1 being "unlimited"; period,
// shares, memory and swap when positive; the OOM score within the kernel's
// range; cpusets when non-empty — koord-runtime-proxy takes "" too, which
// would be every CPU of the node: crihook takes it as "no opinion").

// The kernel's range for /proc/<pid>/oom_score_adj.
constexpr int64_t kMinOomScoreAdj = -1000, kMaxOomScoreAdj = 1000;

bool nonEmpty(const std::string& v) { return !v.empty(); }
bool positive(const int64_t& v) { return v > 0; }
bool nonZero(const int64_t& v) { return v != 0; }
bool oomScore(const int64_t& v) { return v >= kMinOomScoreAdj && v <= kMaxOomScoreAdj; }

constexpr ScalarRow<std::string> kCpusetCpusRow{
    .field = Field::kCpusetCpus,
    .name = "cpuset_cpus",
    .member = &Adjustment::cpuset_cpus,
    .resource_field = "cpuset_cpus",
    .cri = "LinuxContainerResources.cpuset_cpus",
    .bad = badCpuList,
    .koordinator_takes = nonEmpty,
    .koordinator = "LinuxContainerResources.cpuset_cpus",
};

constexpr ScalarRow<std::string> kCpusetMemsRow{
    .field = Field::kCpusetMems,
    .name = "cpuset_mems",
    .member = &Adjustment::cpuset_mems,
    .resource_field = "cpuset_mems",
    .cri = "LinuxContainerResources.cpuset_mems",
    .bad = badCpuList,
    .koordinator_takes = nonEmpty,
    .koordinator = "LinuxContainerResources.cpuset_mems",
};

constexpr ScalarRow<int64_t> kCpuSharesRow{
    .field = Field::kCpuShares,
    .name = "cpu_shares",
    .member = &Adjustment::cpu_shares,
    .resource_field = "cpu_shares",
    .cri = "LinuxContainerResources.cpu_shares",
    .bad = badUnlessIn<0>,
    .koordinator_takes = positive,
    .koordinator = "LinuxContainerResources.cpu_shares",
};

constexpr ScalarRow<int64_t> kCpuQuotaRow{
    .field = Field::kCpuQuota,
    .name = "cpu_quota",
    .member = &Adjustment::cpu_quota,
    .resource_field = "cpu_quota",
    .cri = "LinuxContainerResources.cpu_quota",
    .bad = badUnlessIn<-1>,
    .koordinator_takes = nonZero,
    .koordinator = "LinuxContainerResources.cpu_quota",
};

constexpr ScalarRow<int64_t> kCpuPeriodRow{
    .field = Field::kCpuPeriod,
    .name = "cpu_period",
    .member = &Adjustment::cpu_period,
    .resource_field = "cpu_period",
    .cri = "LinuxContainerResources.cpu_period",
    .bad = badUnlessIn<0>,
    .koordinator_takes = positive,
    .koordinator = "LinuxContainerResources.cpu_period",
};

constexpr ScalarRow<int64_t> kMemoryLimitBytesRow{
    .field = Field::kMemoryLimitBytes,
    .name = "memory_limit_bytes",
    .member = &Adjustment::memory_limit_bytes,
    .resource_field = "memory_limit_in_bytes",
    .cri = "LinuxContainerResources.memory_limit_in_bytes",
    .bad = badUnlessIn<0>,
    .koordinator_takes = positive,
    .koordinator = "LinuxContainerResources.memory_limit_in_bytes",
};

constexpr ScalarRow<int64_t> kMemorySwapLimitBytesRow{
    .field = Field::kMemorySwapLimitBytes,
    .name = "memory_swap_limit_bytes",
    .member = &Adjustment::memory_swap_limit_bytes,
    .resource_field = "memory_swap_limit_in_bytes",
    .cri = "LinuxContainerResources.memory_swap_limit_in_bytes",
    .bad = badUnlessIn<0>,
    .koordinator_takes = positive,
    .koordinator = "LinuxContainerResources.memory_swap_limit_in_bytes",
};

constexpr ScalarRow<int64_t> kOomScoreAdjRow{
    .field = Field::kOomScoreAdj,
    .name = "oom_score_adj",
    .member = &Adjustment::oom_score_adj,
    .resource_field = "oom_score_adj",
    .cri = "LinuxContainerResources.oom_score_adj",
    .bad = badUnlessIn<kMinOomScoreAdj, kMaxOomScoreAdj>,
    .koordinator_takes = oomScore,
    .koordinator = "LinuxContainerResources.oom_score_adj",
};

// Hugepages. Koordinator's answers never set them (koord-runtime-proxy
// ignores them).

std::string badPageSize(const std::string& k) {
  return k.empty() ? "expected a page size such as \"2MB\", got \"\"" : "";
}

std::string explainHugepage(const std::string& size, const uint64_t& limit) {
  return cat("hugepages ", size, " ", limit);
}

// The limit of its page size, replacing one the request has.
void hugepageTo(const std::string& size, const uint64_t& limit, v1::LinuxContainerResources& r) {
  v1::HugepageLimit* h = nullptr;
  for (v1::HugepageLimit& x : *r.mutable_hugepage_limits()) {
    if (x.page_size() == size) h = &x;
  }
  if (h == nullptr) h = r.add_hugepage_limits();
  h->set_page_size(size);
  h->set_limit(limit);
}

constexpr MapRow<uint64_t> kHugepageRow{
    .field = Field::kHugepage,
    .name = "hugepage",
    .wire_name = "hugepage_limits",
    .member = &Adjustment::hugepage_limits,
    .cri = "LinuxContainerResources.hugepage_limits",
    .lands = kInContainer | kInSandbox | kInResources,
    .wire = [](const hv1::Adjustment& w) { return &w.hugepage_limits(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_hugepage_limits(); },
    .bad_key = badPageSize,
    .explain = explainHugepage,
    .resources = hugepageTo,
};

// cgroup v2 files.

std::string badCgroupFile(const std::string& k) {
  if (!k.empty() && k.find('/') == std::string::npos) return "";
  return cat("expected a cgroup file name such as \"memory.high\", got ", quote(k));
}

std::string explainUnified(const std::string& k, const std::string& v) {
  return cat("unified ", k, "=", v);
}

void unifiedTo(const std::string& k, const std::string& v, v1::LinuxContainerResources& r) {
  (*r.mutable_unified())[k] = v;
}

constexpr MapRow<std::string> kUnifiedRow{
    .field = Field::kUnified,
    .name = "unified",
    .wire_name = "unified",
    .member = &Adjustment::unified,
    .cri = "LinuxContainerResources.unified",
    .lands = kInContainer | kInSandbox | kInResources,
    .wire = [](const hv1::Adjustment& w) { return &w.unified(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_unified(); },
    .bad_key = badCgroupFile,
    .explain = explainUnified,
    .resources = unifiedTo,
    .koordinator_map = [](const v1::LinuxContainerResources& r) { return &r.unified(); },
    .koordinator = "LinuxContainerResources.unified (merged key by key)",
};

// Annotations and labels, of the container and the pod.

std::string explainAnnotation(const std::string& k, const std::string& v) {
  return cat("annotation ", k, "=", v);
}

constexpr MapRow<std::string> kAnnotationRow{
    .field = Field::kAnnotation,
    .name = "annotation",
    .wire_name = "annotations",
    .member = &Adjustment::annotations,
    .cri = "ContainerConfig.annotations, PodSandboxConfig.annotations",
    .lands = kInContainer | kInSandbox,
    .wire = [](const hv1::Adjustment& w) { return &w.annotations(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_annotations(); },
    .bad_key = badMapKey,
    .explain = explainAnnotation,
    .container = [](v1::ContainerConfig& c) { return c.mutable_annotations(); },
    .sandbox = [](v1::PodSandboxConfig& c) { return c.mutable_annotations(); },
    .removed = &Adjustment::annotations_remove,
    .wire_remove_name = "annotations_remove",
    .wire_remove = [](const hv1::Adjustment& w) { return &w.annotations_remove(); },
    .wire_remove_mut = [](hv1::Adjustment& w) { return w.mutable_annotations_remove(); },
    .koordinator = "annotations (pod), container_annotations (container)",
};

std::string explainLabel(const std::string& k, const std::string& v) {
  return cat("label ", k, "=", v);
}

constexpr MapRow<std::string> kLabelRow{
    .field = Field::kLabel,
    .name = "label",
    .wire_name = "labels",
    .member = &Adjustment::labels,
    .cri = "ContainerConfig.labels, PodSandboxConfig.labels",
    .lands = kInContainer | kInSandbox,
    .wire = [](const hv1::Adjustment& w) { return &w.labels(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_labels(); },
    .bad_key = badMapKey,
    .explain = explainLabel,
    .container = [](v1::ContainerConfig& c) { return c.mutable_labels(); },
    .sandbox = [](v1::PodSandboxConfig& c) { return c.mutable_labels(); },
    .removed = &Adjustment::labels_remove,
    .wire_remove_name = "labels_remove",
    .wire_remove = [](const hv1::Adjustment& w) { return &w.labels_remove(); },
    .wire_remove_mut = [](hv1::Adjustment& w) { return w.mutable_labels_remove(); },
    .koordinator = "labels (pod)",
};

// The cgroup parent. The runtime places a container under the cgroup parent
// its CreateContainer request's sandbox config names (Koordinator's
// pod_cgroup_parent), a pod under RunPodSandbox's.

void cgroupParentTo(v1::PodSandboxConfig& c, const std::string& v) {
  c.mutable_linux()->set_cgroup_parent(v);
}

constexpr ScalarRow<std::string> kCgroupParentRow{
    .field = Field::kCgroupParent,
    .name = "cgroup_parent",
    .member = &Adjustment::cgroup_parent,
    .resource_field = "",
    .cri = "PodSandboxConfig.linux.cgroup_parent",
    .bad = nullptr,
    .to_sandbox = cgroupParentTo,
    .koordinator = "cgroup_parent (pod), pod_cgroup_parent (container)",
};

// Supplemental groups: a device hook adding the group that owns its device
// nodes (the host's "render" or "video" group for a GPU under /dev/dri).

// A gid_t; (gid_t)-1 means "no change" to the kernel, never a group.
constexpr int64_t kMaxGid = int64_t{UINT32_MAX} - 1;

std::string explainSupplementalGroup(const int64_t& gid) { return cat("supplemental group ", gid); }

void addSupplementalGroup(const int64_t& gid, v1::ContainerConfig& c) {
  auto& groups = *c.mutable_linux()->mutable_security_context()->mutable_supplemental_groups();
  if (std::find(groups.begin(), groups.end(), gid) == groups.end()) groups.Add(gid);
}

constexpr SetRow<int64_t, pb::RepeatedField<int64_t>> kSupplementalGroupRow{
    .field = Field::kSupplementalGroup,
    .name = "supplemental_group",
    .wire_name = "supplemental_groups",
    .member = &Adjustment::supplemental_groups,
    .cri = "ContainerConfig.linux.security_context.supplemental_groups",
    .wire = [](const hv1::Adjustment& w) { return &w.supplemental_groups(); },
    .wire_mut = [](hv1::Adjustment& w) { return w.mutable_supplemental_groups(); },
    .bad = badUnlessIn<0, kMaxGid>,
    .explain = explainSupplementalGroup,
    .apply = addSupplementalGroup,
};

// ---- The schema.

struct Schema {
  std::array<const FieldSpec*, 18> rows;
  std::array<const FieldSpec*, 32> by_field{};
};

// Built at its first use, never destroyed: used by threads until exit.
const Schema* buildSchema() {
  // Merge order: the order conflicts are found in, and explain's.
  auto* s = new Schema{{
      new EnvField,
      new PathKeyedField(kMountRow),
      new PathKeyedField(kDeviceRow),
      new SetField(kCdiRow),
      new ScalarField(kCpusetCpusRow),
      new ScalarField(kCpusetMemsRow),
      new ScalarField(kCpuSharesRow),
      new ScalarField(kCpuQuotaRow),
      new ScalarField(kCpuPeriodRow),
      new ScalarField(kMemoryLimitBytesRow),
      new ScalarField(kMemorySwapLimitBytesRow),
      new ScalarField(kOomScoreAdjRow),
      new MapField(kHugepageRow),
      new MapField(kUnifiedRow),
      new MapField(kAnnotationRow),
      new MapField(kLabelRow),
      new ScalarField(kCgroupParentRow),
      new SetField(kSupplementalGroupRow),
  }};
  for (const FieldSpec* f : s->rows) s->by_field[static_cast<size_t>(f->field)] = f;
  return s;
}

const Schema& schema() {
  static const Schema* s = buildSchema();
  return *s;
}

}  // namespace

std::span<const FieldSpec* const> adjustmentSchema() { return schema().rows; }

const FieldSpec& fieldSpec(Field field) { return *schema().by_field[static_cast<size_t>(field)]; }

}  // namespace crihook
