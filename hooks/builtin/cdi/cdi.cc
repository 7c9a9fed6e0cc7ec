#include "cdi.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../settings.h"
#include "logging.h"
#include "text.h"

namespace crihook {
namespace {

using nlohmann::json;

// YAML as JSON (scalars stay strings: every CDI field crihook uses is one).
json fromYaml(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = fromYaml(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& x : n) a.push_back(fromYaml(x));
      return a;
    }
    case YAML::NodeType::Scalar:
      return n.as<std::string>();
    default:
      return nullptr;
  }
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
    return bad(file, cat(field, ".", key), cat("expected a string, got ", it->dump()));
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
          return bad(file, cat(f, "[", i, "]"), cat("expected NAME=VALUE, got ", v[i].dump()));
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
      for (const auto& h : v) {
        out.unsupported.push_back(cat("hook ", h.value("hookName", std::string("?")), " ",
                                      h.value("path", std::string("?"))));
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
  json spec;
  if (yaml) {
    try {
      spec = fromYaml(YAML::Load(text));
    } catch (const YAML::Exception& e) {
      return bad(file, "", cat("not valid YAML: ", e.what()));
    }
  } else {
    spec = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (spec.is_discarded()) return bad(file, "", "not valid JSON");
  }
  if (!spec.is_object()) return bad(file, "", "expected a CDI spec object");
  auto k = str(spec, "kind", file, "", true);
  if (!k.ok()) return k.status();
  const auto slash = k->find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == k->size())
    return bad(file, "kind", cat("expected vendor.com/class, got \"", *k, "\""));
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

CdiRegistry::CdiRegistry(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

void CdiRegistry::refreshLocked() {
  namespace fs = std::filesystem;
  std::vector<std::string> order;
  std::map<std::string, Spec> next;
  for (const std::string& dir : dirs_) {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".json" || ext == ".yaml" || ext == ".yml") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      struct stat st {};
      if (::stat(f.c_str(), &st) != 0) continue;
      const int64_t mtime = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
      order.push_back(f);
      if (auto old = specs_.find(f); old != specs_.end() && old->second.mtime_ns == mtime) {
        next[f] = std::move(old->second);
        continue;
      }
      Spec spec;
      spec.mtime_ns = mtime;
      std::ifstream in(f);
      std::stringstream text;
      text << in.rdbuf();
      const bool yaml = f.size() > 5 && (f.ends_with(".yaml") || f.ends_with(".yml"));
      if (auto s = parseCdiSpec(f, text.str(), yaml, &spec.kind, &spec.devices, &spec.global);
          !s.ok()) {
        spec.error = std::string(s.message());
        spec.devices.clear();
      }
      next[f] = std::move(spec);
    }
  }
  specs_ = std::move(next);
  order_ = std::move(order);
}

std::vector<absl::StatusOr<CdiEdits>> CdiRegistry::resolve(const std::vector<std::string>& names,
                                                           std::vector<std::string>* errors) {
  std::lock_guard lock(mu_);
  refreshLocked();  // once for all the container's devices
  if (errors) {
    for (const std::string& path : order_) {
      if (!specs_.at(path).error.empty()) errors->push_back(specs_.at(path).error);
    }
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
    const std::string who = cat("container ", c.metadata().name(), in.pod ? " of pod " : "",
                                in.pod ? cat(in.pod->config().metadata().namespace_(), "/",
                                             in.pod->config().metadata().name())
                                       : std::string());
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
  if (auto s = r->checkKnown({"spec_dirs", "mode", "on_unsupported"}); !s.ok()) return s;
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
