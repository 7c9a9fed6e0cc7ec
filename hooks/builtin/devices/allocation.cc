#include "hooks/builtin/devices/allocation.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "base/bounded_json.h"
#include "base/quote.h"
#include "base/text.h"
#include "topology/report.h"
#include "topology/topology.h"

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

std::string shown(const json& v) { return shownJson(v); }

absl::StatusOr<int> minorOf(const json& v, const std::string& field, const Where& w) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1 << 20)
    return w.bad(field, cat("expected a non-negative integer, got ", shown(v)));
  return static_cast<int>(v.get<int64_t>());
}

// The text, once its size and nesting are within bounds.
absl::StatusOr<json> parseBounded(std::string_view text, const Where& w) {
  if (text.size() > kMaxAnnotationBytes) {
    return w.bad("", cat(text.size(), " bytes, more than the ", kMaxAnnotationBytes,
                         " Kubernetes allows for all of a pod's annotations"));
  }
  auto v = parseJsonBounded(text, kMaxAnnotationBytes, kMaxJsonDepth);
  if (!v.ok()) return w.bad("", sv(v.status().message()));
  return v;
}

// The lowest CPU of a CPU list that is `count` or above (-1: none), found
// without expanding the list; nullopt when it is not a CPU list (as
// parseCpuList judges it).
std::optional<long> firstCpuFrom(std::string_view text, long count) {
  auto number = [](std::string_view s, long& out) {
    if (s.empty() || s.size() > 6) return false;
    out = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    return true;
  };
  long first = -1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view part = text.substr(start, comma - start);
    const size_t dash = part.find('-');
    long lo = 0, hi = 0;
    if (!number(part.substr(0, dash), lo)) return std::nullopt;
    hi = lo;
    if (dash != std::string_view::npos && !number(part.substr(dash + 1), hi)) return std::nullopt;
    if (hi < lo || hi > 65535) return std::nullopt;
    if (hi >= count) {
      const long beyond = std::max(lo, count);
      first = first < 0 ? beyond : std::min(first, beyond);
    }
    start = comma + 1;
  }
  return first;
}

