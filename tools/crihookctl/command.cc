#include "tools/crihookctl/command.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/cord.h"
#include "base/quote.h"
#include "base/text.h"

namespace crihook::ctl {
namespace {

// The payload that says how an error ends crihookctl.
constexpr absl::string_view kExitPayload = "type.crihook.dev/crihookctl.exit";
constexpr absl::string_view kUsage = "usage";
constexpr absl::string_view kInput = "input";

std::string exitOf(const absl::Status& error) {
  const auto payload = error.GetPayload(kExitPayload);
  return payload ? std::string(*payload) : std::string();
}

}  // namespace

absl::Status usageError(std::string_view why) {
  absl::Status s = absl::InvalidArgumentError(absl::string_view(why.data(), why.size()));
  s.SetPayload(kExitPayload, absl::Cord(kUsage));
  return s;
}

absl::Status inputError(const absl::Status& status) {
  absl::Status s = status;
  s.SetPayload(kExitPayload, absl::Cord(kInput));
  return s;
}

int exitCodeOf(const absl::Status& error) {
  const std::string how = exitOf(error);
  return how == kUsage || how == kInput ? 2 : 1;
}

bool showsUsage(const absl::Status& error) { return exitOf(error) == kUsage; }

std::string ParsedArgs::get(const std::string& flag, std::string fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? std::move(fallback) : it->second;
}

absl::StatusOr<ParsedArgs> parseArgs(const std::vector<std::string>& args,
                                     const std::map<std::string, bool>& known) {
  ParsedArgs p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!p.positional.empty() || a.size() < 2 || a[0] != '-') {
      p.positional.push_back(a);
      continue;
    }
    auto it = known.find(a);
    if (it == known.end()) return usageError(cat("unknown flag ", a));
    if (!it->second) {
      p.flags[a] = "true";
    } else if (i + 1 < args.size()) {
      p.flags[a] = args[++i];
    } else {
      return usageError(cat("flag ", a, " needs a value"));
    }
  }
  return p;
}

absl::Status needArgs(const ParsedArgs& parsed, size_t n, std::string_view what) {
  if (parsed.positional.size() < n) return usageError(cat("expected ", what));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> integerFlag(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || errno == ERANGE)
    return usageError(cat(flag, ": expected a whole number, got ", quote(text)));
  return static_cast<int64_t>(v);
}

std::string messageJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  return out;
}

void printTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      out << r[i];
      if (i + 1 < r.size()) out << std::string(width[i] - r[i].size() + 4, ' ');
    }
    out << '\n';
  }
}

}  // namespace crihook::ctl
