#pragma once

// The build's identity, as `crihookd --version`, `crihookctl --version`, the
// crihook_build_info metric and `crihookctl status` show it.
//
// version() and commit() are generated (base/build_version.cc.in, see
// base/meson.build) into build_version_dep, which only what shows them
// links; versionLine() is base's and formats any build's numbers.

#include <string>
#include <string_view>

namespace crihook {

// The upstream version of debian/changelog's top entry, read when meson
// configures: "0.1.0" (numbers and dots; meson.build refuses anything else).
std::string_view version();

// The commit the build was made from, as `git describe --always --dirty
// --abbrev=12` names it when the build ran: "6ccc633abcd1",
// "6ccc633abcd1-dirty" (a tracked file differed from it), "v0.1.0-3-g…"
// once tags exist; "unknown" in a git checkout git could not describe; ""
// when the tree was no git checkout (the Debian package's build).
std::string_view commit();

// One line, without a newline: "crihookd 0.1.0 (git 6ccc633abcd1)", or
// "crihookd 0.1.0" when `commit` is "". Pure: for this build's
// (`versionLine("crihookd", version(), commit())`) or another's.
std::string versionLine(std::string_view program, std::string_view version,
                        std::string_view commit);

}  // namespace crihook
