#include "hooks/builtin/cdi/cdi.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/bounded_json.h"
#include "base/logging.h"
#include "base/quote.h"
#include "base/text.h"
#include "config/config_keys.h"
#include "hooks/builtin/settings.h"

namespace crihook {
namespace {

using nlohmann::json;

// A spec is 5 levels deep (devices[].containerEdits.mounts[].options[]).
constexpr int kMaxSpecNesting = 32;
// YAML aliases share nodes: 700 bytes of nested aliases stand for billions
// of nodes once converted, and yaml-cpp sets no limit. The largest real spec
// (NVIDIA's, every GPU and MIG device) converts to a few thousand.
constexpr size_t kMaxYamlNodes = 100000;
// A container asks for a few CDI devices (one per GPU or NIC).
constexpr size_t kMaxDevicesPerContainer = 256;

// YAML as JSON (scalars stay strings: every CDI field crihook uses is one),
// within kMaxYamlNodes nodes (an alias counted each time it is expanded) and
// kMaxSpecNesting levels.
class YamlConverter {
 public:
  absl::StatusOr<json> convert(const YAML::Node& n) {
    json out = walk(n, 0);
    if (!why_.empty()) return absl::InvalidArgumentError(why_);
    return out;
  }

 private:
  json walk(const YAML::Node& n, int depth) {
    if (!why_.empty()) return nullptr;
    if (++nodes_ > kMaxYamlNodes) {
      why_ = cat("more than ", kMaxYamlNodes, " nodes once its aliases are expanded");
      return nullptr;
    }
    if (depth > kMaxSpecNesting) {
      why_ = cat("nested deeper than ", kMaxSpecNesting);
      return nullptr;
    }
    switch (n.Type()) {
      case YAML::NodeType::Map: {
        json o = json::object();
        for (const auto& kv : n) {
          if (!kv.first.IsScalar()) {
            why_ = "a mapping key that is not a scalar";
            return nullptr;
          }
          o[kv.first.Scalar()] = walk(kv.second, depth + 1);
          if (!why_.empty()) return nullptr;
        }
        return o;
      }
      case YAML::NodeType::Sequence: {
        json a = json::array();
        for (const auto& x : n) {
          a.push_back(walk(x, depth + 1));
          if (!why_.empty()) return nullptr;
        }
        return a;
      }
      case YAML::NodeType::Scalar:
        return n.Scalar();
      default:
        return nullptr;
    }
  }

  size_t nodes_ = 0;
  std::string why_;
};

// A device name as CDI defines it: vendor.com/class=name, from characters a
// name may hold, so it can be shown as it is.
bool isCdiDeviceName(std::string_view s) {
  constexpr size_t kMaxNameBytes = 256;
  const size_t slash = s.find('/'), eq = s.find('=');
  if (s.empty() || s.size() > kMaxNameBytes || slash == 0 || slash == std::string_view::npos ||
      eq == std::string_view::npos || eq < slash + 2 || eq + 1 == s.size())
    return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum || c == '.' || c == '-' || c == '_') continue;
    if ((i == slash && c == '/') || (i == eq && c == '=') || (i > eq && c == ':')) continue;
    return false;
  }
  return true;
}

absl::Status bad(const std::string& file, std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(cat(file, ": ", field, field.empty() ? "" : ": ", why));
}

absl::StatusOr<std::string> str(const json& o, const char* key, const std::string& file,
                                const std::string& field, bool required) {
  auto it = o.find(key);
  if (it == o.end()) {
    if (required) return bad(file, cat(field, ".", key), "missing");
    return std::string();
  }
  if (!it->is_string())
    return bad(file, cat(field, ".", key), cat("expected a string, got ", shownJson(*it)));
  return it->get<std::string>();
}

