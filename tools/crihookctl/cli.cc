#include "tools/crihookctl/cli.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>

#include "base/quote.h"
#include "base/read_file.h"
#include "base/text.h"
#include "base/version.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "hooks/builtin/lifecycle/records.h"
#include "hooks/state_store.h"
#include "tools/crihookctl/explain.h"
#include "tools/crihookctl/status.h"
#include "topology/report.h"
#include "topology/views.h"

namespace crihook::ctl {
namespace {

namespace v1 = ::runtime::v1;
using google::protobuf::Message;

constexpr const char* kUsage =
    R"(usage: crihookctl [-r ENDPOINT] [-t TIMEOUT] [-o table|json] COMMAND [ARGS]

  -r, --runtime-endpoint  CRI endpoint (default unix:///run/crihook/crihook.sock,
                          or $CONTAINER_RUNTIME_ENDPOINT)
  -t, --timeout           per-call timeout in seconds (default 10)
  -o, --output            table (default) or json
      --version           print crihookctl's own version and exit

commands:
  version                           runtime name and versions (crihookctl's
                                    own: --version)
  info                              runtime status and conditions
  pods [-q]                         list pod sandboxes
  ps [-a] [-q] [-p POD-ID]          list containers (running only unless -a)
  images [-q]                       list images
  runp POD-CONFIG.json              run a pod sandbox, print its id
  create POD-ID CONTAINER.json POD-CONFIG.json
                                    create a container, print its id
  start ID...                       start containers
  stop [--timeout N] ID...          stop containers (grace period N seconds)
  rm ID...                          remove containers
  stopp ID...                       stop pod sandboxes
  rmp ID...                         remove pod sandboxes
  exec ID CMD [ARG...]              run a command synchronously (ExecSync);
                                    exits with its exit code
  inspect ID | inspectp ID | inspecti IMAGE
                                    container, pod or image status as JSON
  update --cpuset-cpus CPUS ID      UpdateContainerResources
  topology [--root DIR] [--output tree|json|device-crd|matrix|dot]
           [--format yaml|json] [--node NAME] [--pcie-id root-complex|switch]
                                    the node's NUMA, PCIe, GPU and RDMA layout read
                                    from sysfs (under DIR: a fixture tree); as a
                                    tree, JSON, a Koordinator Device object
                                    (pcieID: the root complex, as koordlet has it,
                                    or the PCIe switch; warnings on stderr), the
                                    GPU/NIC connection matrix as nvidia-smi topo -m
                                    prints it, or a Graphviz graph (dot -Tsvg)
  explain [--state-dir DIR] [--root DIR] ID
                                    what crihookd's hooks did to a container: what
                                    kubelet sent, each change and the hook that
                                    made it, what went to the runtime (reads
                                    crihookd's state, default /var/lib/crihook;
                                    an ID prefix will do); where its GPUs, NICs
                                    and CPUs sit on the machine (sysfs under the
                                    --root DIR, default /)
  status [--metrics ENDPOINT] [--config FILE]
                                    crihookd's health: the runtime answering,
                                    ready, uptime, calls and errors per method,
                                    hook failures and timeouts, device cleanups
                                    owed; from its metrics endpoint (ENDPOINT as
                                    [metrics] listen takes it; default the config
                                    file's, else /run/crihook/metrics.sock);
                                    exits 1 unless healthy and ready
  devices [--state-dir DIR] [--root DIR]
                                    the device-lifecycle hook's records: each
                                    sandbox's devices, whether they are
                                    initialised or owe a cleanup, and why
                                    (default DIR /var/lib/crihook/devices), and
                                    where its devices sit on the machine

Configs are JSON files in crictl's format (CRI field names, snake_case or
lowerCamelCase).
)";

struct Options {
  std::string endpoint;
  int timeout_s = 10;
  bool json = false;
};

class UsageError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class CallError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string toJson(const Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

void fromJsonFile(const std::string& path, Message& m) {
  // A request is a config-sized file; `-` or a FIFO are not read (a reader
  // never blocks on one).
  auto text = readRegularFile(path, kMaxConfigBytes, FileLinks::kFollow);
  if (!text.ok()) throw UsageError(cat("cannot read ", path, ": ", text.status().message()));
  google::protobuf::util::JsonParseOptions opts;
  auto s = google::protobuf::util::JsonStringToMessage(*text, &m, opts);
  if (!s.ok())
    throw UsageError(cat(path, ": not a valid ", m.GetTypeName(), ": ", s.message().ToString()));
}

std::string age(int64_t created_ns) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  int64_t s = std::max<int64_t>(0, (now - created_ns) / 1000000000);
  if (s < 60) return cat(s, " seconds ago");
  if (s < 3600) return cat(s / 60, " minutes ago");
  if (s < 86400) return cat(s / 3600, " hours ago");
  return cat(s / 86400, " days ago");
}

std::string trunc(const std::string& id) { return id.substr(0, 13); }

void table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
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

class Client {
 public:
  explicit Client(const Options& o) : opts_(o) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    args.SetMaxSendMessageSize(16 << 20);
    std::string target = o.endpoint;
    if (target.rfind("unix://", 0) != 0) target = "unix://" + target;
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    runtime_ = v1::RuntimeService::NewStub(channel_);
    images_ = v1::ImageService::NewStub(channel_);
  }

