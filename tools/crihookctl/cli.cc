#include "tools/crihookctl/cli.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string_view>

#include "base/text.h"
#include "base/version.h"
#include "tools/crihookctl/command.h"
#include "tools/crihookctl/cri_commands.h"
#include "tools/crihookctl/devices.h"
#include "tools/crihookctl/explain.h"
#include "tools/crihookctl/status.h"
#include "tools/crihookctl/topology_command.h"

namespace crihook::ctl {
namespace {

// A command of the table: how it is called (its usage line, wrapped by hand
// where long) and what it does (the text beside it, lines of at most 44
// characters), which make the usage text.
struct CommandSpec {
  std::string_view name;
  std::string_view alias;  // another name it answers to, or ""
  std::string_view args;   // after the name, in the usage text
  std::string_view help;
  CommandFn run;
};

absl::StatusOr<int> cmdHelp(const Invocation& in);

// Every command, in the order the usage text lists them.
constexpr CommandSpec kCommands[] = {
    {"version", "", "", "runtime name and versions (crihookctl's\nown: --version)", cmdVersion},
    {"info", "", "", "runtime status and conditions", cmdInfo},
    {"pods", "", "[-q]", "list pod sandboxes", cmdPods},
    {"ps", "", "[-a] [-q] [-p POD-ID]", "list containers (running only unless -a)", cmdPs},
    {"images", "img", "[-q]", "list images", cmdImages},
    {"runp", "", "POD-CONFIG.json", "run a pod sandbox, print its id", cmdRunp},
    {"create", "", "POD-ID CONTAINER.json POD-CONFIG.json", "create a container, print its id",
     cmdCreate},
    {"start", "", "ID...", "start containers", cmdStart},
    {"stop", "", "[--timeout N] ID...", "stop containers (grace period N seconds)", cmdStop},
    {"rm", "", "ID...", "remove containers", cmdRm},
    {"stopp", "", "ID...", "stop pod sandboxes", cmdStopp},
    {"rmp", "", "ID...", "remove pod sandboxes", cmdRmp},
    {"exec", "", "ID CMD [ARG...]",
     "run a command synchronously (ExecSync);\nexits with its exit code", cmdExec},
    {"inspect", "", "ID", "container status as JSON", cmdInspect},
    {"inspectp", "", "ID", "pod status as JSON", cmdInspectp},
    {"inspecti", "", "IMAGE", "image status as JSON", cmdInspecti},
    {"update", "", "--cpuset-cpus CPUS ID", "UpdateContainerResources", cmdUpdate},
    {"topology", "",
     "[--root DIR] [--output tree|json|device-crd|matrix|dot]\n"
     "[--format yaml|json] [--node NAME] [--pcie-id root-complex|switch]",
     "the node's NUMA, PCIe, GPU and RDMA layout read\n"
     "from sysfs (under DIR: a fixture tree); as a\n"
     "tree, JSON, a Koordinator Device object\n"
     "(pcieID: the root complex, as koordlet has it,\n"
     "or the PCIe switch; warnings on stderr), the\n"
     "GPU/NIC connection matrix as nvidia-smi topo -m\n"
     "prints it, or a Graphviz graph (dot -Tsvg)",
     cmdTopology},
    {"explain", "", "[--state-dir DIR] [--root DIR] ID",
     "what crihookd's hooks did to a container: what\n"
     "kubelet sent, each change and the hook that\n"
     "made it, what went to the runtime (reads\n"
     "crihookd's state, default /var/lib/crihook;\n"
     "an ID prefix will do); where its GPUs, NICs\n"
     "and CPUs sit on the machine (sysfs under the\n"
     "--root DIR, default /)",
     cmdExplain},
    {"status", "", "[--metrics ENDPOINT] [--config FILE]",
     "crihookd's health: the runtime answering,\n"
     "ready, uptime, calls and errors per method,\n"
     "hook failures and timeouts, device cleanups\n"
     "owed; from its metrics endpoint (ENDPOINT as\n"
     "[metrics] listen takes it; default the config\n"
     "file's, else /run/crihook/metrics.sock);\n"
     "exits 1 unless healthy and ready",
     cmdStatus},
    {"devices", "", "[--state-dir DIR] [--root DIR]",
     "the device-lifecycle hook's records: each\n"
     "sandbox's devices, whether they are\n"
     "initialised or owe a cleanup, and why\n"
     "(default DIR /var/lib/crihook/devices), and\n"
     "where its devices sit on the machine",
     cmdDevices},
    {"help", "", "", "this text (also -h, --help)", cmdHelp},
};

constexpr std::string_view kUsageHead =
    R"(usage: crihookctl [-r ENDPOINT] [-t TIMEOUT] [-o table|json] COMMAND [ARGS]

  -r, --runtime-endpoint  CRI endpoint (default unix:///run/crihook/crihook.sock,
                          or $CONTAINER_RUNTIME_ENDPOINT)
  -t, --timeout           per-call timeout in seconds (default 10)
  -o, --output            table (default) or json
      --version           print crihookctl's own version and exit
  -h, --help              print this and exit

commands:
)";

constexpr std::string_view kUsageTail = R"(
Configs are JSON files in crictl's format (CRI field names, snake_case or
lowerCamelCase).
)";

