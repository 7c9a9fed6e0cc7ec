#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <limits>
#include <map>
#include <set>

#include "base/quote.h"
#include "base/text.h"
#include "topology/topology.h"

namespace crihook::topology {

// A PCI address as the kernel names a device: dddd:bb:dd.f, lowercase hex,
// device 00-1f, function 0-7 (as the hooks check it, allocation.h), where
// the domain may have up to 8 digits: Intel VMD puts the NVMe drives behind
// it in domains from 10000 up, and a server with VMD on must not warn about
// each of them at every discovery. What discovery keeps of a name under
// sys/bus/pci/devices becomes a sysfs path and a hook's fact, so it is this
// or nothing.
bool isPciAddress(std::string_view s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  const size_t d = s.find(':');  // the domain's digits
  if (d < 4 || d > 8 || s.size() != d + 8) return false;
  const std::string_view rest = s.substr(d);  // :bb:dd.f
  if (rest[3] != ':' || rest[6] != '.') return false;
  for (size_t i = 0; i < d; ++i) {
    if (!hex(s[i])) return false;
  }
  for (size_t i : {1, 2, 4, 5}) {
    if (!hex(rest[i])) return false;
  }
  return rest[4] <= '1' && rest[7] >= '0' && rest[7] <= '7';
}

namespace {

constexpr long kMaxInt = std::numeric_limits<int>::max();

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t i = s.find(sep, start);
    out.push_back(s.substr(start, i - start));
    if (i == std::string::npos) return out;
    start = i + 1;
  }
}

// A decimal integer, the whole text; nullopt otherwise.
std::optional<long> toInteger(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) return std::nullopt;
  return n;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

class Reader {
 public:
  Reader(const SysRoot& root, Snapshot& snap) : root_(root), snap_(snap) {}

  std::optional<std::string> text(const std::string& path, bool required = true) {
    auto v = root_.read(path);
    if (!v && required) warn(path, "cannot be read");
    return v;
  }

  std::optional<long> integer(const std::string& path, bool required = true) {
    auto v = text(path, required);
    if (!v) return std::nullopt;
    auto n = toInteger(*v);
    if (!n) warn(path, cat("expected an integer, got ", quote(*v)));
    return n;
  }

  // An integer from `lo` to `hi`: a value past them (a 64-bit number where
  // the kernel writes an int) is a warning, not a value cut to fit.
  std::optional<int> integerIn(const std::string& path, long lo, long hi, bool required = true) {
    auto n = integer(path, required);
    if (n && (*n < lo || *n > hi)) {
      warn(path, cat("expected an integer from ", lo, " to ", hi, ", got ", *n));
      return std::nullopt;
    }
    return n ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
  }

  // The ids under `bound` (kMaxCpus or kMaxNumaNodes); a warning says how
  // many past it were dropped.
  std::vector<int> cpuList(const std::string& path, int bound = kMaxCpus) {
    std::vector<int> out;
    auto v = text(path);
    if (v && !parseCpuList(*v, out)) warn(path, cat("expected a CPU list, got ", quote(*v)));
    // parseCpuList's output is sorted.
    const auto past = std::lower_bound(out.begin(), out.end(), bound);
    if (past != out.end()) {
      const auto dropped = out.end() - past;
      warn(path, cat(dropped, dropped == 1 ? " id" : " ids", " from ", bound,
                     " up dropped: Linux has at most ", bound));
      out.erase(past, out.end());
    }
    return out;
  }

  void warn(const std::string& path, std::string_view why) {
    if (full()) return;
    snap_.warnings.push_back(cat(root_.root() == "/" ? "/" : root_.root() + "/", path, ": ", why));
  }
  // A warning about something other than a file under the root.
  void note(std::string message) {
    if (!full()) snap_.warnings.push_back(std::move(message));
  }
  // The last warning says how many were not listed.
  void finish() {
    if (dropped_ > 0) snap_.warnings.push_back(cat(dropped_, " more warnings not listed"));
  }

  const SysRoot& root() const { return root_; }

 private:
  bool full() {
    if (snap_.warnings.size() < kMaxWarnings) return false;
    ++dropped_;
    return true;
  }
  const SysRoot& root_;
  Snapshot& snap_;
  size_t dropped_ = 0;
};

