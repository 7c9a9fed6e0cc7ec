#pragma once

// What every crihookctl command is made of: the global options, the
// command's own arguments and streams (Invocation), its flags (parseArgs),
// and its errors. A command returns its exit code or an absl::Status; run()
// (cli.h) prints every error in one place and picks the exit code from it:
//   usageError   exit 2, the message and the usage text (a command line
//                crihookctl cannot run: an unknown flag, a missing ID, a
//                request file it cannot read);
//   inputError   exit 2, the message only (input it cannot use: a config
//                file that does not parse);
//   any other    exit 1 (the runtime refused, no such container, crihookd
//                not reachable).
// How an error ends the tool rides on the status as a payload: its code
// says what failed (a runtime's INVALID_ARGUMENT is the runtime's), not how
// crihookctl exits.

#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace google::protobuf {
class Message;
}

namespace crihook::ctl {

// The flags before the command (cli.cc's kGlobalFlags).
struct Options {
  std::string endpoint;  // the CRI endpoint, unix:// or a path
  int timeout_s = 10;    // per call
  bool json = false;     // -o json
};

// One run of a command: the global options, its own arguments (those after
// its name), where its results and its side messages go. Errors are not
// written by the command: it returns them.
struct Invocation {
  const Options& options;
  const std::vector<std::string>& args;
  std::ostream& out;
  std::ostream& err;
};

// A command: its exit code (0; exec: the command's own; status: 1 while
// crihookd is not healthy and ready) or an error as above.
using CommandFn = absl::StatusOr<int> (*)(const Invocation&);

absl::Status usageError(std::string_view why);
absl::Status inputError(const absl::Status& status);
// The exit code of an error (1 or 2) and whether the usage text follows it.
int exitCodeOf(const absl::Status& error);
bool showsUsage(const absl::Status& error);

// A command's arguments split into the flags it knows and its positional
// arguments. Flags come first: from the first positional argument on,
// everything is positional (exec's command keeps its own flags).
struct ParsedArgs {
  std::map<std::string, std::string> flags;  // a flag without a value: "true"
  std::vector<std::string> positional;

  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
  std::string get(const std::string& flag, std::string fallback = "") const;
};
// `known`: flag -> whether it takes a value. usageError for an unknown flag
// or a missing value.
absl::StatusOr<ParsedArgs> parseArgs(const std::vector<std::string>& args,
                                     const std::map<std::string, bool>& known);
// usageError "expected <what>" unless there are at least `n` positional arguments.
absl::Status needArgs(const ParsedArgs& parsed, size_t n, std::string_view what);
// The leading integer of `text` as std::stoll reads it ("30s" is 30);
// usageError naming `flag` when there is none or it overflows.
absl::StatusOr<int64_t> integerFlag(std::string_view flag, const std::string& text);

// A CRI or state message as -o json prints it (protobuf's JSON mapping,
// indented).
std::string messageJson(const google::protobuf::Message& message);

// Rows as columns, each as wide as its widest cell plus 4 spaces.
void printTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows);

}  // namespace crihook::ctl
