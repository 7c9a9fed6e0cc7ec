#include "hooks/builtin/lifecycle/actions.h"

#include <algorithm>
#include <cctype>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/text.h"
#include "config/config_keys.h"
#include "confine/launcher.h"
#include "hooks/builtin/devices/allocation.h"
#include "hooks/builtin/settings.h"

namespace crihook {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kPlaceholders[] = {"type",          "index",    "minor",  "id",
                                              "uuid",          "pci",      "name",   "node",
                                              "pod_namespace", "pod_name", "pod_uid"};

// Splits a template into literal text and placeholders; calls `piece` for
// each (placeholder = true for "{name}"). INVALID_ARGUMENT for an unknown or
// unclosed placeholder.
template <typename Piece>
absl::Status walkTemplate(std::string_view t, Piece piece) {
  std::string literal;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {
      literal += c;
      ++i;
      continue;
    }
    if (c == '}') return absl::InvalidArgumentError("a lone \"}\" (write \"}}\" for a brace)");
    if (c != '{') {
      literal += c;
      continue;
    }
    const size_t close = t.find('}', i);
    if (close == std::string_view::npos)
      return absl::InvalidArgumentError(cat("unclosed placeholder in \"", t, "\""));
    const std::string_view name = t.substr(i + 1, close - i - 1);
    bool known = false;
    for (std::string_view k : kPlaceholders) known = known || k == name;
    if (!known) {
      std::string list;
      for (std::string_view k : kPlaceholders) list += cat(list.empty() ? "{" : ", {", k, "}");
      return absl::InvalidArgumentError(cat("unknown placeholder {", name, "}; known: ", list));
    }
    if (auto s = piece(literal, false); !s.ok()) return s;
    literal.clear();
    if (auto s = piece(std::string(name), true); !s.ok()) return s;
    i = close;
  }
  return piece(literal, false);
}

std::string lastLine(std::string_view out) {
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' '))
    out.remove_suffix(1);
  const size_t nl = out.rfind('\n');
  std::string_view line = nl == std::string_view::npos ? out : out.substr(nl + 1);
  if (line.size() > 200) line = line.substr(line.size() - 200);
  return std::string(line);
}

}  // namespace

json DeviceFacts::toJson() const {
  return {{"type", type}, {"index", index}, {"minor", minor}, {"id", id},
          {"uuid", uuid}, {"pci", pci},     {"name", name},   {"node", node}};
}

namespace {

// A device fact read back from a record is checked as the allocation parser
// checked it when it was first written: a PCI address reaches a sysfs path,
// a node name a /dev path, every field an argv or a message.
constexpr size_t kMaxFactBytes = 256;

bool isPlainText(std::string_view v) {
  return v.size() <= kMaxFactBytes &&
         std::all_of(v.begin(), v.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// "nvidia0", "infiniband/uverbs3": names under the device root, no "..".
bool isDeviceNodeName(std::string_view v) {
  if (v.empty() || v.size() > kMaxFactBytes || v.front() == '/' || v.back() == '/') return false;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t end = std::min(v.find('/', start), v.size());
    const std::string_view part = v.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' &&
          c != ':')
        return false;
    }
    start = end + 1;
  }
  return true;
}

}  // namespace

absl::StatusOr<DeviceFacts> DeviceFacts::fromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("device: expected an object");
  DeviceFacts d;
  try {
    d.type = j.at("type").get<std::string>();
    d.index = j.at("index").get<int>();
    d.minor = j.at("minor").get<int>();
    d.id = j.value("id", "");
    d.uuid = j.value("uuid", "");
    d.pci = j.value("pci", "");
    d.name = j.value("name", "");
    d.node = j.value("node", "");
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(cat("device: ", e.what()));
  }
  if (d.type != "gpu" && d.type != "rdma" && d.type != "fpga")
    return absl::InvalidArgumentError(cat("device.type: unknown ", quote(d.type)));
  if (d.index < 0 || d.minor < -1)
    return absl::InvalidArgumentError(cat("device: index ", d.index, ", minor ", d.minor));
  for (const auto& [field, value] : {std::pair<std::string_view, const std::string&>{"id", d.id},
                                     {"uuid", d.uuid},
                                     {"name", d.name}}) {
    if (!value.empty() && !isPlainText(value))
      return absl::InvalidArgumentError(cat("device.", field, ": not printable text of at most ",
                                            kMaxFactBytes, " bytes: ", quote(value)));
  }
  if (!d.pci.empty() && !isPciAddress(d.pci))
    return absl::InvalidArgumentError(cat("device.pci: not a PCI address: ", quote(d.pci)));
  if (!d.node.empty() && !isDeviceNodeName(d.node))
    return absl::InvalidArgumentError(cat("device.node: not a device node name: ", quote(d.node)));
  return d;
}

std::string DeviceFacts::describe() const {
  std::string what = cat(type, " ", index, " (minor ", minor);
  if (!uuid.empty()) {
    what += cat(", ", uuid);
  } else if (!name.empty()) {
    what += cat(", ", name);
  }
  if (!pci.empty()) what += cat(", ", pci);
  return what + ")";
}