void readCpusAndNodes(Reader& r, Snapshot& snap) {
  const std::string sys = "sys/devices/system/";
  std::vector<int> online = r.cpuList(sys + "cpu/online");
  std::map<int, int> node_of;  // cpu -> node
  std::vector<int> node_ids;
  if (r.root().exists(sys + "node/online")) {
    node_ids = r.cpuList(sys + "node/online", kMaxNumaNodes);
  }
  for (int n : node_ids) {
    NumaNode node;
    node.id = n;
    const std::string dir = cat(sys, "node/node", n, "/");
    node.cpus = r.cpuList(dir + "cpulist");
    for (int c : node.cpus) node_of[c] = n;
    if (auto mem = r.text(dir + "meminfo")) {
      for (const std::string& line : split(*mem, '\n')) {
        auto at = line.find("MemTotal:");
        if (at == std::string::npos) continue;
        node.memory_bytes = std::strtoull(line.c_str() + at + 9, nullptr, 10) * 1024;
      }
    }
    if (auto d = r.text(dir + "distance")) {
      for (const std::string& x : split(*d, ' ')) {
        if (!x.empty()) node.distances.push_back(std::atoi(x.c_str()));
      }
    }
    snap.nodes.push_back(std::move(node));
  }
  for (int id : online) {
    Cpu cpu;
    cpu.id = id;
    const std::string dir = cat(sys, "cpu/cpu", id, "/topology/");
    cpu.socket = r.integerIn(dir + "physical_package_id", -1, kMaxInt).value_or(-1);
    cpu.core = r.integerIn(dir + "core_id", -1, kMaxInt).value_or(-1);
    cpu.siblings = r.cpuList(dir + "thread_siblings_list");
    auto n = node_of.find(id);
    // A machine without NUMA nodes in sysfs is one node.
    cpu.node = n != node_of.end() ? n->second : (node_ids.empty() ? 0 : -1);
    snap.cpus.push_back(std::move(cpu));
  }
  if (node_ids.empty()) {
    NumaNode only;
    for (const Cpu& c : snap.cpus) only.cpus.push_back(c.id);
    snap.nodes.push_back(std::move(only));
  }
  // Each CPU's socket by id, once: a node of many CPUs none of which has a
  // socket would otherwise walk every CPU for each of its own.
  std::map<int, int> socket_of;
  for (const Cpu& c : snap.cpus) socket_of.emplace(c.id, c.socket);
  for (NumaNode& node : snap.nodes) {
    for (int c : node.cpus) {
      if (auto it = socket_of.find(c); it != socket_of.end() && it->second >= 0) {
        node.socket = it->second;
        break;
      }
    }
  }
}

void readPci(Reader& r, Snapshot& snap) {
  const std::string bus = "sys/bus/pci/devices/";
  for (const std::string& addr : r.root().list(bus)) {
    if (!isPciAddress(addr)) {
      r.warn(bus, cat("entry ", quote(addr), " is not a PCI address (dddd:bb:dd.f); skipped"));
      continue;
    }
    auto path = r.root().follow(bus + addr);
    if (!path) {
      r.warn(bus + addr, "a dangling link");
      continue;
    }
    PciDevice d;
    d.address = addr;
    const std::vector<std::string> parts = split(*path, '/');
    for (const std::string& p : parts) {
      if (p.rfind("pci", 0) == 0 && p.size() > 3 && !isPciAddress(p)) {
        d.root_complex = p;
      } else if (isPciAddress(p) && p != addr && !d.root_complex.empty()) {
        d.bridges.push_back(p);
      }
    }
    d.vendor = r.text(bus + addr + "/vendor").value_or("");
    d.device = r.text(bus + addr + "/device").value_or("");
    d.class_code = r.text(bus + addr + "/class").value_or("");
    d.reported_numa_node =
        r.integerIn(bus + addr + "/numa_node", -1, kMaxNumaNodes - 1, false).value_or(-1);
    if (auto drv = r.root().follow(*path + "/driver")) {
      d.driver = split(*drv, '/').back();
    }
    if (d.bridges.size() >= 3) d.pcie_switch = d.bridges[d.bridges.size() - 2];
    snap.pci.push_back(std::move(d));
  }
}