absl::Status edits(const json& e, const std::string& file, const std::string& field,
                   CdiEdits& out) {
  if (!e.is_object()) return bad(file, field, "expected an object");
  Adjustment& a = out.adjustment;
  for (const auto& [key, v] : e.items()) {
    const std::string f = cat(field, ".", key);
    if (key == "env") {
      if (!v.is_array()) return bad(file, f, "expected an array");
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string s = v[i].is_string() ? v[i].get<std::string>() : "";
        const auto eq = s.find('=');
        if (eq == std::string::npos || eq == 0)
          return bad(file, cat(f, "[", i, "]"), cat("expected NAME=VALUE, got ", shownJson(v[i])));
        a.env.push_back({s.substr(0, eq), s.substr(eq + 1)});
      }
    } else if (key == "deviceNodes") {
      if (!v.is_array()) return bad(file, f, "expected an array");
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string df = cat(f, "[", i, "]");
        if (!v[i].is_object()) return bad(file, df, "expected an object");
        auto path = str(v[i], "path", file, df, true);
        if (!path.ok()) return path.status();
        auto host = str(v[i], "hostPath", file, df, false);
        if (!host.ok()) return host.status();
        auto perms = str(v[i], "permissions", file, df, false);
        if (!perms.ok()) return perms.status();
        if (path->empty() || (*path)[0] != '/')
          return bad(file, df + ".path", "expected an absolute path");
        a.devices.push_back(
            {*path, host->empty() ? *path : *host, perms->empty() ? "rwm" : *perms});
      }
    } else if (key == "mounts") {
      if (!v.is_array()) return bad(file, f, "expected an array");
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string mf = cat(f, "[", i, "]");
        if (!v[i].is_object()) return bad(file, mf, "expected an object");
        auto host = str(v[i], "hostPath", file, mf, true);
        if (!host.ok()) return host.status();
        auto container = str(v[i], "containerPath", file, mf, true);
        if (!container.ok()) return container.status();
        bool ro = false;
        if (auto opts = v[i].find("options"); opts != v[i].end() && opts->is_array()) {
          for (const auto& o : *opts) ro = ro || o == "ro";
        }
        a.mounts.push_back({*container, *host, ro, 0});
      }
    } else if (key == "hooks") {
      if (!v.is_array()) return bad(file, f, "expected an array");
      for (size_t i = 0; i < v.size(); ++i) {
        const json& h = v[i];
        if (!h.is_object()) return bad(file, cat(f, "[", i, "]"), "expected an object");
        // Shown in a log line and an annotation: printable text, cut short.
        auto text = [&](const char* key) {
          auto it = h.find(key);
          if (it == h.end() || !it->is_string()) return std::string("?");
          const std::string& t = it->get_ref<const std::string&>();
          const bool plain = t.size() <= 256 && std::all_of(t.begin(), t.end(), [](char c) {
                               return c > 0x20 && c < 0x7f;
                             });
          return plain ? t : quote(t);
        };
        out.unsupported.push_back(cat("hook ", text("hookName"), " ", text("path")));
      }
    } else if (!v.is_null()) {
      out.unsupported.push_back(key);  // intelRdt, additionalGIDs, ...
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status parseCdiSpec(const std::string& file, const std::string& text, bool yaml,
                          std::string* kind, std::map<std::string, CdiEdits>* devices,
                          CdiEdits* global) {
  if (text.size() > kMaxCdiSpecBytes)
    return bad(file, "", cat(text.size(), " bytes, more than the ", kMaxCdiSpecBytes, " allowed"));
  json spec;
  if (yaml) {
    try {
      // yaml-cpp guards its own recursion (a depth of 2000 at most).
      auto converted = YamlConverter().convert(YAML::Load(text));
      if (!converted.ok()) return bad(file, "", sv(converted.status().message()));
      spec = std::move(*converted);
    } catch (const YAML::Exception& e) {
      return bad(file, "", cat("not valid YAML: ", quote(e.what(), 200)));
    }
  } else {
    auto parsed = parseJsonBounded(text, kMaxCdiSpecBytes, kMaxSpecNesting);
    if (!parsed.ok()) return bad(file, "", sv(parsed.status().message()));
    spec = std::move(*parsed);
  }
  if (!spec.is_object()) return bad(file, "", "expected a CDI spec object");
  auto k = str(spec, "kind", file, "", true);
  if (!k.ok()) return k.status();
  const auto slash = k->find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == k->size())
    return bad(file, "kind", cat("expected vendor.com/class, got ", quote(*k)));
  *kind = *k;
  if (auto v = str(spec, "cdiVersion", file, "", true); !v.ok()) return v.status();
  if (auto g = spec.find("containerEdits"); g != spec.end()) {
    if (auto s = edits(*g, file, "containerEdits", *global); !s.ok()) return s;
  }
  auto list = spec.find("devices");
  if (list == spec.end() || !list->is_array()) return bad(file, "devices", "expected an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string f = cat("devices[", i, "]");
    const json& d = (*list)[i];
    if (!d.is_object()) return bad(file, f, "expected an object");
    auto name = str(d, "name", file, f, true);
    if (!name.ok()) return name.status();
    CdiEdits e;
    if (auto ce = d.find("containerEdits"); ce != d.end()) {
      if (auto s = edits(*ce, file, f + ".containerEdits", e); !s.ok()) return s;
    }
    (*devices)[*name] = std::move(e);
  }
  return absl::OkStatus();
}

CdiRegistry::CdiRegistry(std::vector<std::string> dirs, Env& env)
    : dirs_(std::move(dirs)), env_(&env) {}

