#pragma once

// Every key of crihookd's configuration file, in one table: its section,
// name, type, default, bounds and meaning. The parser (config.cc) takes the
// keys it knows from here, so a key the table lacks is refused as unknown;
// the built-in hooks take their [hook.settings] keys from here too
// (HookSettingsReader::checkKnown). docs/configuration.md and the key
// reference of crihook.toml(5) are printed from it (config_reference.h), and
// test/config/config_keys_test.cc holds the parser to each row's type,
// default and bounds.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace crihook {

inline constexpr int64_t kNoUpperBound = INT64_MAX;

enum class KeyType : uint8_t {
  kString,
  kPath,  // a string holding an absolute path
  kInteger,
  kBool,
  kDuration,    // a string: digits and ms, s or m ("500ms", "10s", "5m")
  kStringList,  // an array of strings
  kPathList,    // an array of absolute paths
  kTable,       // a table of its own (its keys are rows of their own, or free)
  kTableList,   // an array of tables
};

// What a type is called in the reference ("integer", "list of strings").
std::string_view keyTypeName(KeyType type);

struct ConfigKey {
  // "server", "hooks.owners", "security.mounts"; "hook" for the keys of a
  // [[hook]] entry; "hook.settings" for a built-in hook's settings.
  std::string_view section;
  // For section "hook.settings": the built-in hook ("gpu", "device-lifecycle").
  std::string_view builtin;
  std::string_view name;
  KeyType type = KeyType::kString;
  // An integer's range, a duration's in milliseconds, or how many entries a
  // list takes; none when hi < lo; hi kNoUpperBound: at least lo.
  int64_t lo = 0, hi = -1;
  // The values a string takes, '|' between them ("proxy|nri").
  std::string_view values;
  // Bounds the range and the values cannot say ("at least max_message_bytes").
  std::string_view limits;
  // One line for people; `text` in backquotes is code.
  std::string_view meaning;
  // The key's value in a Config as TOML (`"10s"`, `2`, `["all"]`): applied
  // to Config{} it is the default the reference shows, so the default has
  // one source, the code. For a [[hook]] key, the first hook's (HookConfig{}
  // when there is none). Null where a Config does not hold the value.
  std::string (*value)(const Config& config) = nullptr;
  // The default in words where `value` is null or the build decides it
  // (module_dir); "" with a null `value`: no default (required, or empty).
  std::string_view default_text;

  bool ranged() const { return lo <= hi; }
};

// A section of the file, in the order the reference lists them, with what
// it is for.
struct ConfigSection {
  std::string_view name;   // as ConfigKey::section; "hook.settings" rows per builtin
  std::string_view title;  // "[server]", "[[hook]]", "[hook.settings] of builtin = \"gpu\""
  std::string_view builtin;
  std::string_view about;  // a paragraph; `text` in backquotes is code
};

std::span<const ConfigKey> configKeys();
std::span<const ConfigSection> configSections();

// The keys of `section` (for "hook.settings": of `builtin`), in table order.
std::vector<std::string_view> configKeyNames(std::string_view section,
                                             std::string_view builtin = "");
// The same, as "a, b, c" for a message naming the known keys.
std::string configKeyList(std::string_view section, std::string_view builtin = "");
// The top-level tables: the sections without a '.' ("server", "hook", ...).
std::vector<std::string_view> configTableNames();
// The row of a key, or null.
const ConfigKey* findConfigKey(std::string_view section, std::string_view name,
                               std::string_view builtin = "");

// The default as the reference shows it: default_text if set, else
// value(Config{}), else "".
std::string defaultText(const ConfigKey& key);

// TOML renderings, as ConfigKey::value writes them.
std::string tomlString(std::string_view s);
// "5m" when whole minutes, "10s" when whole seconds, else "1500ms".
std::string tomlDuration(std::chrono::milliseconds d);
std::string tomlStringList(const std::vector<std::string>& list);

}  // namespace crihook