  template <typename Stub, typename Req, typename Resp>
  Resp call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
            const Req& req, const char* name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(opts_.timeout_s));
    Resp resp;
    grpc::Status s = (stub.*method)(&ctx, req, &resp);
    if (!s.ok())
      throw CallError(cat(name, ": ", grpcCode(s.error_code()), ": ", s.error_message()));
    return resp;
  }

  v1::RuntimeService::Stub& runtime() { return *runtime_; }
  v1::ImageService::Stub& images() { return *images_; }

  static std::string grpcCode(grpc::StatusCode c) {
    static const char* names[] = {
        "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
        "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
        "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
        "DataLoss", "Unauthenticated"};
    int i = static_cast<int>(c);
    return i >= 0 && i < 17 ? names[i] : cat("code ", i);
  }

 private:
  Options opts_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RuntimeService::Stub> runtime_;
  std::unique_ptr<v1::ImageService::Stub> images_;
};

using Args = std::vector<std::string>;

// Splits flags that the command knows from its positional arguments.
struct Parsed {
  std::map<std::string, std::string> flags;
  Args positional;
};

Parsed parse(const Args& args, const std::map<std::string, bool>& known /* flag -> takes value */) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (p.positional.empty() && a.size() > 1 && a[0] == '-') {
      auto it = known.find(a);
      if (it == known.end()) throw UsageError(cat("unknown flag ", a));
      if (it->second) {
        if (i + 1 >= args.size()) throw UsageError(cat("flag ", a, " needs a value"));
        p.flags[a] = args[++i];
      } else {
        p.flags[a] = "true";
      }
    } else {
      p.positional.push_back(a);
    }
  }
  return p;
}

void needArgs(const Parsed& p, size_t n, const char* what) {
  if (p.positional.size() < n) throw UsageError(cat("expected ", what));
}

int cmdVersion(Client& c, const Options& o, const Args&, std::ostream& out) {
  v1::VersionRequest req;
  req.set_version("v1");
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::Version, req, "Version");
  if (o.json) {
    out << toJson(r);
  } else {
    out << "Version:  " << r.version() << "\nRuntimeName:  " << r.runtime_name()
        << "\nRuntimeVersion:  " << r.runtime_version()
        << "\nRuntimeApiVersion:  " << r.runtime_api_version() << "\n";
  }
  return 0;
}

int cmdInfo(Client& c, const Options&, const Args&, std::ostream& out) {
  v1::StatusRequest req;
  req.set_verbose(true);  // the runtime's configuration too, as crictl info shows it
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::Status, req, "Status");
  out << toJson(r);
  return 0;
}

int cmdPods(Client& c, const Options& o, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"-q", false}});
  v1::ListPodSandboxRequest req;
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::ListPodSandbox, req, "ListPodSandbox");
  if (o.json) {
    out << toJson(r);
  } else if (p.flags.count("-q")) {
    for (const auto& s : r.items()) out << s.id() << '\n';
  } else {
    std::vector<std::vector<std::string>> rows{
        {"POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"}};
    for (const auto& s : r.items()) {
      rows.push_back({trunc(s.id()), age(s.created_at()),
                      s.state() == v1::SANDBOX_READY ? "Ready" : "NotReady", s.metadata().name(),
                      s.metadata().namespace_(), std::to_string(s.metadata().attempt()),
                      s.runtime_handler().empty() ? "(default)" : s.runtime_handler()});
    }
    table(out, rows);
  }
  return 0;
}