absl::StatusOr<std::map<std::string, std::string>> quantities(const json& v,
                                                              const std::string& field,
                                                              const Where& w) {
  std::map<std::string, std::string> out;
  if (v.is_null()) return out;  // Go writes a nil ResourceList as null
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
      // An RDMA id becomes a sysfs path and a command argument.
      if (rdma && !isPciAddress(d.id))
        return w.bad(f, cat("expected a PCI address such as 0000:1f:00.0, got ", shown(x)));
    } else if (k == "resources") {
      auto q = quantities(x, f, w);
      if (!q.ok()) return q.status();
      d.resources = std::move(*q);
    } else if (k == "extension") {
      if (x.is_null()) continue;
      if (!x.is_object()) return w.bad(f, cat("expected an object, got ", shown(x)));
      auto vfs = x.find("vfs");
      if (vfs == x.end() || vfs->is_null()) continue;  // other extensions: the device plugin's
      if (!vfs->is_array()) return w.bad(f + ".vfs", cat("expected an array, got ", shown(*vfs)));
      if (vfs->size() > kMaxVirtualFunctions)
        return w.bad(f + ".vfs", cat(vfs->size(), " VFs, more than ", kMaxVirtualFunctions));
      for (size_t i = 0; i < vfs->size(); ++i) {
        const json& vf = (*vfs)[i];
        const std::string vff = cat(f, ".vfs[", i, "]");
        if (!vf.is_object()) return w.bad(vff, cat("expected an object, got ", shown(vf)));
        VirtualFunctionAllocation a;
        // koordlet reports every VF with minor -1 and the scheduler copies
        // it; Go leaves out a 0. Read for what it is, never used.
        if (auto minor = vf.find("minor"); minor != vf.end()) {
          if (!minor->is_number_integer() || minor->get<int64_t>() < -1 ||
              minor->get<int64_t>() > 1 << 20)
            return w.bad(vff + ".minor", cat("expected an integer from -1, got ", shown(*minor)));
          a.minor = static_cast<int>(minor->get<int64_t>());
        }
        auto bus = vf.find("busID");
        if (bus == vf.end()) return w.bad(vff + ".busID", "missing (a VF is found by its busID)");
        if (!bus->is_string() || !isPciAddress(bus->get<std::string>()))
          return w.bad(vff + ".busID",
                       cat("expected a PCI address such as 0000:1f:00.2, got ", shown(*bus)));
        a.bus_id = bus->get<std::string>();
        for (const VirtualFunctionAllocation& other : d.vfs) {
          if (other.bus_id == a.bus_id)
            return w.bad(vff + ".busID", cat("VF ", a.bus_id, " is allocated twice"));
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

absl::StatusOr<nlohmann::json> parseAnnotationJson(std::string_view text,
                                                   std::string_view annotation,
                                                   std::string_view pod) {
  return parseBounded(text, Where(annotation, pod));
}

absl::StatusOr<PodAllocation> parseDeviceAllocated(std::string_view text, std::string_view pod) {
  const Where w(kDeviceAllocatedAnnotation, pod);
  auto parsed = parseBounded(text, w);
  if (!parsed.ok()) return parsed.status();
  const json& v = *parsed;
  PodAllocation out;
  // What Koordinator's Go types decode it to (DeviceAllocations, a map of
  // []*DeviceAllocation): null is no devices, a null list none of that
  // type, a null element no device.
  if (v.is_null()) return out;
  if (!v.is_object()) return w.bad("", cat("expected an object by device type, got ", shown(v)));
  for (const auto& [type, list] : v.items()) {
    std::vector<DeviceAllocation>* into = type == "gpu"    ? &out.gpu
                                          : type == "rdma" ? &out.rdma
                                          : type == "fpga" ? &out.fpga
                                                           : nullptr;
    if (into == nullptr) return w.bad(type, "unknown device type (expected gpu, rdma or fpga)");
    if (list.is_null()) continue;
    if (!list.is_array()) return w.bad(type, cat("expected an array, got ", shown(list)));
    if (list.size() > kMaxDevicesPerType)
      return w.bad(type, cat(list.size(), " devices, more than ", kMaxDevicesPerType));
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].is_null()) continue;
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

absl::StatusOr<ResourceStatus> parseResourceStatus(std::string_view text, std::string_view pod,
                                                   const topology::Snapshot* node) {
  const Where w(kResourceStatusAnnotation, pod);
  auto parsed = parseBounded(text, w);
  if (!parsed.ok()) return parsed.status();
  const json& v = *parsed;
  if (!v.is_object()) return w.bad("", cat("expected an object, got ", shown(v)));
  ResourceStatus out;
  if (auto c = v.find("cpuset"); c != v.end()) {
    if (!c->is_string()) return w.bad("cpuset", cat("expected a CPU list string, got ", shown(*c)));
    const std::string& list = c->get_ref<const std::string&>();
    if (list.size() > kMaxCpuListBytes) {
      return w.bad("cpuset", cat(list.size(), " bytes, more than the ", kMaxCpuListBytes,
                                 " a CPU list takes"));
    }
    // Checked before the list is expanded: "0-65535" repeated is short text
    // for a great many CPUs.
    long count = 65536;  // parseCpuList's own bound
    if (node != nullptr) {
      count = 0;
      for (const topology::Cpu& cpu : node->cpus) count = std::max<long>(count, cpu.id + 1);
    }
    const std::optional<long> beyond = firstCpuFrom(list, count);
    if (!beyond)
      return w.bad("cpuset", cat("expected a CPU list such as \"2-5\", got ", shown(*c)));
    if (*beyond >= 0) {
      return absl::FailedPreconditionError(cat("annotation ", kResourceStatusAnnotation, " of pod ",
                                               pod, ": cpuset: CPU ", *beyond,
                                               " is beyond this node's ", count, " CPUs"));
    }
    std::vector<int> cpus;
    if (!topology::parseCpuList(list, cpus) || cpus.empty())
      return w.bad("cpuset", cat("expected a CPU list such as \"2-5\", got ", shown(*c)));
    out.cpuset = list;
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

bool isPciAddress(std::string_view s) { return topology::isPciAddress(s); }

bool isNvidiaGpuUuid(std::string_view s) {
  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  if (s.size() != 40 || s.substr(0, 4) != "GPU-") return false;
  for (size_t i = 4; i < s.size(); ++i) {
    const bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

bool isNvidiaGpu(const DeviceAllocation& d, const topology::Snapshot* t) {
  if (!d.id.empty()) {
    if (d.id.rfind("GPU-", 0) == 0) return true;
    // crihook's own Device report names a GPU whose driver gives no UUID by
    // its PCI address.
    const topology::Gpu* g = t ? t->gpu(d.id) : nullptr;
    return g != nullptr && g->vendor == "nvidia";
  }
  return t != nullptr && std::any_of(t->gpus.begin(), t->gpus.end(),
                                     [](const topology::Gpu& g) { return g.vendor == "nvidia"; });
}

std::string passthroughName(const DeviceAllocation& d) {
  if (d.id.empty()) return cat("minor ", d.minor);
  constexpr size_t kMaxBytes = 64;
  if (d.id.size() <= kMaxBytes) return d.id;
  // Cut on a character boundary: the text goes into a protobuf string.
  size_t n = kMaxBytes - 3;
  while (n > 0 && (static_cast<unsigned char>(d.id[n]) & 0xC0) == 0x80) --n;
  return d.id.substr(0, n) + "...";
}

absl::StatusOr<RdmaFunctions> resolveRdma(const DeviceAllocation& d, size_t index,
                                          const topology::Snapshot& t, std::string_view pod) {
  const std::string field = cat("rdma[", index, "]");
  auto not_here = [&](std::string_view f, std::string_view why) {
    return absl::FailedPreconditionError(
        cat("annotation ", kDeviceAllocatedAnnotation, " of pod ", pod, ": ", f, ": ", why));
  };
  RdmaFunctions out;
  if (!d.id.empty()) {
    out.pf = t.rdmaByAddress(d.id);
    if (out.pf == nullptr || out.pf->isVirtualFunction())
      return not_here(field + ".id", cat("no RDMA physical function ", d.id, " on this node"));
  } else {
    // The minor the node's Device report gives it (mlx*_N as koordlet
    // numbers it, other RDMA devices after those): what the scheduler saw.
    for (const auto& [minor, x] : topology::rdmaMinors(t)) {
      if (minor == d.minor) {
        out.pf = x;
        break;
      }
    }
    if (out.pf == nullptr) {
      return not_here(field + ".minor", cat("no RDMA physical function with minor ", d.minor,
                                            " on this node (no id: found by the Device report's "
                                            "minor, mlx*_N as koordlet numbers it)"));
    }
  }
  const std::vector<std::string>& own = out.pf->virtual_functions;
  for (size_t j = 0; j < d.vfs.size(); ++j) {
    const std::string& bus = d.vfs[j].bus_id;
    auto it = std::find(own.begin(), own.end(), bus);
    if (it == own.end()) {
      return not_here(cat(field, ".extension.vfs[", j, "].busID"),
                      cat(bus, " is not a VF of ", out.pf->name, " (", out.pf->address, ")"));
    }
    out.vfs.push_back(bus);
    // Its virtfn<N>, not its place in the list: a dangling virtfn link (a VF
    // being torn down) leaves a gap that would shift every later VF.
    const size_t k = static_cast<size_t>(it - own.begin());
    const std::vector<int>& numbers = out.pf->virtual_function_numbers;
    out.vf_numbers.push_back(k < numbers.size() ? numbers[k] : -1);
  }
  return out;
}

std::optional<int64_t> parseQuantity(std::string_view text) {
  // <digits>[.<digits>]<suffix>: the binary (Ki..Ei) and decimal (n, u, m,
  // k, M..E) suffixes and decimal exponents (e3, E-2).
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  std::string digits;  // the significand without its point
  int exponent10 = 0;
  bool seen_point = false, seen_digit = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      seen_digit = true;
      if (digits.empty() && c == '0') {
        if (seen_point) --exponent10;
        continue;
      }
      digits += c;
      if (seen_point) --exponent10;
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (!seen_digit) return std::nullopt;
  const std::string_view suffix = text.substr(i);
  static const std::pair<std::string_view, int> kBinary[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30},
                                                             {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  static const std::pair<std::string_view, int> kDecimal[] = {
      {"n", -9}, {"u", -6}, {"m", -3}, {"", 0},   {"k", 3},
      {"M", 6},  {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  int shift2 = 0;
  bool known = false;
  for (const auto& [s, e] : kBinary) {
    if (suffix == s) shift2 = e, known = true;
  }
  for (const auto& [s, e] : kDecimal) {
    if (suffix == s) exponent10 += e, known = true;
  }
  if (!known && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int e = 0;
    bool negative = false;
    size_t j = 1;
    if (suffix[j] == '-' || suffix[j] == '+') negative = suffix[j++] == '-';
    if (j == suffix.size()) return std::nullopt;
    for (; j < suffix.size(); ++j) {
      if (suffix[j] < '0' || suffix[j] > '9' || e > 100) return std::nullopt;
      e = e * 10 + (suffix[j] - '0');
    }
    exponent10 += negative ? -e : e;
    known = true;
  }
  if (!known) return std::nullopt;
  if (digits.empty()) return 0;
  // value = digits * 10^exponent10 * 2^shift2, rounded up; exact in 128 bits.
  unsigned __int128 v = 0;
  const unsigned __int128 kMax = static_cast<unsigned __int128>(INT64_MAX);
  for (char c : digits) {
    v = v * 10 + static_cast<unsigned>(c - '0');
    if (v > kMax * 1000) return std::nullopt;
  }
  for (; exponent10 > 0; --exponent10) {
    v *= 10;
    if (v > kMax * 1000) return std::nullopt;
  }
  if (v > (~static_cast<unsigned __int128>(0) >> shift2)) return std::nullopt;
  v <<= shift2;
  unsigned __int128 divisor = 1;
  for (; exponent10 < 0; ++exponent10) {
    divisor *= 10;
    if (divisor > kMax * 1000)
      return v == 0 ? std::optional<int64_t>(0) : std::optional<int64_t>(1);
  }
  const unsigned __int128 q = (v + divisor - 1) / divisor;
  if (q > kMax) return std::nullopt;
  return static_cast<int64_t>(q);
}

}  // namespace crihook
