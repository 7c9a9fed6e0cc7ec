#include "hooks/builtin/devices/rdma_hook.h"

#include "base/text.h"
#include "hooks/builtin/devices/allocation_hook.h"
#include "hooks/builtin/devices/host_paths.h"
#include "hooks/process_env.h"
#include "topology/topology.h"

namespace crihook {
namespace {

namespace topo = ::crihook::topology;

class RdmaHook final : public AllocationHook {
 public:
  absl::Status init(const std::string& name, const std::string& settings_json) {
    auto s = configure(name, settings_json, "rdma", [&](const HookSettingsReader& r) {
      if (const auto* v = r.get("nccl_ib_hca")) {
        if (!v->is_boolean())
          return r.error("nccl_ib_hca", cat("expected true or false, got ", shownJson(*v)));
        nccl_ = v->get<bool>();
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    paths_ = std::make_unique<HostPaths>(HostPaths::Spec{device_root_ + "/infiniband", "", {}},
                                         log_, processEnv());
    return absl::OkStatus();
  }

 private:
  // What the container gets so far: rdma_cm, then a uverbs node and an HCA
  // name per function.
  struct Functions {
    Adjustment a;
    std::string hcas;
  };

  absl::StatusOr<Adjustment> decide(const HookInput& in, const std::string& pod) override {
    auto parsed = allocation(in, pod);
    if (!parsed.ok()) return parsed.status();
    const PodAllocation* alloc = parsed->get();
    if (alloc->rdma.empty()) return Adjustment{};
    Functions out;
    if (!paths_->hasEntry("rdma_cm"))
      return notHere(pod, "rdma", cat("no device node ", device_root_, "/infiniband/rdma_cm"));
    out.a.devices.push_back(device("infiniband/rdma_cm"));
    static const topo::Snapshot kNothing;
    const topo::Snapshot& t = in.topology ? *in.topology : kNothing;
    for (size_t i = 0; i < alloc->rdma.size(); ++i) {
      const std::string field = cat("rdma[", i, "]");
      auto functions = resolveRdma(alloc->rdma[i], i, t, pod);
      if (!functions.ok()) return functions.status();
      if (functions->vfs.empty()) {
        if (auto s = add(*functions->pf, field, pod, out); !s.ok()) return s;
        continue;
      }
      for (size_t j = 0; j < functions->vfs.size(); ++j) {
        const std::string vfield = cat(field, ".extension.vfs[", j, "]");
        const topo::RdmaDevice* vf = t.rdmaByAddress(functions->vfs[j]);
        if (vf == nullptr)
          return notHere(pod, vfield, cat("VF ", functions->vfs[j], " has no RDMA device"));
        if (auto s = add(*vf, vfield, pod, out); !s.ok()) return s;
      }
    }
    if (nccl_) out.a.env.push_back({"NCCL_IB_HCA", out.hcas});
    return std::move(out.a);
  }

  // Function `x` (`field` of the allocation): its uverbs node.
  absl::Status add(const topo::RdmaDevice& x, const std::string& field, const std::string& pod,
                   Functions& out) const {
    if (x.uverbs.empty()) return notHere(pod, field, cat(x.name, " has no uverbs device"));
    if (!paths_->hasEntry(x.uverbs))
      return notHere(pod, field, cat("no device node ", device_root_, "/infiniband/", x.uverbs));
    out.a.devices.push_back(device("infiniband/" + x.uverbs));
    out.hcas += cat(out.hcas.empty() ? "" : ",", x.name);
    return absl::OkStatus();
  }

  bool nccl_ = true;
  std::unique_ptr<HostPaths> paths_;  // the entries of <device_root>/infiniband
};

}  // namespace

absl::StatusOr<std::shared_ptr<Hook>> makeRdmaHook(const std::string& name,
                                                   const std::string& settings_json) {
  auto hook = std::make_shared<RdmaHook>();
  if (auto s = hook->init(name, settings_json); !s.ok()) return s;
  return hook;
}

}  // namespace crihook