int cmdPs(Client& c, const Options& o, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"-a", false}, {"-q", false}, {"-p", true}});
  v1::ListContainersRequest req;
  if (!p.flags.count("-a")) req.mutable_filter()->mutable_state()->set_state(v1::CONTAINER_RUNNING);
  if (p.flags.count("-p")) req.mutable_filter()->set_pod_sandbox_id(p.flags["-p"]);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::ListContainers, req, "ListContainers");
  if (o.json) {
    out << toJson(r);
  } else if (p.flags.count("-q")) {
    for (const auto& ct : r.containers()) out << ct.id() << '\n';
  } else {
    static const char* states[] = {"Created", "Running", "Exited", "Unknown"};
    std::vector<std::vector<std::string>> rows{
        {"CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID"}};
    for (const auto& ct : r.containers()) {
      rows.push_back({trunc(ct.id()), ct.image().image(), age(ct.created_at()),
                      states[std::clamp(static_cast<int>(ct.state()), 0, 3)], ct.metadata().name(),
                      std::to_string(ct.metadata().attempt()), trunc(ct.pod_sandbox_id())});
    }
    table(out, rows);
  }
  return 0;
}

int cmdImages(Client& c, const Options& o, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"-q", false}});
  v1::ListImagesRequest req;
  auto r = c.call(c.images(), &v1::ImageService::Stub::ListImages, req, "ListImages");
  if (o.json) {
    out << toJson(r);
  } else if (p.flags.count("-q")) {
    for (const auto& i : r.images()) out << i.id() << '\n';
  } else {
    std::vector<std::vector<std::string>> rows{{"IMAGE", "TAG", "IMAGE ID", "SIZE"}};
    for (const auto& i : r.images()) {
      std::string repo = "<none>", tag = "<none>";
      if (!i.repo_tags().empty()) {
        const std::string& t = i.repo_tags(0);
        auto colon = t.rfind(':');
        repo = t.substr(0, colon);
        tag = colon == std::string::npos ? "" : t.substr(colon + 1);
      }
      std::string id = i.id();
      if (id.rfind("sha256:", 0) == 0) id = id.substr(7);
      rows.push_back({repo, tag, id.substr(0, 13), cat(i.size() / 1024, "kB")});
    }
    table(out, rows);
  }
  return 0;
}

int cmdRunp(Client& c, const Options&, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"--runtime", true}});
  needArgs(p, 1, "a pod config file");
  v1::RunPodSandboxRequest req;
  fromJsonFile(p.positional[0], *req.mutable_config());
  if (p.flags.count("--runtime")) req.set_runtime_handler(p.flags["--runtime"]);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::RunPodSandbox, req, "RunPodSandbox");
  out << r.pod_sandbox_id() << '\n';
  return 0;
}

int cmdCreate(Client& c, const Options&, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {});
  needArgs(p, 3, "POD-ID CONTAINER-CONFIG POD-CONFIG");
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(p.positional[0]);
  fromJsonFile(p.positional[1], *req.mutable_config());
  fromJsonFile(p.positional[2], *req.mutable_sandbox_config());
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::CreateContainer, req, "CreateContainer");
  out << r.container_id() << '\n';
  return 0;
}

template <typename Req, typename Resp>
int forEachId(Client& c, const Args& ids,
              grpc::Status (v1::RuntimeService::Stub::*method)(grpc::ClientContext*, const Req&,
                                                               Resp*),
              const char* name, const std::function<void(Req&, const std::string&)>& fill,
              std::ostream& out) {
  if (ids.empty()) throw UsageError("expected at least one ID");
  for (const std::string& id : ids) {
    Req req;
    fill(req, id);
    c.call(c.runtime(), method, req, name);
    out << id << '\n';
  }
  return 0;
}

int cmdExec(Client& c, const Options&, const Args& args, std::ostream& out, std::ostream& err) {
  Parsed p = parse(args, {{"--sync", false}, {"-s", false}, {"--timeout", true}});
  needArgs(p, 2, "CONTAINER-ID CMD [ARG...]");
  v1::ExecSyncRequest req;
  req.set_container_id(p.positional[0]);
  for (size_t i = 1; i < p.positional.size(); ++i) req.add_cmd(p.positional[i]);
  if (p.flags.count("--timeout")) req.set_timeout(std::stoll(p.flags["--timeout"]));
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::ExecSync, req, "ExecSync");
  out << r.stdout();
  err << r.stderr();
  return r.exit_code();
}

