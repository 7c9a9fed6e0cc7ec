#include "allocation.h"

#include <nlohmann/json.hpp>

#include "text.h"
#include "topology.h"

namespace crihook {
namespace {

using nlohmann::json;

// Builds errors naming the annotation, the pod and the field.
class Where {
 public:
  Where(std::string_view annotation, std::string_view pod) : annotation_(annotation), pod_(pod) {}
  absl::Status bad(std::string_view field, std::string_view why) const {
    return absl::InvalidArgumentError(cat("annotation ", annotation_, " of pod ", pod_, ": ", field,
                                          field.empty() ? "" : ": ", why));
  }

 private:
  std::string_view annotation_, pod_;
};

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

absl::StatusOr<int> minorOf(const json& v, const std::string& field, const Where& w) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1 << 20)
    return w.bad(field, cat("expected a non-negative integer, got ", shown(v)));
  return static_cast<int>(v.get<int64_t>());
}

absl::StatusOr<std::map<std::string, std::string>> quantities(const json& v,
                                                              const std::string& field,
                                                              const Where& w) {
  std::map<std::string, std::string> out;
  if (!v.is_object()) return w.bad(field, cat("expected an object, got ", shown(v)));
  for (const auto& [k, x] : v.items()) {
    // Quantities arrive as strings ("100", "40Gi"); a bare number is accepted.
    if (x.is_string()) {
      out[k] = x.get<std::string>();
    } else if (x.is_number_integer()) {
      out[k] = std::to_string(x.get<int64_t>());
    } else {
      return w.bad(cat(field, ".", k), cat("expected a quantity, got ", shown(x)));
    }
  }
  return out;
}

absl::StatusOr<DeviceAllocation> device(const json& v, const std::string& field, bool rdma,
                                        const Where& w) {
  if (!v.is_object()) return w.bad(field, cat("expected an object, got ", shown(v)));
  DeviceAllocation d;
  for (const auto& [k, x] : v.items()) {
    const std::string f = cat(field, ".", k);
    if (k == "minor") {
      auto m = minorOf(x, f, w);
      if (!m.ok()) return m.status();
      d.minor = *m;
    } else if (k == "id") {
      if (!x.is_string()) return w.bad(f, cat("expected a string, got ", shown(x)));
      d.id = x.get<std::string>();
    } else if (k == "resources") {
      auto q = quantities(x, f, w);
      if (!q.ok()) return q.status();
      d.resources = std::move(*q);
    } else if (k == "extension") {
      if (!x.is_object()) return w.bad(f, cat("expected an object, got ", shown(x)));
      auto vfs = x.find("vfs");
      if (vfs == x.end()) continue;  // other extensions are the device plugin's business
      if (!rdma) return w.bad(f + ".vfs", "only RDMA devices have virtual functions");
      if (!vfs->is_array()) return w.bad(f + ".vfs", cat("expected an array, got ", shown(*vfs)));
      for (size_t i = 0; i < vfs->size(); ++i) {
        const json& vf = (*vfs)[i];
        const std::string vff = cat(f, ".vfs[", i, "]");
        if (!vf.is_object()) return w.bad(vff, cat("expected an object, got ", shown(vf)));
        VirtualFunctionAllocation a;
        auto minor = vf.find("minor");
        if (minor == vf.end()) return w.bad(vff + ".minor", "missing");
        auto m = minorOf(*minor, vff + ".minor", w);
        if (!m.ok()) return m.status();
        a.minor = *m;
        auto bus = vf.find("busID");
        if (bus != vf.end()) {
          if (!bus->is_string())
            return w.bad(vff + ".busID", cat("expected a string, got ", shown(*bus)));
          a.bus_id = bus->get<std::string>();
        }
        d.vfs.push_back(std::move(a));
      }
    }
    // Unknown keys are left alone: Koordinator adds fields over time.
  }
  if (d.minor < 0) return w.bad(field + ".minor", "missing");
  return d;
}

}  // namespace

absl::StatusOr<PodAllocation> parseDeviceAllocated(std::string_view text, std::string_view pod) {
  const Where w(kDeviceAllocatedAnnotation, pod);
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return w.bad("", "not valid JSON");
  if (!v.is_object()) return w.bad("", cat("expected an object by device type, got ", shown(v)));
  PodAllocation out;
  for (const auto& [type, list] : v.items()) {
    std::vector<DeviceAllocation>* into = type == "gpu"    ? &out.gpu
                                          : type == "rdma" ? &out.rdma
                                          : type == "fpga" ? &out.fpga
                                                           : nullptr;
    if (into == nullptr) return w.bad(type, "unknown device type (expected gpu, rdma or fpga)");
    if (!list.is_array()) return w.bad(type, cat("expected an array, got ", shown(list)));
    for (size_t i = 0; i < list.size(); ++i) {
      auto d = device(list[i], cat(type, "[", i, "]"), type == "rdma", w);
      if (!d.ok()) return d.status();
      for (const DeviceAllocation& other : *into) {
        if (other.minor == d->minor)
          return w.bad(cat(type, "[", i, "].minor"),
                       cat("minor ", d->minor, " is allocated twice"));
      }
      into->push_back(std::move(*d));
    }
  }
  return out;
}

absl::StatusOr<ResourceStatus> parseResourceStatus(std::string_view text, std::string_view pod) {
  const Where w(kResourceStatusAnnotation, pod);
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return w.bad("", "not valid JSON");
  if (!v.is_object()) return w.bad("", cat("expected an object, got ", shown(v)));
  ResourceStatus out;
  if (auto c = v.find("cpuset"); c != v.end()) {
    if (!c->is_string()) return w.bad("cpuset", cat("expected a CPU list string, got ", shown(*c)));
    out.cpuset = c->get<std::string>();
    std::vector<int> cpus;
    if (!topology::parseCpuList(*out.cpuset, cpus) || cpus.empty())
      return w.bad("cpuset", cat("expected a CPU list such as \"2-5\", got \"", *out.cpuset, "\""));
  }
  if (auto n = v.find("numaNodeResources"); n != v.end()) {
    if (!n->is_array())
      return w.bad("numaNodeResources", cat("expected an array, got ", shown(*n)));
    for (size_t i = 0; i < n->size(); ++i) {
      const json& x = (*n)[i];
      const std::string f = cat("numaNodeResources[", i, "]");
      if (!x.is_object()) return w.bad(f, cat("expected an object, got ", shown(x)));
      NumaNodeResources r;
      auto node = x.find("node");
      if (node == x.end()) return w.bad(f + ".node", "missing");
      auto m = minorOf(*node, f + ".node", w);
      if (!m.ok()) return m.status();
      r.node = *m;
      if (auto res = x.find("resources"); res != x.end()) {
        auto q = quantities(*res, f + ".resources", w);
        if (!q.ok()) return q.status();
        r.resources = std::move(*q);
      }
      out.numa_nodes.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace crihook