// Each device's effective NUMA node. A firmware that leaves a device's node
// out (numa_node -1) usually still gives its bridges one, and on a two-socket
// host "0" (what koordlet assumes) is wrong half the time: the nearest
// bridge above that knows is right. Only where none does, the first node (on
// a one-node machine, the only one).
void inferNumaNodes(Reader& r, Snapshot& snap) {
  const int fallback = snap.nodes.empty() ? 0 : snap.nodes.front().id;
  auto known = [&](int node) {
    if (snap.nodes.empty()) return node >= 0;
    return std::any_of(snap.nodes.begin(), snap.nodes.end(),
                       [&](const NumaNode& n) { return n.id == node; });
  };
  for (PciDevice& d : snap.pci) {
    if (d.reported_numa_node != -1 && !known(d.reported_numa_node)) {
      r.warn("sys/bus/pci/devices/" + d.address + "/numa_node",
             cat("NUMA node ", d.reported_numa_node, " does not exist; taken as unknown (-1)"));
      d.reported_numa_node = -1;
    }
  }
  for (PciDevice& d : snap.pci) {
    d.numa_node = d.reported_numa_node;
    d.numa_node_from.clear();
    for (auto b = d.bridges.rbegin(); d.numa_node < 0 && b != d.bridges.rend(); ++b) {
      const PciDevice* bridge = snap.pciDevice(*b);
      if (bridge != nullptr && bridge->reported_numa_node >= 0) {
        d.numa_node = bridge->reported_numa_node;
        d.numa_node_from = *b;
      }
    }
    if (d.numa_node < 0) {
      d.numa_node = fallback;
      d.numa_node_from = "none";
    }
  }
}

Locality localityOf(const Snapshot& snap, const PciDevice& d) {
  Locality l;
  l.numa_node = d.numa_node;
  l.numa_node_from = d.numa_node_from;
  l.socket = snap.socketOfNode(l.numa_node);
  l.pcie_switch = d.pcie_switch;
  l.root_port = d.rootPort();
  l.root_complex = d.root_complex;
  return l;
}

// The vendors whose display controllers are GPUs; a BMC's VGA (ASPEED
// 0x1a03, Matrox 0x102b, ...) is not one.
std::string gpuVendorName(const std::string& id) {
  if (id == "0x10de") return "nvidia";
  if (id == "0x1002") return "amd";
  if (id == "0x8086") return "intel";
  return "";
}

// The NVIDIA driver's minors: 0-254 (255 is nvidiactl's).
constexpr long kMaxNvidiaMinor = 254;

void readGpus(Reader& r, Snapshot& snap) {
  for (const PciDevice& d : snap.pci) {
    if (d.class_code.rfind("0x03", 0) != 0) continue;  // display controllers
    Gpu g;
    g.vendor = gpuVendorName(d.vendor);
    if (g.vendor.empty()) continue;
    g.address = d.address;
    g.model = cat(g.vendor, " ", d.device);
    g.where = localityOf(snap, d);
    const std::string dir = "proc/driver/nvidia/gpus/" + d.address;
    g.nvidia_driver = g.vendor == "nvidia" && (d.driver == "nvidia" || r.root().exists(dir));
    if (g.nvidia_driver) {
      const std::string info = dir + "/information";
      auto text = r.root().read(info);
      std::string problem = text ? "" : "cannot be read";  // why it has no minor
      for (const std::string& line : split(text.value_or(""), '\n')) {
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
        if (key == "Model") g.model = value;
        if (key == "GPU UUID") g.uuid = value;
        if (key != "Device Minor") continue;
        auto minor = toInteger(value);
        if (minor && *minor >= 0 && *minor <= kMaxNvidiaMinor) {
          g.minor = static_cast<int>(*minor);
        } else {
          problem = cat("Device Minor: expected 0-", kMaxNvidiaMinor, ", got ", quote(value));
        }
      }
      if (const Gpu* same = g.minor >= 0 ? snap.gpuByMinor(g.minor) : nullptr) {
        problem = cat("Device Minor ", g.minor, " is also GPU ", same->address, "'s");
        g.minor = -1;
      }
      if (g.minor < 0 && problem.empty()) problem = "no \"Device Minor\"";
      if (!problem.empty()) {
        r.warn(info, cat(problem, ": GPU ", d.address,
                         " has no minor and is left out of the Device report"));
      }
    }
    snap.gpus.push_back(std::move(g));
  }
}