int cmdUpdate(Client& c, const Options&, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"--cpuset-cpus", true}, {"--cpuset-mems", true}});
  needArgs(p, 1, "a container ID");
  v1::UpdateContainerResourcesRequest req;
  req.set_container_id(p.positional[0]);
  if (p.flags.count("--cpuset-cpus"))
    req.mutable_linux()->set_cpuset_cpus(p.flags["--cpuset-cpus"]);
  if (p.flags.count("--cpuset-mems"))
    req.mutable_linux()->set_cpuset_mems(p.flags["--cpuset-mems"]);
  c.call(c.runtime(), &v1::RuntimeService::Stub::UpdateContainerResources, req,
         "UpdateContainerResources");
  out << p.positional[0] << '\n';
  return 0;
}

int cmdExplain(const Options& o, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"--state-dir", true}, {"--root", true}});
  needArgs(p, 1, "a container ID");
  const std::string dir =
      p.flags.count("--state-dir") ? p.flags["--state-dir"] : "/var/lib/crihook";
  std::string id;
  auto state = StateStore::findContainer(dir, p.positional[0], &id);
  if (!state.ok()) throw CallError(std::string(state.status().message()));
  if (o.json) {
    hook::v1::PodState only;
    *only.mutable_pod() = state->pod();
    for (const auto& c : state->containers()) {
      if (c.id() == id) *only.add_containers() = c;
    }
    out << toJson(only);
    return 0;
  }
  const topology::Snapshot machine =
      topology::discover(topology::SysRoot(p.flags.count("--root") ? p.flags["--root"] : "/"));
  explainContainer(*state, id, out, &machine);
  return 0;
}

int cmdDevices(const Options& o, const Args& args, std::ostream& out) {
  Parsed p = parse(args, {{"--state-dir", true}, {"--root", true}});
  const std::string dir =
      p.flags.count("--state-dir") ? p.flags["--state-dir"] : "/var/lib/crihook/devices";
  if (::access(dir.c_str(), R_OK | X_OK) != 0)
    throw CallError(cat("cannot read ", dir, ": ", strerror(errno)));
  std::vector<std::string> errors;
  std::vector<DeviceRecord> records = DeviceRecordDir(dir).loadAll(errors, /*quarantine=*/false);
  std::sort(records.begin(), records.end(),
            [](const DeviceRecord& a, const DeviceRecord& b) { return a.key < b.key; });
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : records) all.push_back(r.toJson());
    out << all.dump(2) << '\n';
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"POD", "ATTEMPT", "SANDBOX", "PHASE", "DEVICES", "FAILURES", "LAST ERROR"}};
    for (const auto& r : records) {
      std::string devices;
      for (const auto& d : r.devices) {
        devices += cat(devices.empty() ? "" : ",", d.type, d.minor);
        if (!d.name.empty()) devices += cat("(", d.name, ")");
      }
      rows.push_back({cat(r.pod.namespace_, "/", r.pod.name), std::to_string(r.key.attempt),
                      r.sandbox_id.substr(0, 13), std::string(phaseName(r.phase)), devices,
                      std::to_string(r.cleanup_failures), r.last_error});
    }
    table(out, rows);
    // Where each sandbox's devices sit, so a wrong allocation shows.
    const topology::Snapshot machine =
        topology::discover(topology::SysRoot(p.flags.count("--root") ? p.flags["--root"] : "/"));
    for (const auto& r : records) {
      if (r.devices.empty()) continue;
      std::vector<topology::PodDevice> devices;
      for (const auto& d : r.devices) {
        devices.push_back({.type = d.type, .minor = d.minor, .pci = d.pci, .name = d.name});
      }
      out << "\n"
          << r.pod.namespace_ << "/" << r.pod.name << " (attempt " << r.key.attempt
          << ") on the machine (" << machine.root << "):\n"
          << topology::podPicture(machine, devices, std::nullopt);
    }
  }
  for (const auto& e : errors) out << "warning: " << e << '\n';
  return 0;
}