// The column the commands' help text starts in.
constexpr size_t kHelpColumn = 36;

// `text`'s lines, the first as is, each later one after `indent` spaces.
std::string indented(std::string_view text, size_t indent) {
  std::string out;
  for (size_t at = 0; at <= text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    if (at > 0) out += '\n' + std::string(indent, ' ');
    out.append(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

// The usage text: the global flags, then each command of the table.
std::string usage() {
  std::string out(kUsageHead);
  for (const CommandSpec& c : kCommands) {
    const std::string call = cat(c.name, c.args.empty() ? "" : " ", c.args);
    // A continued call lines up after the command's name.
    std::string line = "  " + indented(call, 2 + c.name.size() + 1);
    const size_t last = line.size() - std::min(line.size(), line.rfind('\n') + 1);
    if (last + 2 > kHelpColumn) {
      line += '\n' + std::string(kHelpColumn, ' ');
    } else {
      line += std::string(kHelpColumn - last, ' ');
    }
    out += line + indented(c.help, kHelpColumn) + '\n';
  }
  out += kUsageTail;
  return out;
}

absl::StatusOr<int> cmdHelp(const Invocation& in) {
  in.out << usage();
  return 0;
}

const CommandSpec* findCommand(std::string_view name) {
  for (const CommandSpec& c : kCommands) {
    if (c.name == name || (!c.alias.empty() && c.alias == name)) return &c;
  }
  return nullptr;
}

// What the global flags end in: a command to run (its index in `argv`), or
// something printed already (--version, --help) and the exit code.
struct GlobalFlags {
  size_t command = 0;
  std::optional<int> done;
};

absl::Status setTimeout(std::string value, Options& o) {
  if (!value.empty() && value.back() == 's') value.pop_back();
  auto n = integerFlag("-t", value);
  if (!n.ok()) return n.status();
  if (*n < INT_MIN || *n > INT_MAX) return usageError(cat("-t: out of range, got ", value));
  o.timeout_s = static_cast<int>(*n);
  return absl::OkStatus();
}

// The flags before the command.
absl::StatusOr<GlobalFlags> globalFlags(const std::vector<std::string>& argv, Options& o,
                                        std::ostream& out) {
  size_t i = 0;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    const bool takes_value = a == "-r" || a == "--runtime-endpoint" || a == "-t" ||
                             a == "--timeout" || a == "-o" || a == "--output";
    if (takes_value && i + 1 >= argv.size()) return usageError(cat("flag ", a, " needs a value"));
    if (a == "-r" || a == "--runtime-endpoint") {
      o.endpoint = argv[++i];
    } else if (a == "-t" || a == "--timeout") {
      if (auto s = setTimeout(argv[++i], o); !s.ok()) return s;
    } else if (a == "-o" || a == "--output") {
      const std::string& v = argv[++i];
      if (v != "json" && v != "table")
        return usageError(cat("output must be table or json, got ", v));
      o.json = v == "json";
    } else if (a == "-h" || a == "--help") {
      out << usage();
      return GlobalFlags{i, 0};
    } else if (a == "--version") {
      out << versionLine("crihookctl", version(), commit()) << '\n';
      return GlobalFlags{i, 0};
    } else if (!a.empty() && a[0] == '-') {
      return usageError(cat("unknown flag ", a));
    } else {
      break;
    }
  }
  if (i >= argv.size()) return usageError("no command given");
  return GlobalFlags{i, std::nullopt};
}

absl::StatusOr<int> runCommand(const std::vector<std::string>& argv, std::ostream& out,
                               std::ostream& err) {
  Options o;
  if (const char* env = std::getenv("CONTAINER_RUNTIME_ENDPOINT")) o.endpoint = env;
  if (o.endpoint.empty()) o.endpoint = "unix:///run/crihook/crihook.sock";
  auto flags = globalFlags(argv, o, out);
  if (!flags.ok()) return flags.status();
  if (flags->done) return *flags->done;
  const std::string& name = argv[flags->command];
  const CommandSpec* command = findCommand(name);
  if (command == nullptr) return usageError(cat("unknown command ", name));
  const std::vector<std::string> args(argv.begin() + static_cast<long>(flags->command) + 1,
                                      argv.end());
  return command->run(Invocation{o, args, out, err});
}

}  // namespace

int run(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  absl::StatusOr<int> code;
  try {
    code = runCommand(argv, out, err);
  } catch (const std::exception& e) {
    // Nothing of crihookctl's throws; a library may (out of memory).
    err << "crihookctl: " << e.what() << '\n';
    return 2;
  }
  if (code.ok()) return *code;
  err << "crihookctl: " << sv(code.status().message());
  if (showsUsage(code.status())) {
    err << "\n\n" << usage();
  } else {
    err << '\n';
  }
  return exitCodeOf(code.status());
}

}  // namespace crihook::ctl