void readRdma(Reader& r, Snapshot& snap) {
  const std::string cls = "sys/class/infiniband/";
  for (const std::string& name : r.root().list(cls)) {
    auto ibdir = r.root().follow(cls + name);
    auto dev = ibdir ? r.root().follow(*ibdir + "/device") : std::nullopt;
    if (!dev) {
      r.warn(cls + name + "/device", "a dangling link");
      continue;
    }
    RdmaDevice x;
    x.name = name;
    x.address = split(*dev, '/').back();
    const PciDevice* pci = snap.pciDevice(x.address);
    if (pci == nullptr) {
      r.warn(cls + name, cat("its device ", x.address, " is not a PCI device of this machine"));
      continue;
    }
    x.driver = pci->driver;
    x.where = localityOf(snap, *pci);
    for (const std::string& port : r.root().list(*ibdir + "/ports")) {
      RdmaPort p;
      p.number = std::atoi(port.c_str());
      p.state = r.text(*ibdir + "/ports/" + port + "/state").value_or("");
      p.link_layer = r.text(*ibdir + "/ports/" + port + "/link_layer").value_or("");
      x.ports.push_back(std::move(p));
    }
    for (const std::string& uv : r.root().list(*dev + "/infiniband_verbs")) {
      if (r.text(*dev + "/infiniband_verbs/" + uv + "/ibdev", false).value_or("") != name) continue;
      x.uverbs = uv;
      x.uverbs_dev = r.text(*dev + "/infiniband_verbs/" + uv + "/dev").value_or("");
    }
    x.netdevs = r.root().list(*dev + "/net");
    if (auto pf = r.root().follow(*dev + "/physfn")) {
      x.physical_function = split(*pf, '/').back();
      if (!isPciAddress(x.physical_function)) {
        r.warn(*dev + "/physfn",
               cat("leads to ", quote(x.physical_function), ", not a PCI address; ignored"));
        x.physical_function.clear();
      }
    }
    std::map<int, std::string> vfs;
    for (const std::string& e : r.root().list(*dev)) {
      if (e.rfind("virtfn", 0) != 0) continue;
      if (auto vf = r.root().follow(*dev + "/" + e)) {
        std::string a = split(*vf, '/').back();
        if (isPciAddress(a)) {
          vfs[std::atoi(e.c_str() + 6)] = std::move(a);
        } else {
          r.warn(*dev + "/" + quote(e), cat("leads to ", quote(a), ", not a PCI address; ignored"));
        }
      } else {
        r.warn(*dev + "/" + e, "a dangling link");
      }
    }
    for (auto& [i, a] : vfs) {
      x.virtual_functions.push_back(a);
      x.virtual_function_numbers.push_back(i);
    }
    snap.rdma.push_back(std::move(x));
  }
}

// NVML, when its library can be loaded (kNvmlLibrary unless the options
// name another): memory size and health of the host's NVIDIA GPUs. Without
// it the Device report has no koordinator.sh/gpu-memory, which a scheduler
// needs to place a share of a GPU: a warning, not silence.
void readNvml(Reader& r, Snapshot& snap, const DiscoverOptions& options) {
  std::vector<Gpu*> nvidia;
  for (Gpu& g : snap.gpus) {
    if (g.nvidia_driver) nvidia.push_back(&g);
  }
  if (nvidia.empty()) return;
  auto unknown = [&](std::string_view what, std::string_view why) {
    r.note(cat(what, ": ", why, "; the memory of ", nvidia.size(),
               " NVIDIA GPU(s) is unknown and the Device report has no "
               "koordinator.sh/gpu-memory for them"));
  };
  if (!options.nvml_library && snap.root != "/") {
    unknown("NVML", cat("not asked about a root other than / (", snap.root, ")"));
    return;
  }
  const std::string library = options.nvml_library.value_or(kNvmlLibrary);
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    unknown(library, cat("cannot be loaded: ", quote(e ? e : "")));
    return;
  }
  struct Memory {
    unsigned long long total, free, used;
  };
  using Init = int (*)();
  using ByBus = int (*)(const char*, void**);
  using MemoryInfo = int (*)(void*, Memory*);
  auto init = reinterpret_cast<Init>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<Init>(::dlsym(lib, "nvmlShutdown"));
  auto by_bus = reinterpret_cast<ByBus>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto memory = reinterpret_cast<MemoryInfo>(::dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  int rc = -1;
  if (!init || !shutdown || !by_bus || !memory) {
    unknown(library,
            "lacks nvmlInit_v2, nvmlShutdown, "
            "nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetMemoryInfo");
  } else if ((rc = init()) != 0) {
    unknown(library, cat("nvmlInit_v2 returned ", rc));
  } else {
    for (Gpu* g : nvidia) {
      void* handle = nullptr;
      Memory m{};
      const char* call = "nvmlDeviceGetHandleByPciBusId_v2";
      rc = by_bus(g->address.c_str(), &handle);
      if (rc == 0) {
        call = "nvmlDeviceGetMemoryInfo";
        rc = memory(handle, &m);
      }
      g->health = rc == 0;
      if (g->health) {
        g->memory_bytes = m.total;
      } else {
        r.note(cat("NVML: GPU ", g->address, ": ", call, " returned ", rc,
                   "; reported unhealthy, without koordinator.sh/gpu-memory"));
      }
    }
    shutdown();
  }
  ::dlclose(lib);
}

}  // namespace