int cmdTopology(const Options& o, const Args& args, std::ostream& out, std::ostream& err) {
  Parsed p = parse(args, {{"--root", true},
                          {"--output", true},
                          {"--format", true},
                          {"--node", true},
                          {"--pcie-id", true}});
  const std::string output =
      p.flags.count("--output") ? p.flags["--output"] : (o.json ? "json" : "tree");
  const std::string format = p.flags.count("--format") ? p.flags["--format"] : "yaml";
  if (output != "tree" && output != "json" && output != "device-crd" && output != "matrix" &&
      output != "dot")
    throw UsageError(
        cat("--output must be tree, json, device-crd, matrix or dot, got ", quote(output)));
  if (format != "yaml" && format != "json")
    throw UsageError(cat("--format must be yaml or json, got ", format));
  topology::DeviceReportOptions report;
  if (p.flags.count("--pcie-id")) {
    const std::string& id = p.flags["--pcie-id"];
    if (id != "switch" && id != "root-complex")
      throw UsageError(cat("--pcie-id must be root-complex or switch, got ", id));
    report.pcie_id =
        id == "switch" ? topology::PcieScope::kSwitch : topology::PcieScope::kRootComplex;
  }
  const topology::Snapshot snap =
      topology::discover(topology::SysRoot(p.flags.count("--root") ? p.flags["--root"] : "/"));
  if (output == "tree") {
    out << topology::tree(snap);
  } else if (output == "matrix") {
    out << topology::matrixText(topology::connectionMatrix(snap));
  } else if (output == "dot") {
    out << topology::dot(snap);
    // The picture is for a renderer: what discovery could not read goes beside it.
    for (const std::string& w : snap.warnings) err << "warning: " << w << '\n';
  } else if (output == "json") {
    // What sysfs holds need not be UTF-8: replaced, not thrown on.
    out << topology::toJson(snap).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
        << '\n';
  } else {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    report.node_name = p.flags.count("--node") ? p.flags["--node"] : host;
    nlohmann::json device = topology::deviceObject(snap, report);
    out << (format == "json"
                ? device.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                : topology::toYaml(device));
    // The object goes to a scheduler: what it lacks (a GPU's memory, a GPU
    // without a minor) is said beside it, not in it.
    for (const std::string& w : snap.warnings) err << "warning: " << w << '\n';
    // Without its memory a GPU cannot be shared: Koordinator's scheduler
    // gives a gpu-memory-ratio request ratio x 0 bytes.
    size_t without_memory = 0, reported = 0;
    for (const topology::Gpu& g : snap.gpus) {
      if (!g.nvidia_driver || g.minor < 0) continue;
      ++reported;
      if (g.memory_bytes == 0) ++without_memory;
    }
    if (without_memory > 0) {
      err << "WARNING: " << without_memory << " of the " << reported
          << " GPU(s) in this report have no koordinator.sh/gpu-memory. Do not publish it on a "
             "node whose GPUs are shared: Koordinator's scheduler would give a pod asking for "
             "koordinator.sh/gpu-memory-ratio 0 bytes of GPU memory (crihook's gpu hook refuses "
             "such a pod). Run it where NVML answers.\n";
    }
  }
  return 0;
}

}  // namespace

