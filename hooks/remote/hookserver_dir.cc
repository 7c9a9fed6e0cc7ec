#include "hooks/remote/hookserver_dir.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "config/config.h"
#include "hooks/remote/remote_hooks.h"

namespace crihook {
namespace {

// A registration is {"remote-endpoint": ..., "runtime-hooks": [...]}: 2
// levels.
constexpr int kMaxHookServerFileNesting = 8;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What a registration's parts report: the InvalidArgument that refuses the
// file, and the warnings of what was ignored.
struct Report {
  const std::string& file;
  std::vector<std::string>& warnings;

  absl::Status bad(std::string_view key, std::string_view why) const {
    return absl::InvalidArgumentError(
        cat("hook server registration ", file, ": ", key, key.empty() ? "" : ": ", why));
  }
  void warn(std::string_view key, std::string_view why) const {
    warnings.push_back(cat(key, ": ", why));
  }
};

// The keys koord-runtime-proxy reads, in the order of Keys' members.
constexpr const char* kKeys[] = {"remote-endpoint", "failure-policy", "runtime-hooks"};
struct Keys {
  // Each key's value; null when absent or JSON null (which leaves a Go
  // field as it was: absent).
  const nlohmann::json* endpoint = nullptr;
  const nlohmann::json* failure_policy = nullptr;
  const nlohmann::json* runtime_hooks = nullptr;
};

// koord-runtime-proxy reads these files with Go's json.Unmarshal: keys match
// case-insensitively (an exact match first), and other keys are ignored.
// crihook does the same and says which it ignored.
Keys findKeys(const nlohmann::json& json, const Report& report) {
  const nlohmann::json* values[3] = {nullptr, nullptr, nullptr};
  bool exact[3] = {false, false, false};
  for (const auto& [key, value] : json.items()) {
    bool known = false;
    for (int i = 0; i < 3; ++i) {
      if (lower(key) != kKeys[i]) continue;
      known = true;
      const bool is_exact = key == kKeys[i];
      if (values[i] == nullptr || is_exact || !exact[i]) {
        values[i] = &value;
        exact[i] = exact[i] || is_exact;
      }
    }
    if (!known)
      report.warn(quote(key),
                  "unknown key, ignored (known: remote-endpoint, failure-policy, runtime-hooks)");
  }
  auto present = [&](int i) {
    return values[i] != nullptr && !values[i]->is_null() ? values[i] : nullptr;
  };
  return {present(0), present(1), present(2)};
}

absl::Status takeFailurePolicy(const nlohmann::json& value, HookServerRegistration& r,
                               const Report& report) {
  if (!value.is_string()) return report.bad("failure-policy", "expected a string");
  const std::string policy = value.get<std::string>();
  // koord-runtime-proxy fails a call only under exactly "Fail"; anything
  // else, "fail" included, lets the call go on.
  r.ignore_failures = policy != "Fail";
  if (policy != "Fail" && policy != "Ignore" && !policy.empty()) {
    report.warn("failure-policy",
                cat(quote(policy), " is not \"Fail\" (case matters), so failures are ignored"));
  }
  return absl::OkStatus();
}

absl::Status takeRuntimeHooks(const nlohmann::json& hooks, HookServerRegistration& r,
                              const Report& report) {
  if (!hooks.is_array()) return report.bad("runtime-hooks", "expected an array of hook names");
  for (size_t i = 0; i < hooks.size(); ++i) {
    if (!hooks[i].is_string())
      return report.bad(cat("runtime-hooks[", i, "]"), "expected a string");
    const std::string name = hooks[i].get<std::string>();
    auto stage = koordinatorStage(name);
    if (stage.ok()) {
      if (std::none_of(r.stages.begin(), r.stages.end(), [&](const StageId& s) {
            return s.method == stage->method && s.phase == stage->phase;
          }))
        r.stages.push_back(*stage);
    } else if (isKoordinatorStageWithoutRpc(name)) {
      r.uncallable.push_back(name);
    } else {
      report.warn(cat("runtime-hooks[", i, "]"), cat("unknown hook ", quote(name), ", ignored"));
    }
  }
  return absl::OkStatus();
}

// The warnings of a registration whose hooks crihook does not all call.
void warnUncalled(const HookServerRegistration& r, const Report& report) {
  if (!r.uncallable.empty()) {
    std::string names;
    for (const auto& n : r.uncallable) names += cat(names.empty() ? "" : ", ", n);
    report.warn("runtime-hooks",
                cat(names, ": Koordinator's RuntimeHookService has no call for ",
                    r.uncallable.size() == 1 ? "this stage" : "these stages",
                    " (koordlet serves it through NRI); crihook does not call it"));
  }
  if (r.stages.empty())
    report.warn("runtime-hooks", "no hook crihook can call; the server is never called");
}

}  // namespace

absl::StatusOr<HookServerRegistration> parseHookServerFile(const std::string& file,
                                                           const std::string& text) {
  HookServerRegistration r;
  const Report report{file, r.warnings};
  auto parsed = parseJsonBounded(text, kMaxRegistrationBytes, kMaxHookServerFileNesting);
  if (!parsed.ok()) return report.bad("", sv(parsed.status().message()));
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) return report.bad("", "expected a JSON object");
  r.file = file;
  r.name = cat("hookserver/", file.substr(0, file.rfind(".json")));
  r.text = text;
  const Keys keys = findKeys(json, report);

