#include "hooks/builtin/devices/topology_check_hook.h"

#include <set>
#include <vector>

#include "base/text.h"
#include "hooks/builtin/devices/allocation_hook.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace crihook {
namespace {

namespace topo = ::crihook::topology;

// What a joint-allocation annotation asks for.
struct JointRequest {
  std::set<std::string> types;  // "gpu", "rdma"; empty: both
  topo::Scope required = topo::Scope::kSamePcie;
  bool wants(const char* type) const { return types.empty() || types.count(type) != 0; }
};

absl::StatusOr<JointRequest> parseJointRequest(const std::string& text, const std::string& pod) {
  auto bad = [&](std::string_view field, std::string_view why) {
    return absl::InvalidArgumentError(
        cat("annotation ", kJointAllocateAnnotation, " of pod ", pod, ": ", field, ": ", why));
  };
  auto parsed = parseAnnotationJson(text, kJointAllocateAnnotation, pod);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& request = *parsed;
  if (!request.is_object()) return bad("", "expected a JSON object");
  JointRequest out;
  if (auto t = request.find("deviceTypes"); t != request.end()) {
    if (!t->is_array()) return bad("deviceTypes", cat("expected an array, got ", shownJson(*t)));
    for (const auto& x : *t) {
      if (x != "gpu" && x != "rdma")
        return bad("deviceTypes", cat("expected gpu or rdma, got ", shownJson(x)));
      out.types.insert(x.get<std::string>());
    }
  }
  if (auto sc = request.find("requiredScope"); sc != request.end()) {
    if (*sc == "SamePCIe") {
      out.required = topo::Scope::kSamePcie;
    } else if (*sc == "SameNUMANode") {
      out.required = topo::Scope::kSameNumaNode;
    } else if (*sc == "SameSocket") {
      out.required = topo::Scope::kSameSocket;
    } else {
      return bad("requiredScope",
                 cat("expected SamePCIe, SameNUMANode or SameSocket, got ", shownJson(*sc)));
    }
  }
  return out;
}

// The allocated devices of the requested types that this node has, as
// addresses. What is not on this node is the gpu and rdma hooks' to refuse;
// another vendor's GPU has no NVIDIA minor to place.
topo::DeviceSet allocatedDevices(const PodAllocation& alloc, const JointRequest& request,
                                 const topo::Snapshot& topology, const std::string& pod) {
  topo::DeviceSet devices;
  if (request.wants("gpu")) {
    for (const DeviceAllocation& d : alloc.gpu) {
      if (!isNvidiaGpu(d, &topology)) continue;
      if (const topo::Gpu* g = topology.gpuByMinor(d.minor)) devices.gpus.push_back(g->address);
    }
  }
  if (request.wants("rdma")) {
    for (size_t i = 0; i < alloc.rdma.size(); ++i) {
      auto f = resolveRdma(alloc.rdma[i], i, topology, pod);
      if (!f.ok()) continue;
      if (f->vfs.empty()) devices.rdma.push_back(f->pf->address);
      for (const std::string& vf : f->vfs) devices.rdma.push_back(vf);
    }
  }
  return devices;
}

// The CPUs of `cpus` off the NUMA nodes of `devices`, as a violation; ""
// when every one is on them.
std::string cpusOffDevices(const std::vector<int>& cpus, const topo::DeviceSet& devices,
                           const topo::Snapshot& topology) {
  std::set<int> device_nodes;
  for (const auto& a : devices.gpus) device_nodes.insert(topology.gpu(a)->where.numa_node);
  for (const auto& a : devices.rdma) {
    if (const auto* x = topology.rdmaByAddress(a)) device_nodes.insert(x->where.numa_node);
  }
  std::vector<int> off;
  for (int c : cpus) {
    const topo::Cpu* cpu = topology.cpu(c);
    if (cpu == nullptr || !device_nodes.count(cpu->node)) off.push_back(c);
  }
  if (off.empty()) return "";
  std::vector<int> nodes(device_nodes.begin(), device_nodes.end());
  return cat("CPUs ", topo::formatCpuList(off), " are not on the devices' NUMA node ",
             topo::formatCpuList(nodes));
}

class TopologyCheckHook final : public AllocationHook {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json) {
    return configure(name, settings_json, "topology-check", [&](const HookSettingsReader& r) {
      auto v = r.oneOf("on_violation", {"annotate", "reject"});
      if (!v.ok()) return v.status();
      reject_ = *v == "reject";
      // What SamePCIe means: what the Device report's pcieID names
      // (crihookctl topology --pcie-id), or the check and the scheduler's
      // view disagree.
      auto scope = r.oneOf("pcie_scope", {"root-complex", "switch"});
      if (!scope.ok()) return scope.status();
      pcie_ = *scope == "switch" ? topo::PcieScope::kSwitch : topo::PcieScope::kRootComplex;
      return absl::OkStatus();
    });
  }

 private:
  absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) override {
    const std::string* joint = annotation(in, kJointAllocateAnnotation);
    if (joint == nullptr || !in.topology) return Adjustment{};
    auto request = parseJointRequest(*joint, pod);
    if (!request.ok()) return request.status();
    auto parsed = allocation(in, pod);
    if (!parsed.ok()) return parsed.status();
    const topo::DeviceSet devices = allocatedDevices(**parsed, *request, *in.topology, pod);
    if (devices.gpus.empty() && devices.rdma.empty()) return Adjustment{};
    auto violations = violationsOf(in, *request, devices, pod);
    if (!violations.ok()) return violations.status();
    if (violations->empty()) return Adjustment{};
    std::string why;
    for (const auto& v : *violations) why += cat(why.empty() ? "" : "; ", v);
    const std::string message = cat("pod ", pod, " asked for joint allocation: ", why);
    if (reject_) return absl::FailedPreconditionError(message);
    log_->warn("{}", message);
    Adjustment a;
    a.annotations[std::string(kTopologyViolationAnnotation)] = why;
    return a;
  }

  // How `devices` and the pod's cpuset fall short of `request`.
  absl::StatusOr<std::vector<std::string>> violationsOf(const HookInput& in,
                                                        const JointRequest& request,
                                                        const topo::DeviceSet& devices,
                                                        const std::string& pod) const {
    std::vector<std::string> violations;
    auto scope = topo::sharedScope(*in.topology, devices, pcie_);
    if (!scope.ok())
      return absl::FailedPreconditionError(cat("pod ", pod, ": ", scope.status().message()));
    if (scope->scope > request.required) {
      violations.push_back(
          cat("asked for ", topo::scopeName(request.required), " but ", scope->why));
    }
    // The cpuset on the devices' NUMA node(s).
    if (const std::string* rs = annotation(in, kResourceStatusAnnotation)) {
      auto status = parseResourceStatus(*rs, pod);
      if (!status.ok()) return status.status();
      std::vector<int> cpus;
      if (status->cpuset && topo::parseCpuList(*status->cpuset, cpus)) {
        if (std::string off = cpusOffDevices(cpus, devices, *in.topology); !off.empty())
          violations.push_back(std::move(off));
      }
    }
    return violations;
  }

  bool reject_ = false;
  topo::PcieScope pcie_ = topo::PcieScope::kRootComplex;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeTopologyCheckHook(const std::string& name,
                                                            const std::string& settings_json) {
  auto hook = std::make_shared<TopologyCheckHook>();
  if (auto s = hook->init(name, settings_json); !s.ok()) return s;
  return hook;
}

}  // namespace crihook
