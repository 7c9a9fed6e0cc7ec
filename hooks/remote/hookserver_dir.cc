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

}  // namespace

absl::StatusOr<HookServerRegistration> parseHookServerFile(const std::string& file,
                                                           const std::string& text) {
  auto bad = [&](std::string_view key, std::string_view why) {
    return absl::InvalidArgumentError(
        cat("hook server registration ", file, ": ", key, key.empty() ? "" : ": ", why));
  };
  auto parsed = parseJsonBounded(text, kMaxRegistrationBytes, kMaxHookServerFileNesting);
  if (!parsed.ok()) return bad("", sv(parsed.status().message()));
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) return bad("", "expected a JSON object");
  HookServerRegistration r;
  r.file = file;
  r.name = cat("hookserver/", file.substr(0, file.rfind(".json")));
  r.text = text;
  auto warn = [&](std::string_view key, std::string_view why) {
    r.warnings.push_back(cat(key, ": ", why));
  };

  // koord-runtime-proxy reads these files with Go's json.Unmarshal: keys
  // match case-insensitively (an exact match first), and other keys are
  // ignored. crihook does the same and says which it ignored.
  static const char* const kKeys[] = {"remote-endpoint", "failure-policy", "runtime-hooks"};
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
      warn(quote(key),
           "unknown key, ignored (known: remote-endpoint, failure-policy, runtime-hooks)");
  }
  // A JSON null leaves a Go field as it was: absent.
  auto present = [&](int i) { return values[i] != nullptr && !values[i]->is_null(); };

  if (!present(0) || !values[0]->is_string())
    return bad("remote-endpoint", "expected the hook server's Unix socket path");
  auto path = unixSocketPath(values[0]->get<std::string>());
  if (!path.ok()) return bad("remote-endpoint", sv(path.status().message()));
  r.socket_path = *path;

  if (present(1)) {
    if (!values[1]->is_string()) return bad("failure-policy", "expected a string");
    const std::string policy = values[1]->get<std::string>();
    // koord-runtime-proxy fails a call only under exactly "Fail"; anything
    // else, "fail" included, lets the call go on.
    r.ignore_failures = policy != "Fail";
    if (policy != "Fail" && policy != "Ignore" && !policy.empty()) {
      warn("failure-policy",
           cat(quote(policy), " is not \"Fail\" (case matters), so failures are ignored"));
    }
  }

  if (present(2)) {
    if (!values[2]->is_array()) return bad("runtime-hooks", "expected an array of hook names");
    const nlohmann::json& hooks = *values[2];
    for (size_t i = 0; i < hooks.size(); ++i) {
      if (!hooks[i].is_string()) return bad(cat("runtime-hooks[", i, "]"), "expected a string");
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
        warn(cat("runtime-hooks[", i, "]"), cat("unknown hook ", quote(name), ", ignored"));
      }
    }
  }
  if (!r.uncallable.empty()) {
    std::string names;
    for (const auto& n : r.uncallable) names += cat(names.empty() ? "" : ", ", n);
    warn("runtime-hooks", cat(names, ": Koordinator's RuntimeHookService has no call for ",
                              r.uncallable.size() == 1 ? "this stage" : "these stages",
                              " (koordlet serves it through NRI); crihook does not call it"));
  }
  if (r.stages.empty())
    warn("runtime-hooks", "no hook crihook can call; the server is never called");
  return r;
}

std::vector<HookServerFile> readHookServerDir(const std::string& dir, Env& env) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (auto entries = env.listDirectory(dir); entries.ok()) {
    for (const DirEntry& e : *entries) {  // sorted by name
      if (fs::path(e.name).extension() == ".json" && e.name[0] != '.') files.push_back(e.name);
    }
  }
  std::vector<HookServerFile> out;
  for (const auto& f : files) {
    // A link to a regular file is followed (a registration may be managed
    // elsewhere); a FIFO, a device or a huge file is refused unread.
    auto text =
        env.readFile((fs::path(dir) / f).string(), kMaxRegistrationBytes, FileLinks::kFollow);
    if (!text.ok()) {
      out.push_back({f, absl::InvalidArgumentError(cat("hook server registration ", f, ": ",
                                                       sv(text.status().message())))});
      continue;
    }
    out.push_back({f, parseHookServerFile(f, *text)});
  }
  return out;
}

}  // namespace crihook