const std::string& PciDevice::rootPort() const {
  static const std::string none;
  return bridges.empty() ? none : bridges.front();
}

bool RdmaDevice::portsActive() const {
  // koordlet: every port's state contains ACTIVE, and a device without ports
  // is unhealthy.
  return !ports.empty() && std::all_of(ports.begin(), ports.end(), [](const RdmaPort& p) {
    return p.state.find("ACTIVE") != std::string::npos;
  });
}

std::string_view pcieScopeName(PcieScope scope) {
  return scope == PcieScope::kSwitch ? "switch" : "root-complex";
}

const std::string& pcieId(const Locality& l, PcieScope scope) {
  if (scope == PcieScope::kRootComplex || l.root_port.empty()) return l.root_complex;
  return l.pcie_switch.empty() ? l.root_port : l.pcie_switch;
}

const PciDevice* Snapshot::pciDevice(std::string_view address) const {
  auto it = std::lower_bound(pci.begin(), pci.end(), address,
                             [](const PciDevice& d, std::string_view a) { return d.address < a; });
  return it != pci.end() && it->address == address ? &*it : nullptr;
}

namespace {
template <typename T, typename Pred>
const T* findIn(const std::vector<T>& items, Pred pred) {
  auto it = std::find_if(items.begin(), items.end(), pred);
  return it == items.end() ? nullptr : &*it;
}
}  // namespace

const Gpu* Snapshot::gpu(std::string_view address) const {
  return findIn(gpus, [&](const Gpu& g) { return g.address == address; });
}

const Gpu* Snapshot::gpuByMinor(int minor) const {
  return findIn(gpus, [&](const Gpu& g) { return g.minor == minor; });
}

const RdmaDevice* Snapshot::rdmaByName(std::string_view name) const {
  return findIn(rdma, [&](const RdmaDevice& x) { return x.name == name; });
}

const RdmaDevice* Snapshot::rdmaByAddress(std::string_view address) const {
  return findIn(rdma, [&](const RdmaDevice& x) { return x.address == address; });
}

const Cpu* Snapshot::cpu(int id) const {
  return findIn(cpus, [&](const Cpu& c) { return c.id == id; });
}

int Snapshot::socketOfNode(int node) const {
  for (const NumaNode& n : nodes) {
    if (n.id == node) return n.socket;
  }
  return -1;
}

bool parseCpuList(std::string_view text, std::vector<int>& out) {
  out.clear();
  if (text.empty()) return true;
  // Ranges are merged before they are expanded: text from a pod annotation
  // may repeat "0-65535" thousands of times, and expanding each would cost
  // gigabytes and seconds; merged, the output holds each CPU once.
  std::vector<std::pair<long, long>> ranges;
  for (const std::string& part : split(std::string(text), ',')) {
    char* end = nullptr;
    long lo = std::strtol(part.c_str(), &end, 10);
    long hi = lo;
    if (end == part.c_str()) return false;
    if (*end == '-') {
      const char* start = end + 1;
      hi = std::strtol(start, &end, 10);
      if (end == start) return false;
    }
    if (*end != '\0' || lo < 0 || hi < lo || hi > 65535) return false;
    ranges.emplace_back(lo, hi);
  }
  std::sort(ranges.begin(), ranges.end());
  long next = 0;  // the first CPU not yet in `out`
  for (auto [lo, hi] : ranges) {
    for (long c = std::max(lo, next); c <= hi; ++c) out.push_back(static_cast<int>(c));
    next = std::max(next, hi + 1);
  }
  return true;
}

std::string cpusOrNone(const std::vector<int>& cpus) {
  return cpus.empty() ? "none" : formatCpuList(cpus);
}

std::string formatCpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += cat(out.empty() ? "" : ",", cpus[i]);
    if (j > i) out += cat("-", cpus[j]);
    i = j + 1;
  }
  return out;
}

Snapshot discover(const SysRoot& root, const DiscoverOptions& options) {
  Snapshot snap;
  snap.root = root.root();
  Reader r(root, snap);
  readCpusAndNodes(r, snap);
  readPci(r, snap);
  inferNumaNodes(r, snap);
  readGpus(r, snap);
  readRdma(r, snap);
  if (auto v = root.read("proc/driver/nvidia/version")) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct ..."
    auto at = v->find("Kernel Module");
    if (at != std::string::npos) {
      std::string rest = trim(v->substr(at + 13));
      snap.nvidia_driver_version = rest.substr(0, rest.find(' '));
    }
  }
  readNvml(r, snap, options);
  r.finish();
  return snap;
}

}  // namespace crihook::topology