  if (keys.endpoint == nullptr || !keys.endpoint->is_string())
    return report.bad("remote-endpoint", "expected the hook server's Unix socket path");
  auto path = unixSocketPath(keys.endpoint->get<std::string>());
  if (!path.ok()) return report.bad("remote-endpoint", sv(path.status().message()));
  r.socket_path = *path;
  if (keys.failure_policy) {
    if (auto s = takeFailurePolicy(*keys.failure_policy, r, report); !s.ok()) return s;
  }
  if (keys.runtime_hooks) {
    if (auto s = takeRuntimeHooks(*keys.runtime_hooks, r, report); !s.ok()) return s;
  }
  warnUncalled(r, report);
  return r;
}

namespace {

// What the bounds left out, for the log: how many, the first and the last
// by name, and the bound that left them.
std::string skippedLine(const std::string& dir, size_t total, const std::vector<std::string>& left,
                        size_t unlisted, const std::string& why) {
  if (left.empty() && unlisted == 0) return "";
  std::string line = cat("hook server registrations in ", dir, ": ", total,
                         " entries; left unread past ", why, ": ", left.size() + unlisted);
  if (!left.empty()) {
    line += cat(" (", quote(left.front()),
                left.size() > 1 ? cat(" to ", quote(left.back())) : std::string(), ")");
  }
  if (unlisted > 0) line += cat(", of them ", unlisted, " not listed");
  return line;
}

}  // namespace

HookServerDir readHookServerDir(const std::string& dir, Env& env) {
  namespace fs = std::filesystem;
  HookServerDir out;
  std::vector<std::string> files;
  size_t total = 0, unlisted = 0;
  if (auto listed = env.listDirectoryFirst(dir, kMaxHookServerDirEntries); listed.ok()) {
    total = listed->total;
    unlisted = listed->total - listed->entries.size();
    for (const DirEntry& e : listed->entries) {  // sorted by name
      if (fs::path(e.name).extension() == ".json" && e.name[0] != '.') files.push_back(e.name);
    }
  }
  size_t bytes = 0;
  std::vector<std::string> left;
  std::string why = unlisted > 0 ? cat("the first ", kMaxHookServerDirEntries, " entries listed")
                                 : std::string();
  for (const auto& f : files) {
    if (!left.empty() || out.files.size() == kMaxHookServerFiles) {
      if (left.empty()) why = cat(kMaxHookServerFiles, " registrations");
      left.push_back(f);
      continue;
    }
    // A link to a regular file is followed (a registration may be managed
    // elsewhere); a FIFO, a device or a huge file is refused unread.
    auto text =
        env.readFile((fs::path(dir) / f).string(), kMaxRegistrationBytes, FileLinks::kFollow);
    if (!text.ok()) {
      out.files.push_back({f, absl::InvalidArgumentError(cat("hook server registration ", f, ": ",
                                                             sv(text.status().message())))});
      continue;
    }
    if (bytes + text->size() > kMaxHookServerDirBytes) {
      why = cat(kMaxHookServerDirBytes, " bytes of registrations");
      left.push_back(f);
      continue;
    }
    bytes += text->size();
    out.files.push_back({f, parseHookServerFile(f, *text)});
  }
  out.skipped = skippedLine(dir, total, left, unlisted, why);
  return out;
}

}  // namespace crihook