absl::StatusOr<Action> Action::parse(const json& v, const std::string& field) {
  auto bad = [&](std::string_view sub, std::string_view why) {
    return absl::InvalidArgumentError(cat(field, sub, ": ", why));
  };
  if (!v.is_object()) return bad("", cat("expected an object, got ", shownJson(v)));
  Action a;
  bool kind_set = false;
  for (const auto& [k, x] : v.items()) {
    if (!findConfigKey("hook.settings.action", k, "device-lifecycle")) {
      return bad("", cat("unknown key ", quote(k), " (known: ",
                         configKeyList("hook.settings.action", "device-lifecycle"), ")"));
    }
    if (k == "command") {
      if (!x.is_array() || x.empty())
        return bad(".command", cat("expected a non-empty array of strings, got ", shownJson(x)));
      for (size_t i = 0; i < x.size(); ++i) {
        if (!x[i].is_string())
          return bad(cat(".command[", i, "]"), cat("expected a string, got ", shownJson(x[i])));
        const std::string arg = x[i].get<std::string>();
        auto s = walkTemplate(arg, [](const std::string&, bool) { return absl::OkStatus(); });
        if (!s.ok()) return bad(cat(".command[", i, "]"), sv(s.message()));
        a.argv_.push_back(arg);
      }
      if (a.argv_[0].empty()) return bad(".command[0]", "empty program");
      kind_set = true;
    } else if (k == "builtin") {
      if (x == "pci-reset") {
        a.kind_ = Kind::kPciReset;
      } else if (x == "check-node") {
        a.kind_ = Kind::kCheckNode;
      } else {
        return bad(".builtin", cat("expected \"pci-reset\" or \"check-node\", got ", shownJson(x)));
      }
      kind_set = true;
    } else if (k == "timeout") {
      auto d = positiveDuration(x);
      if (!d.ok()) return bad(".timeout", sv(d.status().message()));
      a.timeout_ = *d;
    }
  }
  if (!kind_set) return bad("", "expected \"command\" or \"builtin\"");
  if (v.contains("command") && v.contains("builtin"))
    return bad("", "\"command\" and \"builtin\" are either-or");
  return a;
}

std::string Action::describe() const {
  switch (kind_) {
    case Kind::kPciReset:
      return "builtin pci-reset";
    case Kind::kCheckNode:
      return "builtin check-node";
    case Kind::kCommand:
      break;
  }
  std::string out;
  for (const auto& a : argv_) out += cat(out.empty() ? "" : " ", a);
  return out;
}

absl::StatusOr<std::vector<std::string>> Action::expand(const DeviceFacts& d,
                                                        const PodFacts& pod) const {
  std::vector<std::string> out;
  for (const std::string& t : argv_) {
    std::string arg;
    auto s = walkTemplate(t, [&](const std::string& piece, bool placeholder) -> absl::Status {
      if (!placeholder) {
        arg += piece;
        return absl::OkStatus();
      }
      std::string v;
      if (piece == "type") v = d.type;
      if (piece == "index") v = std::to_string(d.index);
      if (piece == "minor") v = d.minor >= 0 ? std::to_string(d.minor) : "";
      if (piece == "id") v = d.id;
      if (piece == "uuid") v = d.uuid;
      if (piece == "pci") v = d.pci;
      if (piece == "name") v = d.name;
      if (piece == "node") v = d.node.empty() ? "" : "/dev/" + d.node;
      if (piece == "pod_namespace") v = pod.namespace_;
      if (piece == "pod_name") v = pod.name;
      if (piece == "pod_uid") v = pod.uid;
      if (v.empty())
        return absl::FailedPreconditionError(cat(d.describe(), " has no value for {", piece, "}"));
      arg += v;
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    out.push_back(std::move(arg));
  }
  return out;
}

absl::Status Action::run(const DeviceFacts& d, const PodFacts& pod, const ActionRoots& roots,
                         Clock::time_point deadline, Env& env) const {
  switch (kind_) {
    case Kind::kPciReset: {
      if (d.pci.empty())
        return absl::FailedPreconditionError(cat(d.describe(), " has no PCI address to reset"));
      if (!isPciAddress(d.pci))  // whatever the facts came from: never a path outside sysfs
        return absl::InvalidArgumentError(cat("not a PCI address: ", quote(d.pci)));
      const std::string path = cat(roots.sys_root, roots.sys_root.back() == '/' ? "" : "/",
                                   "sys/bus/pci/devices/", d.pci, "/reset");
      return env.writeExisting(path, "1");
    }
    case Kind::kCheckNode: {
      if (d.node.empty())
        return absl::FailedPreconditionError(cat(d.describe(), " has no device node"));
      if (!isDeviceNodeName(d.node))
        return absl::InvalidArgumentError(cat("not a device node name: ", quote(d.node)));
      const std::string path = cat(roots.device_root, "/", d.node);
      if (env.exists(path)) return absl::OkStatus();
      return absl::FailedPreconditionError(cat("no device node ", path));
    }
    case Kind::kCommand:
      break;
  }
  auto argv = expand(d, pod);
  if (!argv.ok()) return argv.status();
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - env.clock().now());
  if (deadline != Clock::time_point::max() && left < timeout_) {
    if (left.count() <= 0) return absl::DeadlineExceededError("no time left before the deadline");
    return runCommand(*argv, left, env);
  }
  return runCommand(*argv, timeout_, env);
}

absl::Status runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        Env& env) {
  // processEnv()'s executor is the launcher in force: crihookd's spawner
  // (confine/spawner.h), so the command runs outside crihookd's seccomp
  // filter and capability drop; a direct fork/exec where no spawner was
  // started (unit tests).
  ExecRequest request;
  request.argv = argv;
  request.timeout = std::min(timeout, confine::kMaxTimeout);
  auto result = env.exec(request);
  if (!result.ok()) return result.status();
  using End = ExecResult::End;
  if (result->end == End::kTimedOut)
    return absl::DeadlineExceededError(cat("timed out after ", durationText(timeout), " (killed)"));
  if (result->end == End::kExited && result->code == 0) return absl::OkStatus();
  std::string why = result->end == End::kExited ? cat("exited with status ", result->code)
                                                : cat("killed by signal ", result->code);
  const std::string line = lastLine(result->output);
  if (!line.empty()) why += cat(": ", line);
  return absl::FailedPreconditionError(why);
}

}  // namespace crihook