void CdiRegistry::refreshLocked() {
  namespace fs = std::filesystem;
  std::vector<std::string> order, unread;
  std::map<std::string, Spec> next;
  size_t bytes = 0;   // of the specs read, every directory's
  bool full = false;  // kMaxCdiSpecsBytes reached: nothing more is used
  for (size_t d = 0; d < dirs_.size() && !full; ++d) {
    const std::string& dir = dirs_[d];
    // A missing or unreadable directory has no specs (CDI's own rule).
    auto listed = env_->listDirectoryFirst(dir, kMaxCdiDirEntries);
    if (!listed.ok()) continue;
    if (listed->total > listed->entries.size()) {
      unread.push_back(cat(dir, ": ", listed->total, " entries; only the first ", kMaxCdiDirEntries,
                           " by name are looked at"));
    }
    size_t files = 0;
    for (const DirEntry& e : listed->entries) {  // sorted by name
      const std::string ext = fs::path(e.name).extension().string();
      if (ext != ".json" && ext != ".yaml" && ext != ".yml") continue;
      if (e.mtime_ns < 0) continue;  // gone, or a dangling link
      const std::string f = (fs::path(dir) / e.name).string();
      if (++files > kMaxCdiSpecFiles) {
        unread.push_back(cat(dir, ": more than ", kMaxCdiSpecFiles, " spec files; ",
                             quote(e.name, 200), " and the ones after it by name are not read"));
        break;
      }
      const int64_t mtime = e.mtime_ns;
      Spec spec;
      if (auto old = specs_.find(f); old != specs_.end() && old->second.mtime_ns == mtime) {
        spec = std::move(old->second);
      } else {
        spec.mtime_ns = mtime;
        // A spec dir may hold links to specs kept elsewhere; what they lead
        // to must be a regular file (a FIFO would hang every CDI call).
        auto text = env_->readFile(f, kMaxCdiSpecBytes, FileLinks::kFollow);
        if (text.ok()) spec.bytes = text->size();
        const bool yaml = ext != ".json";
        absl::Status s =
            text.ok() ? parseCdiSpec(f, *text, yaml, &spec.kind, &spec.devices, &spec.global)
                      : absl::InvalidArgumentError(cat(f, ": ", sv(text.status().message())));
        if (!s.ok()) {
          spec.error = std::string(s.message());
          spec.devices.clear();
        }
      }
      if (bytes + spec.bytes > kMaxCdiSpecsBytes) {
        unread.push_back(cat(quote(f, 300), ": the specs before it hold ", bytes,
                             " bytes; with its ", spec.bytes, " they would pass ",
                             kMaxCdiSpecsBytes, ": it and the specs after it are not used"));
        full = true;
        break;
      }
      bytes += spec.bytes;
      order.push_back(f);
      next[f] = std::move(spec);
    }
  }
  specs_ = std::move(next);
  order_ = std::move(order);
  unread_ = std::move(unread);
}

