#pragma once

// The configuration reference, printed from config_keys.h's table:
// docs/configuration.md whole, and the key reference of crihook.toml(5)
// (docs/man/crihook.toml.5.in, between kManBegin and kManEnd); and the check
// of debian/examples/crihook.toml against the table. The tool
// tools/crihook-config-reference writes or checks the committed files with
// these; nothing here runs in crihookd.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook {

// The lines around the generated part of crihook.toml.5.in.
inline constexpr std::string_view kManBegin = ".\\\" BEGIN KEY REFERENCE";
inline constexpr std::string_view kManEnd = ".\\\" END KEY REFERENCE";

// docs/configuration.md.
std::string configReferenceMarkdown();
// The man page's key reference: the lines between kManBegin and kManEnd.
std::string configReferenceMan();
// Plain text as a man page line: backslashes, hyphens and double quotes
// escaped, `code` in bold.
std::string manText(std::string_view text);

// `page` with the lines between kManBegin and kManEnd replaced by `part`.
// INVALID_ARGUMENT naming `origin` when the markers are missing or out of order.
absl::StatusOr<std::string> spliceManReference(std::string_view page, std::string_view part,
                                               std::string_view origin);

// What is wrong with an example configuration, one line each naming
// `origin` and the key: it does not parse, a key the table lacks, a value of
// another type than the table's, or a value other than the default (an
// example states only defaults). Empty: none.
std::vector<std::string> checkExampleConfig(std::string_view text, std::string_view origin);

// A file printed from the table, by its path under the source tree.
struct GeneratedFile {
  std::string path;  // "docs/configuration.md"
  std::string text;
};
// The generated files as they should read, from the source tree at
// `source_dir` (the man page's text around the key reference is kept).
// INVALID_ARGUMENT when the man page cannot be read or has no markers.
absl::StatusOr<std::vector<GeneratedFile>> generatedFiles(const std::string& source_dir);

// Each generated file that differs from the committed one, naming it and its
// first differing line; and debian/examples/crihook.toml's problems. Empty:
// the committed files are what the table prints.
std::vector<std::string> checkCommittedReference(const std::string& source_dir);

// Rewrites the generated files under `source_dir` (only those whose text
// changes). INTERNAL naming a file that cannot be written.
absl::Status writeCommittedReference(const std::string& source_dir);

}  // namespace crihook
