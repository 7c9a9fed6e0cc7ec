#pragma once

// crihookctl: a small CRI client in the spirit of crictl (which Debian does
// not package), used by operators, the README demo and the end-to-end tests.

#include <ostream>
#include <string>
#include <vector>

namespace crihook::ctl {

// Runs one command line (without argv[0]): the global flags, then the
// command of cli.cc's table (kCommands, which the usage text is made from).
// Writes results to `out`, errors to `err` (printed here, for every
// command: command.h says which exit 1 and which 2); returns the process
// exit code (for exec: the command's own).
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace crihook::ctl