int run(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  Options o;
  if (const char* env = std::getenv("CONTAINER_RUNTIME_ENDPOINT")) o.endpoint = env;
  if (o.endpoint.empty()) o.endpoint = "unix:///run/crihook/crihook.sock";
  size_t i = 0;
  try {
    for (; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argv.size()) throw UsageError(cat("flag ", a, " needs a value"));
        return argv[++i];
      };
      if (a == "-r" || a == "--runtime-endpoint") {
        o.endpoint = value();
      } else if (a == "-t" || a == "--timeout") {
        std::string v = value();
        if (!v.empty() && v.back() == 's') v.pop_back();
        o.timeout_s = std::stoi(v);
      } else if (a == "-o" || a == "--output") {
        std::string v = value();
        if (v != "json" && v != "table")
          throw UsageError(cat("output must be table or json, got ", v));
        o.json = v == "json";
      } else if (a == "-h" || a == "--help" || a == "help") {
        out << kUsage;
        return 0;
      } else if (a == "--version") {
        out << versionLine("crihookctl", version(), commit()) << '\n';
        return 0;
      } else if (!a.empty() && a[0] == '-') {
        throw UsageError(cat("unknown flag ", a));
      } else {
        break;
      }
    }
    if (i >= argv.size()) throw UsageError("no command given");
    const std::string cmd = argv[i];
    Args rest(argv.begin() + static_cast<long>(i) + 1, argv.end());
    if (cmd == "explain") return cmdExplain(o, rest, out);
    if (cmd == "devices") return cmdDevices(o, rest, out);
    if (cmd == "topology") return cmdTopology(o, rest, out, err);
    if (cmd == "status") {
      Parsed p = parse(rest, {{"--metrics", true}, {"--config", true}});
      if (!p.positional.empty()) throw UsageError("status takes no arguments");
      return status(p.flags["--metrics"], p.flags["--config"], o.json,
                    std::chrono::seconds(o.timeout_s), out, err);
    }
    Client c(o);
    if (cmd == "version") return cmdVersion(c, o, rest, out);
    if (cmd == "info") return cmdInfo(c, o, rest, out);
    if (cmd == "pods") return cmdPods(c, o, rest, out);
    if (cmd == "ps") return cmdPs(c, o, rest, out);
    if (cmd == "images" || cmd == "img") return cmdImages(c, o, rest, out);
    if (cmd == "runp") return cmdRunp(c, o, rest, out);
    if (cmd == "create") return cmdCreate(c, o, rest, out);
    if (cmd == "exec") return cmdExec(c, o, rest, out, err);
    if (cmd == "update") return cmdUpdate(c, o, rest, out);
    if (cmd == "start") {
      return forEachId<v1::StartContainerRequest, v1::StartContainerResponse>(
          c, rest, &v1::RuntimeService::Stub::StartContainer, "StartContainer",
          [](auto& r, const std::string& id) { r.set_container_id(id); }, out);
    }
    if (cmd == "stop") {
      Parsed p = parse(rest, {{"--timeout", true}, {"-t", true}});
      int64_t grace = p.flags.count("--timeout") ? std::stoll(p.flags["--timeout"])
                      : p.flags.count("-t")      ? std::stoll(p.flags["-t"])
                                                 : 0;
      return forEachId<v1::StopContainerRequest, v1::StopContainerResponse>(
          c, p.positional, &v1::RuntimeService::Stub::StopContainer, "StopContainer",
          [grace](auto& r, const std::string& id) {
            r.set_container_id(id);
            r.set_timeout(grace);
          },
          out);
    }
    if (cmd == "rm") {
      return forEachId<v1::RemoveContainerRequest, v1::RemoveContainerResponse>(
          c, rest, &v1::RuntimeService::Stub::RemoveContainer, "RemoveContainer",
          [](auto& r, const std::string& id) { r.set_container_id(id); }, out);
    }
    if (cmd == "stopp") {
      return forEachId<v1::StopPodSandboxRequest, v1::StopPodSandboxResponse>(
          c, rest, &v1::RuntimeService::Stub::StopPodSandbox, "StopPodSandbox",
          [](auto& r, const std::string& id) { r.set_pod_sandbox_id(id); }, out);
    }
    if (cmd == "rmp") {
      return forEachId<v1::RemovePodSandboxRequest, v1::RemovePodSandboxResponse>(
          c, rest, &v1::RuntimeService::Stub::RemovePodSandbox, "RemovePodSandbox",
          [](auto& r, const std::string& id) { r.set_pod_sandbox_id(id); }, out);
    }
    if (cmd == "inspect") {
      if (rest.empty()) throw UsageError("expected a container ID");
      v1::ContainerStatusRequest req;
      req.set_container_id(rest[0]);
      req.set_verbose(true);
      out << toJson(
          c.call(c.runtime(), &v1::RuntimeService::Stub::ContainerStatus, req, "ContainerStatus"));
      return 0;
    }
    if (cmd == "inspectp") {
      if (rest.empty()) throw UsageError("expected a pod ID");
      v1::PodSandboxStatusRequest req;
      req.set_pod_sandbox_id(rest[0]);
      req.set_verbose(true);
      out << toJson(c.call(c.runtime(), &v1::RuntimeService::Stub::PodSandboxStatus, req,
                           "PodSandboxStatus"));
      return 0;
    }
    if (cmd == "inspecti") {
      if (rest.empty()) throw UsageError("expected an image");
      v1::ImageStatusRequest req;
      req.mutable_image()->set_image(rest[0]);
      out << toJson(c.call(c.images(), &v1::ImageService::Stub::ImageStatus, req, "ImageStatus"));
      return 0;
    }
    throw UsageError(cat("unknown command ", cmd));
  } catch (const UsageError& e) {
    err << "crihookctl: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const CallError& e) {
    err << "crihookctl: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    err << "crihookctl: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace crihook::ctl
