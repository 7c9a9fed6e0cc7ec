#include "config/config_reference.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <sstream>

#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "config/config.h"
#include "config/config_keys.h"

namespace crihook {
namespace {

constexpr std::string_view kMarkdownPath = "docs/configuration.md";
constexpr std::string_view kManPath = "docs/man/crihook.toml.5.in";
constexpr std::string_view kExamplePath = "debian/examples/crihook.toml";
// A man page is a few hundred lines; the example a few dozen.
constexpr size_t kMaxDocBytes = 1u << 20;

// The page's opening: what the file is, where it lives, how a change takes
// effect; then how values are written.
constexpr std::string_view kMarkdownHead =
    R"(# Configuration: crihook.toml

crihookd reads one TOML file, named by `--config FILE` (the package's service takes it from `CRIHOOKD_OPTS` in `/etc/default/crihookd`; `/etc/crihook/crihook.toml` by convention); without one it runs on the defaults below, and its flags override the file.
The file is read once, at start-up: a change takes `systemctl restart crihookd` (SIGHUP, `systemctl reload crihookd`, only rediscovers the topology), while Koordinator's registrations in `[hooks] hookserver_dir` are watched and take effect without one.

<!-- Printed from config/config_keys.cc by `ninja -C build config-reference`: edit the table there, not this page. -->

An unknown key or a bad value stops start-up with the file, the key and the reason, e.g.
`config /etc/crihook/crihook.toml: server.workers: expected an integer in 1..64, got 0`.
Durations are strings with a unit: `ms`, `s` or `m` (`"500ms"`, `"10s"`, `"5m"`).
Paths are absolute. `debian/examples/crihook.toml` (installed as
`/usr/share/doc/crihook/examples/crihook.toml`) is an example whose every value is the default.
)";

std::string typeText(KeyType type) { return std::string(keyTypeName(type)); }

std::string rangeText(const ConfigKey& k) {
  auto show = [&](int64_t v) {
    return k.type == KeyType::kDuration ? tomlDuration(std::chrono::milliseconds(v)) : cat(v);
  };
  if (k.type == KeyType::kStringList || k.type == KeyType::kPathList)
    return cat("at most ", k.hi, " entries");
  if (k.type == KeyType::kDuration && k.lo == 1)
    return k.hi == kNoUpperBound ? "above 0" : cat("above 0, at most ", show(k.hi));
  if (k.hi == kNoUpperBound) return cat("at least ", show(k.lo));
  return cat(show(k.lo), " to ", show(k.hi));
}

// The bounds of a key in words, `code` in backquotes: its values, range and
// other limits; "" when it has none.
std::string boundsText(const ConfigKey& k) {
  std::string out;
  auto add = [&](std::string_view part) { out += cat(out.empty() ? "" : "; ", part); };
  if (!k.values.empty()) {
    std::string values;
    for (size_t at = 0; at <= k.values.size();) {
      const size_t bar = std::min(k.values.find('|', at), k.values.size());
      values += cat(values.empty() ? "" : ", ", "`\"", k.values.substr(at, bar - at), "\"`");
      at = bar + 1;
    }
    add(cat("one of ", values));
  }
  if (k.ranged()) add(rangeText(k));
  if (!k.limits.empty()) add(k.limits);
  return out;
}

std::string markdownCell(std::string_view text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string markdownRow(const ConfigKey& k) {
  const std::string def = defaultText(k);
  return cat("| `", k.name, "` | ", typeText(k.type), " | ",
             def.empty() ? "none" : cat("`", markdownCell(def), "`"), " | ",
             markdownCell(boundsText(k)), " | ", markdownCell(k.meaning), " |\n");
}

// The first letter in capitals, unless the first word is a name spelt
// with capitals of its own ("gRPC's").
std::string capitalized(std::string_view text) {
  std::string out(text);
  const std::string_view word = text.substr(0, text.find(' '));
  const bool name = std::any_of(word.begin(), word.end(), [](char ch) {
    return std::isupper(static_cast<unsigned char>(ch));
  });
  if (!out.empty() && !name)
    out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string manEntry(const ConfigKey& k) {
  const std::string def = defaultText(k), bounds = boundsText(k);
  std::string facts = capitalized(typeText(k.type));
  if (!bounds.empty()) facts += cat(", ", bounds);
  facts += def.empty() ? "; no default." : cat("; default `", def, "`.");
  return cat(".TP\n.B ", manText(k.name), "\n", manText(facts), "\n",
             manText(capitalized(k.meaning)), ".\n");
}

std::vector<const ConfigKey*> keysOf(const ConfigSection& s) {
  std::vector<const ConfigKey*> keys;
  for (const ConfigKey& k : configKeys()) {
    if (k.section == s.name && k.builtin == s.builtin) keys.push_back(&k);
  }
  return keys;
}

}  // namespace

std::string manText(std::string_view text) {
  std::string out;
  bool code = false;
  for (char ch : text) {
    if (ch == '`') {
      out += code ? "\\fR" : "\\fB";
      code = !code;
    } else if (ch == '\\') {
      out += "\\e";
    } else if (ch == '-') {
      out += "\\-";
    } else if (ch == '"') {
      out += "\\(dq";
    } else {
      out += ch;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

std::string configReferenceMarkdown() {
  std::string out(kMarkdownHead);
  bool builtins = false;
  for (const ConfigSection& s : configSections()) {
    if (!s.builtin.empty() && !builtins) {
      builtins = true;
      out +=
          "\n## The built-in hooks' settings\n\nEach built-in hook reads the `[hook.settings]` "
          "table of its `[[hook]]` entry; an unknown setting stops start-up naming the entry "
          "and the setting.\n";
    }
    out += cat("\n", s.builtin.empty() ? "## " : "### ", "`", s.title, "`\n\n", s.about, "\n\n");
    out += "| Key | Type | Default | Bounds | Meaning |\n|---|---|---|---|---|\n";
    for (const ConfigKey* k : keysOf(s)) out += markdownRow(*k);
  }
  return out;
}

std::string configReferenceMan() {
  std::string out;
  bool builtins = false;
  for (const ConfigSection& s : configSections()) {
    if (!s.builtin.empty() && !builtins) {
      builtins = true;
      out += ".SH \"BUILT\\-IN HOOKS' SETTINGS\"\n" +
             manText(
                 "Each built-in hook reads the `[hook.settings]` table of its `[[hook]]` entry; "
                 "an unknown setting stops start-up naming the entry and the setting.") +
             "\n";
    }
    out += s.builtin.empty()
               ? cat(".SH ", manText(s.title), "\n")
               : cat(".SS ", manText(s.name == "hook.settings" ? s.builtin : s.title), "\n");
    out += manText(s.about) + "\n";
    for (const ConfigKey* k : keysOf(s)) out += manEntry(*k);
  }
  return out;
}

absl::StatusOr<std::string> spliceManReference(std::string_view page, std::string_view part,
                                               std::string_view origin) {
  const size_t begin = page.find(cat(kManBegin, "\n"));
  const size_t end = page.find(cat(kManEnd, "\n"));
  if (begin == std::string_view::npos || end == std::string_view::npos || end < begin)
    return absl::InvalidArgumentError(cat(origin, ": expected a line ", quote(kManBegin),
                                          " and, after it, a line ", quote(kManEnd)));
  const size_t after_begin = begin + kManBegin.size() + 1;
  return cat(page.substr(0, after_begin), part, page.substr(end));
}

namespace {

// A value of `node` as the table's ConfigKey::value writes it, for
// comparing with the default; nullopt where the type does not fit, or the
// value is a table (no default to compare).
std::optional<std::string> valueText(const ConfigKey& k, const toml::node& node) {
  switch (k.type) {
    case KeyType::kString:
    case KeyType::kPath:
      if (!node.is_string()) return std::nullopt;
      return tomlString(node.as_string()->get());
    case KeyType::kDuration: {
      if (!node.is_string()) return std::nullopt;
      auto d = parseDuration(node.as_string()->get());
      if (!d.ok()) return std::nullopt;
      return tomlString(tomlDuration(*d));
    }
    case KeyType::kInteger:
      if (!node.is_integer()) return std::nullopt;
      return cat(node.as_integer()->get());
    case KeyType::kBool:
      if (!node.is_boolean()) return std::nullopt;
      return std::string(node.as_boolean()->get() ? "true" : "false");
    case KeyType::kStringList:
    case KeyType::kPathList: {
      const toml::array* list = node.as_array();
      std::vector<std::string> items;
      for (size_t i = 0; list != nullptr && i < list->size(); ++i) {
        if (!list->get(i)->is_string()) return std::nullopt;
        items.push_back(list->get(i)->as_string()->get());
      }
      if (list == nullptr) return std::nullopt;
      return tomlStringList(items);
    }
    case KeyType::kTable:
      if (!node.is_table()) return std::nullopt;
      return "";
    case KeyType::kTableList:
      if (!node.is_array_of_tables()) return std::nullopt;
      return "";
  }
  return std::nullopt;
}

bool isSection(std::string_view name) {
  for (const ConfigSection& s : configSections()) {
    if (s.name == name) return true;
  }
  return false;
}

struct ExampleCheck {
  std::string_view origin;
  std::vector<std::string> problems;

  void problem(std::string_view where, std::string_view key, std::string_view why) {
    problems.push_back(cat(origin, ": ", where, key, ": ", why));
  }
  void table(const toml::table& t, std::string_view section, std::string_view builtin,
             const std::string& where);
  void hook(const toml::table& t, size_t index);
};

void ExampleCheck::table(const toml::table& t, std::string_view section, std::string_view builtin,
                         const std::string& where) {
  for (const auto& [name, node] : t) {
    const std::string key(name.str());
    const ConfigKey* k = findConfigKey(section, key, builtin);
    if (k == nullptr) {
      problem(where, key, "no such key in the table (config/config_keys.cc)");
      continue;
    }
    const std::optional<std::string> value = valueText(*k, node);
    if (!value) {
      problem(where, key, cat("expected a ", keyTypeName(k->type), " as the table says"));
    } else if (k->type == KeyType::kTable && isSection(cat(section, ".", key))) {
      table(*node.as_table(), cat(section, ".", key), "", cat(where, key, "."));
    } else if (const std::string def = defaultText(*k);
               !value->empty() && !def.empty() && *value != def) {
      problem(where, key, cat("states ", *value, ", but the default is ", def));
    }
  }
}

void ExampleCheck::hook(const toml::table& t, size_t index) {
  const std::string where = cat("hook[", index, "].");
  toml::table own = t;
  own.erase("settings");
  table(own, "hook", "", where);
  const toml::node* settings = t.get("settings");
  const toml::node* builtin = t.get("builtin");
  if (settings == nullptr || builtin == nullptr || !builtin->is_string()) return;
  const std::string type = builtin->as_string()->get();
  if (!settings->is_table()) return problem(where, "settings", "expected a table");
  // A built-in's settings are rows of the table; a module's or a server's are its own.
  bool known = false;
  for (const ConfigSection& s : configSections()) known = known || s.builtin == type;
  if (known) table(*settings->as_table(), "hook.settings", type, cat(where, "settings."));
}

}  // namespace

std::vector<std::string> checkExampleConfig(std::string_view text, std::string_view origin) {
  ExampleCheck check{origin, {}};
  if (auto parsed = parseConfig(text, origin); !parsed.ok())
    return {std::string(sv(parsed.status().message()))};
  const toml::table root = toml::parse(text, origin);
  const std::vector<std::string_view> tables = configTableNames();
  for (const auto& [name, node] : root) {
    const std::string key(name.str());
    if (key == "hook" && node.is_array_of_tables()) {
      for (size_t i = 0; i < node.as_array()->size(); ++i)
        check.hook(*node.as_array()->get(i)->as_table(), i);
    } else if (std::find(tables.begin(), tables.end(), key) != tables.end() && node.is_table()) {
      check.table(*node.as_table(), key, "", key + ".");
    } else {
      check.problem("", key, "no such table in the table (config/config_keys.cc)");
    }
  }
  return check.problems;
}

absl::StatusOr<std::vector<GeneratedFile>> generatedFiles(const std::string& source_dir) {
  const std::string man_path = cat(source_dir, "/", kManPath);
  auto page = readRegularFile(man_path, kMaxDocBytes);
  if (!page.ok())
    return absl::InvalidArgumentError(cat(man_path, ": ", sv(page.status().message())));
  auto man = spliceManReference(*page, configReferenceMan(), man_path);
  if (!man.ok()) return man.status();
  return std::vector<GeneratedFile>{{std::string(kMarkdownPath), configReferenceMarkdown()},
                                    {std::string(kManPath), std::move(*man)}};
}

namespace {

// Where `committed` and `generated` first differ, by line.
std::string firstDifference(const std::string& committed, const std::string& generated) {
  std::istringstream a(committed), b(generated);
  std::string la, lb;
  for (size_t line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) return "differs in its last line's end";
    if (more_a != more_b || la != lb)
      return cat("line ", line, ": committed ", more_a ? quote(la) : "(end of file)",
                 ", the table prints ", more_b ? quote(lb) : "(end of file)");
  }
}

}  // namespace

std::vector<std::string> checkCommittedReference(const std::string& source_dir) {
  auto files = generatedFiles(source_dir);
  if (!files.ok()) return {std::string(sv(files.status().message()))};
  std::vector<std::string> problems;
  for (const GeneratedFile& f : *files) {
    auto committed = readRegularFile(cat(source_dir, "/", f.path), kMaxDocBytes);
    if (!committed.ok()) {
      problems.push_back(cat(f.path, ": ", sv(committed.status().message())));
    } else if (*committed != f.text) {
      problems.push_back(cat(f.path, " is not what config/config_keys.cc prints: ",
                             firstDifference(*committed, f.text),
                             " (ninja -C build config-reference rewrites it)"));
    }
  }
  auto example = readRegularFile(cat(source_dir, "/", kExamplePath), kMaxDocBytes);
  if (!example.ok()) {
    problems.push_back(cat(kExamplePath, ": ", sv(example.status().message())));
  } else {
    for (std::string& p : checkExampleConfig(*example, kExamplePath)) problems.push_back(p);
  }
  return problems;
}

absl::Status writeCommittedReference(const std::string& source_dir) {
  auto files = generatedFiles(source_dir);
  if (!files.ok()) return files.status();
  for (const GeneratedFile& f : *files) {
    const std::string path = cat(source_dir, "/", f.path);
    auto committed = readRegularFile(path, kMaxDocBytes);
    if (committed.ok() && *committed == f.text) continue;
    std::ofstream out(path, std::ios::trunc);
    out << f.text;
    out.close();
    if (!out) return absl::InternalError(cat(path, ": cannot be written"));
  }
  return absl::OkStatus();
}

}  // namespace crihook
