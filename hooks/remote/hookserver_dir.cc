#include "hookserver_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config.h"
#include "remote_hooks.h"
#include "text.h"

namespace crihook {

absl::StatusOr<HookServerRegistration> parseHookServerFile(const std::string& file,
                                                           const std::string& text) {
  auto bad = [&](std::string_view key, std::string_view why) {
    return absl::InvalidArgumentError(
        cat("hook server registration ", file, ": ", key, key.empty() ? "" : ": ", why));
  };
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return bad("", "not valid JSON");
  if (!json.is_object()) return bad("", "expected a JSON object");
  HookServerRegistration r;
  r.file = file;
  r.name = cat("hookserver/", file.substr(0, file.rfind(".json")));
  r.text = text;
  for (const auto& [key, value] : json.items()) {
    if (key != "remote-endpoint" && key != "failure-policy" && key != "runtime-hooks")
      return bad(key, "unknown key (expected remote-endpoint, failure-policy, runtime-hooks)");
  }
  auto endpoint = json.find("remote-endpoint");
  if (endpoint == json.end() || !endpoint->is_string())
    return bad("remote-endpoint", "expected the hook server's Unix socket path");
  auto path = unixSocketPath(endpoint->get<std::string>());
  if (!path.ok()) return bad("remote-endpoint", sv(path.status().message()));
  r.socket_path = *path;
  if (auto policy = json.find("failure-policy"); policy != json.end()) {
    if (*policy == "Fail") {
      r.ignore_failures = false;
    } else if (*policy != "Ignore") {
      return bad("failure-policy", cat("expected \"Fail\" or \"Ignore\", got ", policy->dump()));
    }
  }
  auto hooks = json.find("runtime-hooks");
  if (hooks == json.end() || !hooks->is_array() || hooks->empty())
    return bad("runtime-hooks", "expected a non-empty array of hook names");
  for (size_t i = 0; i < hooks->size(); ++i) {
    const auto& h = (*hooks)[i];
    if (!h.is_string()) return bad(cat("runtime-hooks[", i, "]"), "expected a string");
    auto stage = koordinatorStage(h.get<std::string>());
    if (!stage.ok()) return bad(cat("runtime-hooks[", i, "]"), sv(stage.status().message()));
    r.stages.push_back(*stage);
  }
  return r;
}

std::vector<HookServerFile> readHookServerDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json" && e.path().filename().string()[0] != '.')
      files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<HookServerFile> out;
  for (const auto& f : files) {
    std::ifstream in(fs::path(dir) / f);
    if (!in) {
      out.push_back(
          {f, absl::InvalidArgumentError(cat("hook server registration ", f,
                                             ": cannot be read: ", std::strerror(errno)))});
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    out.push_back({f, parseHookServerFile(f, text.str())});
  }
  return out;
}

}  // namespace crihook
