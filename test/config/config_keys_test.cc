// The table of keys (config/config_keys.h) against the parser and the
// built-in hooks: every row is read, with the row's type, default and
// bounds. The parser takes the keys it knows from the table, so a key the
// table lacks is refused; these tests catch the other way round, and a
// default or a bound written twice.

#include "config/config_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/text.h"
#include "config/config.h"
#include "hooks/mount_policy.h"
#include "hooks/registry.h"

namespace crihook {
namespace {

using ::testing::HasSubstr;

// A value no row of `type` takes.
std::string wrongValue(KeyType type) {
  switch (type) {
    case KeyType::kInteger:
    case KeyType::kBool:
      return "\"x\"";
    default:
      return "12345";
  }
}

// What a [[hook]] entry needs besides `key` to parse.
std::string hookContext(std::string_view key) {
  std::string out = key == "name" ? "" : "name = \"h\"\n";
  if (key == "module") return out;
  if (key == "isolation") return out + "module = \"/m.so\"\n";
  if (key == "endpoint" || key == "stages") {
    if (key != "endpoint") out += "endpoint = \"unix:///h.sock\"\n";
    if (key != "stages") out += "stages = [\"PreCreateContainer\"]\n";
    return out;
  }
  return key == "builtin" ? out : out + "builtin = \"noop\"\n";
}

// A config file holding what `k` needs besides (its section's header, a
// [[hook]] entry's other keys) but not `k`.
std::string contextOf(const ConfigKey& k) {
  if (k.section == "hook") return cat("[[hook]]\n", hookContext(k.name));
  // The buffers hold one message at least: at their largest, every message size can be tried.
  const std::string buffers =
      k.name == "max_message_bytes"
          ? "max_connection_buffered_bytes = 1099511627776\nmax_buffered_bytes = 1099511627776\n"
          : "";
  return cat("[", k.section, "]\n", buffers);
}

// The same file setting `k` to `value` (TOML).
std::string withKey(const ConfigKey& k, const std::string& value) {
  return cat(contextOf(k), k.name, " = ", value, "\n");
}

// How the parser names the key in a message.
std::string keyPath(const ConfigKey& k) {
  if (k.section != "hook") return cat(k.section, ".", k.name);
  return k.name == "name" ? "hook[0].name" : cat("hook[h].", k.name);
}

std::vector<const ConfigKey*> fileKeys() {
  std::vector<const ConfigKey*> keys;
  for (const ConfigKey& k : configKeys()) {
    if (k.builtin.empty()) keys.push_back(&k);
  }
  return keys;
}

TEST(ConfigKeys, EveryKeyOfTheTableIsReadWithItsType) {
  for (const ConfigKey* k : fileKeys()) {
    const std::string text = withKey(*k, wrongValue(k->type));
    auto c = parseConfig(text, "t.toml");
    ASSERT_FALSE(c.ok()) << keyPath(*k) << " is in the table, but the parser took " << text;
    EXPECT_THAT(c.status().message(), HasSubstr(cat("config t.toml: ", keyPath(*k), ": expected")))
        << text;
  }
}

TEST(ConfigKeys, EveryDefaultOfTheTableIsTheParsersOwn) {
  for (const ConfigKey* k : fileKeys()) {
    if (k->value == nullptr) continue;
    const std::string def = defaultText(*k);
    auto set = parseConfig(withKey(*k, def), "t.toml");
    ASSERT_TRUE(set.ok()) << keyPath(*k) << " = " << def << ": " << set.status();
    auto unset = parseConfig(contextOf(*k), "t.toml");
    ASSERT_TRUE(unset.ok()) << unset.status();
    // A timeout given is kept in NRI mode, the default is not: the same value otherwise.
    set->hookserver_timeout_set = false;
    for (HookConfig& h : set->hooks) h.timeout_set = false;
    EXPECT_TRUE(*set == *unset) << keyPath(*k) << " = " << def
                                << " (the table's default) is not the parser's default";
    EXPECT_EQ(k->value(*set), def) << keyPath(*k) << ": the row shows another member";
  }
}

// A value of the row's type at `n` (a count for a list).
std::string valueAt(const ConfigKey& k, int64_t n) {
  if (k.type == KeyType::kDuration) return tomlString(cat(n, "ms"));
  if (k.type != KeyType::kPathList) return cat(n);
  std::vector<std::string> paths;
  for (int64_t i = 0; i < n; ++i) paths.push_back(cat("/p", i));
  return tomlStringList(paths);
}

TEST(ConfigKeys, TheBoundsOfTheTableAreTheParsers) {
  for (const ConfigKey* k : fileKeys()) {
    if (!k->ranged()) continue;
    std::vector<std::pair<int64_t, bool>> probes = {{k->lo, true}};
    if (k->lo > 0 || k->type == KeyType::kInteger) probes.push_back({k->lo - 1, false});
    if (k->hi != kNoUpperBound) probes.insert(probes.end(), {{k->hi, true}, {k->hi + 1, false}});
    for (auto [n, ok] : probes) {
      const std::string text = withKey(*k, valueAt(*k, n));
      auto c = parseConfig(text, "t.toml");
      EXPECT_EQ(c.ok(), ok) << text << (c.ok() ? "" : c.status().message());
      if (!ok && !c.ok()) {
        EXPECT_THAT(c.status().message(), HasSubstr(keyPath(*k)));
      }
    }
  }
}

std::vector<std::string> valuesOf(const ConfigKey& k) {
  std::vector<std::string> out;
  std::istringstream in{std::string(k.values)};
  for (std::string v; std::getline(in, v, '|');) out.push_back(v);
  return out;
}

TEST(ConfigKeys, TheValuesOfTheTableAreTheParsers) {
  for (const ConfigKey* k : fileKeys()) {
    // builtin's values are the registry's (below); the parser takes any name.
    if (k->values.empty() || k->name == "builtin") continue;
    for (const std::string& v : valuesOf(*k)) {
      auto c = parseConfig(withKey(*k, tomlString(v)), "t.toml");
      EXPECT_TRUE(c.ok()) << keyPath(*k) << " = \"" << v << "\": " << c.status();
    }
    auto c = parseConfig(withKey(*k, "\"not-a-value\""), "t.toml");
    ASSERT_FALSE(c.ok()) << keyPath(*k) << " took a value the table does not list";
    EXPECT_THAT(c.status().message(), HasSubstr(keyPath(*k)));
  }
}

TEST(ConfigKeys, EveryBuiltInHookHasItsSettingsInTheTable) {
  const ConfigKey* builtin = findConfigKey("hook", "builtin");
  ASSERT_NE(builtin, nullptr);
  std::vector<std::string> values = valuesOf(*builtin);
  std::sort(values.begin(), values.end());
  EXPECT_EQ(values, builtinHooks().types());
  std::set<std::string> sections;
  for (const ConfigSection& s : configSections()) {
    if (!s.builtin.empty()) sections.insert(std::string(s.builtin));
  }
  EXPECT_EQ(sections, std::set<std::string>(values.begin(), values.end()));
}

// A TOML value as JSON, as config.cc hands [hook.settings] to a hook.
nlohmann::json jsonOf(const std::string& toml_value) {
  toml::table t = toml::parse(cat("v = ", toml_value));
  std::ostringstream json;
  json << toml::json_formatter{t};
  return nlohmann::json::parse(json.str())["v"];
}

// A built-in's settings as JSON: `k` set to TOML `value`, over what the
// hook needs besides (static: an adjustment that sets something), and where
// a device-lifecycle type's keys (settings.gpu) and actions
// (settings.gpu.init[0]) go. The name the hook's messages give it in `path`.
std::string settingsJson(const ConfigKey& k, const std::string& value,
                         std::string* path = nullptr) {
  nlohmann::json settings = nlohmann::json::object();
  if (k.builtin == "static") settings["adjustment"] = {{"env", {{{"key", "A"}, {"value", "b"}}}}};
  const std::string name(k.name);
  if (k.section == "hook.settings.type") {
    settings["gpu"] = {{name, jsonOf(value)}};
    if (path) *path = "settings.gpu." + name;
  } else if (k.section == "hook.settings.action") {
    nlohmann::json action = {{name, jsonOf(value)}};
    if (k.name == "timeout") action["builtin"] = "check-node";
    settings["gpu"] = {{"init", nlohmann::json::array({action})}};
    if (path) *path = "settings.gpu.init[0]." + name;
  } else {
    settings[name] = jsonOf(value);
    if (path) *path = "settings." + name;
  }
  return settings.dump();
}

TEST(ConfigKeys, EveryBuiltInSettingIsReadWithItsTypeAndTakesItsDefault) {
  const HookRegistry registry = builtinHooks();
  for (const ConfigKey& k : configKeys()) {
    if (k.builtin.empty()) continue;
    const std::string type(k.builtin);
    std::string path;
    auto wrong = registry.create(type, "h", settingsJson(k, wrongValue(k.type), &path));
    ASSERT_FALSE(wrong.ok()) << type << " " << path << " took " << wrongValue(k.type);
    EXPECT_THAT(wrong.status().message(), HasSubstr(path + ": "));
    const std::string def = defaultText(k);
    if (def.empty() || def.find('<') != std::string::npos) continue;
    auto ok = registry.create(type, "h", settingsJson(k, def));
    EXPECT_TRUE(ok.ok()) << type << " " << path << " = " << def << ": " << ok.status();
  }
}

TEST(ConfigKeys, TheMountPolicyDefaultsAreTheHooksOwn) {
  auto shown = [](auto& list) {
    return tomlStringList(std::vector<std::string>(std::begin(list), std::end(list)));
  };
  EXPECT_EQ(defaultText(*findConfigKey("security.mounts", "deny")), shown(kDefaultMountDeny));
  EXPECT_EQ(defaultText(*findConfigKey("security.mounts", "deny_rw")), shown(kDefaultMountDenyRw));
}

TEST(ConfigKeys, EveryRowIsInASectionAndSaysWhatItIs) {
  std::set<std::pair<std::string, std::string>> sections;
  for (const ConfigSection& s : configSections())
    sections.insert({std::string(s.name), std::string(s.builtin)});
  std::set<std::string> seen;
  for (const ConfigKey& k : configKeys()) {
    const std::string id = cat(k.section, "/", k.builtin, "/", k.name);
    EXPECT_TRUE(seen.insert(id).second) << id << " is in the table twice";
    EXPECT_TRUE(sections.count({std::string(k.section), std::string(k.builtin)})) << id;
    EXPECT_FALSE(k.meaning.empty()) << id;
    EXPECT_EQ(k.meaning.find('\n'), std::string_view::npos) << id;
  }
}

TEST(ConfigKeys, ValuesAreWrittenAsTheFileWritesThem) {
  EXPECT_EQ(tomlDuration(std::chrono::milliseconds(300000)), "5m");
  EXPECT_EQ(tomlDuration(std::chrono::milliseconds(10000)), "10s");
  EXPECT_EQ(tomlDuration(std::chrono::milliseconds(1500)), "1500ms");
  EXPECT_EQ(tomlDuration(std::chrono::milliseconds(0)), "0s");
  EXPECT_EQ(tomlString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(tomlStringList({"all", "x"}), "[\"all\", \"x\"]");
  EXPECT_EQ(defaultText(*findConfigKey("server", "socket_mode")), "\"0660\"");
  EXPECT_EQ(defaultText(*findConfigKey("hooks.owners", "cpuset")), "\"koordinator\"");
}

}  // namespace
}  // namespace crihook
