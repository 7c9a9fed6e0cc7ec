#include "hooks/builtin/settings.h"

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "config/config.h"

namespace crihook {

absl::StatusOr<HookSettingsReader> HookSettingsReader::parse(const std::string& name,
                                                             const std::string& json) {
  HookSettingsReader r;
  r.name_ = name;
  // Built by config.cc from the config file (itself bounded), but parsed
  // within the same bounds as any JSON: a table nested deeper than
  // kMaxJsonNesting is refused here, not deep in a recursive walk.
  auto parsed = parseJsonBounded(json, kMaxConfigBytes);
  if (!parsed.ok())
    return absl::InvalidArgumentError(
        cat("hook ", name, ": settings: ", sv(parsed.status().message())));
  r.json_ = std::move(*parsed);
  if (!r.json_.is_object()) {
    return absl::InvalidArgumentError(cat("hook ", name, ": settings: expected a table"));
  }
  return r;
}

absl::Status HookSettingsReader::error(std::string_view key, std::string_view why) const {
  return absl::InvalidArgumentError(cat("hook ", name_, ": settings.", key, ": ", why));
}

absl::Status HookSettingsReader::checkKnown(const std::vector<std::string_view>& known) const {
  for (const auto& [key, value] : json_.items()) {
    bool ok = false;
    for (auto k : known) ok = ok || k == key;
    if (!ok) return error(key, "unknown setting");
  }
  return absl::OkStatus();
}

const nlohmann::json* HookSettingsReader::get(std::string_view key) const {
  auto it = json_.find(std::string(key));
  return it == json_.end() ? nullptr : &*it;
}

absl::Status HookSettingsReader::absolutePath(std::string_view key, std::string& out) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string() || v->get<std::string>().empty() || v->get<std::string>()[0] != '/')
    return error(key, cat("expected an absolute path, got ", shownJson(*v)));
  out = v->get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<std::chrono::milliseconds> positiveDuration(const nlohmann::json& v) {
  if (!v.is_string())
    return absl::InvalidArgumentError(
        cat("expected a duration such as \"2s\", got ", shownJson(v)));
  auto d = parseDuration(v.get<std::string>());
  if (!d.ok()) return d.status();
  if (d->count() <= 0) return absl::InvalidArgumentError("must be more than 0");
  return *d;
}

absl::Status HookSettingsReader::duration(std::string_view key,
                                          std::chrono::milliseconds& out) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return absl::OkStatus();
  auto d = positiveDuration(*v);
  if (!d.ok()) return error(key, sv(d.status().message()));
  out = *d;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> HookSettingsReader::stringList(
    std::string_view key) const {
  std::vector<std::string> out;
  const nlohmann::json* v = get(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return error(key, cat("expected an array of strings, got ", shownJson(*v)));
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string())
      return error(cat(key, "[", i, "]"), cat("expected a string, got ", shownJson((*v)[i])));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

absl::StatusOr<std::string> HookSettingsReader::oneOf(
    std::string_view key, const std::vector<std::string_view>& allowed) const {
  const nlohmann::json* v = get(key);
  if (v == nullptr) return std::string(allowed.front());
  for (std::string_view a : allowed) {
    if (v->is_string() && v->get<std::string>() == a) return std::string(a);
  }
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    list += cat(i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ", "\"", allowed[i], "\"");
  }
  return error(key, cat("expected ", list, ", got ", shownJson(*v)));
}

absl::StatusOr<std::map<std::string, std::string>> HookSettingsReader::stringMap(
    std::string_view key) const {
  std::map<std::string, std::string> out;
  const nlohmann::json* v = get(key);
  if (v == nullptr) return out;
  if (!v->is_object()) return error(key, cat("expected a table of strings, got ", shownJson(*v)));
  for (const auto& [k, x] : v->items()) {
    if (!x.is_string())
      return error(cat(key, ".", k), cat("expected a string, got ", shownJson(x)));
    out[k] = x.get<std::string>();
  }
  return out;
}

absl::StatusOr<std::vector<StageId>> HookSettingsReader::stages(
    std::string_view key, std::vector<StageId> fallback,
    const std::vector<StageId>& allowed) const {
  if (get(key) == nullptr) return fallback;
  auto names = stringList(key);
  if (!names.ok()) return names.status();
  std::vector<StageId> out;
  for (size_t i = 0; i < names->size(); ++i) {
    auto stage = parseStage((*names)[i]);
    if (!stage.ok()) return error(cat(key, "[", i, "]"), sv(stage.status().message()));
    if (!allowed.empty()) {
      bool ok = false;
      std::string list;
      for (const StageId& a : allowed) {
        ok = ok || (a.method == stage->method && a.phase == stage->phase);
        list += cat(list.empty() ? "" : ", ", stageName(a.method, a.phase));
      }
      if (!ok) {
        return error(cat(key, "[", i, "]"),
                     cat("this hook cannot act on ", (*names)[i], "; it can on ", list));
      }
    }
    out.push_back(*stage);
  }
  return out;
}

}  // namespace crihook