std::vector<absl::StatusOr<CdiEdits>> CdiRegistry::resolve(const std::vector<std::string>& names,
                                                           std::vector<std::string>* errors) {
  MutexLock lock(mu_);
  refreshLocked();  // once for all the container's devices
  if (errors) {
    for (const std::string& path : order_) {
      if (!specs_.at(path).error.empty()) errors->push_back(specs_.at(path).error);
    }
    errors->insert(errors->end(), unread_.begin(), unread_.end());
  }
  std::vector<absl::StatusOr<CdiEdits>> out;
  for (const std::string& name : names) {
    const auto eq = name.find('=');
    const std::string kind = eq == std::string::npos ? name : name.substr(0, eq);
    const std::string device = eq == std::string::npos ? "" : name.substr(eq + 1);
    const Spec* found = nullptr;
    for (const std::string& path : order_) {  // a later file (and directory) wins
      const Spec& s = specs_.at(path);
      if (s.error.empty() && s.kind == kind && s.devices.count(device)) found = &s;
    }
    if (found == nullptr) {
      out.push_back(absl::NotFoundError(cat("no CDI spec defines ", name)));
      continue;
    }
    CdiEdits e = found->devices.at(device);
    // The spec's global edits apply with each of its devices.
    const Adjustment& g = found->global.adjustment;
    e.adjustment.env.insert(e.adjustment.env.end(), g.env.begin(), g.env.end());
    e.adjustment.devices.insert(e.adjustment.devices.end(), g.devices.begin(), g.devices.end());
    e.adjustment.mounts.insert(e.adjustment.mounts.end(), g.mounts.begin(), g.mounts.end());
    e.unsupported.insert(e.unsupported.end(), found->global.unsupported.begin(),
                         found->global.unsupported.end());
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

class CdiHook final : public Hook {
 public:
  CdiHook(std::string name, std::vector<std::string> dirs, bool apply, bool reject)
      : name_(std::move(name)),
        registry_(std::move(dirs)),
        apply_(apply),
        reject_(reject),
        log_(logger("hook." + name_)) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod m, Phase p) const override {
    return apply_ && m == LifecycleMethod::kCreateContainer && p == Phase::kPre;
  }

  static std::string whoOf(const HookInput& in) {
    const auto& c = in.container->requested();
    return cat("container ", c.metadata().name(), in.pod ? " of pod " : "",
               in.pod ? cat(in.pod->config().metadata().namespace_(), "/",
                            in.pod->config().metadata().name())
                      : std::string());
  }

  HookDecision run(const HookInput& in) override {
    if (!in.container) return HookDecision::proceed();
    const auto& c = in.container->requested();
    std::vector<std::string> names;
    for (const auto& d : c.cdi_devices()) names.push_back(d.name());
    for (const auto& [k, v] : c.annotations()) {
      if (k.rfind("cdi.k8s.io/", 0) != 0) continue;
      std::stringstream list(v);
      for (std::string n; std::getline(list, n, ',');) {
        if (!n.empty()) names.push_back(n);
      }
    }
    if (names.empty()) return HookDecision::proceed();
    for (const std::string& n : names) {
      // A name goes into messages and a lookup; the pod spec can hold anything.
      if (!isCdiDeviceName(n)) {
        return HookDecision::reject(
            absl::InvalidArgumentError(cat(whoOf(in), ": CDI device ", quote(n),
                                           ": expected a name such as vendor.com/class=name")));
      }
    }
    if (names.size() > kMaxDevicesPerContainer) {
      return HookDecision::reject(absl::InvalidArgumentError(
          cat(whoOf(in), ": ", names.size(), " CDI devices, more than ", kMaxDevicesPerContainer)));
    }
    const std::string who = whoOf(in);
    MergedAdjustment merged;
    std::vector<std::string> unsupported, errors;
    std::vector<absl::StatusOr<CdiEdits>> resolved = registry_.resolve(names, &errors);
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& n = names[i];
      const absl::StatusOr<CdiEdits>& e = resolved[i];
      if (!e.ok()) {
        for (const auto& err : errors) log_->error("CDI spec unusable: {}", err);
        return HookDecision::reject(absl::FailedPreconditionError(
            cat(who, ": CDI device ", n, ": ", sv(e.status().message()))));
      }
      // Two devices may share edits (a control node); same values are no conflict.
      if (auto s = merged.add(n, e->adjustment); !s.ok())
        return HookDecision::reject(absl::FailedPreconditionError(cat(who, ": ", sv(s.message()))));
      for (const auto& u : e->unsupported) unsupported.push_back(cat(n, ": ", u));
    }
    Adjustment a = merged.result();
    if (!unsupported.empty()) {
      std::string list;
      for (const auto& u : unsupported) list += cat(list.empty() ? "" : "; ", u);
      const std::string why = cat(who, ": CDI edits CRI cannot carry: ", list);
      if (reject_) return HookDecision::reject(absl::FailedPreconditionError(why));
      log_->warn(
          "{}; applied the rest (set mode = \"runtime\" to let a CDI-aware runtime do it all)",
          why);
      a.annotations[std::string(kCdiUnsupportedAnnotation)] = list;
    }
    return HookDecision::proceed(std::move(a));
  }

 private:
  std::string name_;
  CdiRegistry registry_;
  bool apply_, reject_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeCdiHook(const std::string& name,
                                                  const std::string& settings_json) {
  auto r = HookSettingsReader::parse(name, settings_json);
  if (!r.ok()) return r.status();
  if (auto s = r->checkKnown(configKeyNames("hook.settings", "cdi")); !s.ok()) return s;
  std::vector<std::string> dirs = {"/etc/cdi", "/var/run/cdi"};
  if (r->get("spec_dirs")) {
    auto list = r->stringList("spec_dirs");
    if (!list.ok()) return list.status();
    dirs = *list;
  }
  auto mode = r->oneOf("mode", {"apply", "runtime"});
  if (!mode.ok()) return mode.status();
  auto unsupported = r->oneOf("on_unsupported", {"annotate", "reject"});
  if (!unsupported.ok()) return unsupported.status();
  const bool apply = *mode == "apply", reject = *unsupported == "reject";
  return std::make_shared<CdiHook>(name, std::move(dirs), apply, reject);
}

}  // namespace crihook
