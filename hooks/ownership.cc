#include "hooks/ownership.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "base/text.h"
#include "hooks/adjustment_schema.h"

namespace crihook {
namespace {

constexpr std::string_view kDeviceEnv[] = {"NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_LIMIT",
                                           "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD", "NCCL_IB_HCA"};
constexpr std::string_view kPerDeviceMemoryLimit = "CUDA_DEVICE_MEMORY_LIMIT_";

bool deviceEnv(std::string_view name) {
  if (std::find(std::begin(kDeviceEnv), std::end(kDeviceEnv), name) != std::end(kDeviceEnv))
    return true;
  if (!name.starts_with(kPerDeviceMemoryLimit)) return false;
  const std::string_view index = name.substr(kPerDeviceMemoryLimit.size());
  return !index.empty() && std::all_of(index.begin(), index.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    out.push_back(item);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

// The GPU one entry of NVIDIA_VISIBLE_DEVICES names, as "minor N", or the
// entry itself (prefixed so it never equals a minor) when it names none of
// the node's GPUs.
std::string gpuOf(std::string_view entry, const topology::Snapshot* topo) {
  if (topo != nullptr && !entry.empty()) {
    const bool digits =
        entry.size() <= 9 && std::all_of(entry.begin(), entry.end(), [](char c) {
          return c >= '0' && c <= '9';
        });
    const topology::Gpu* g = nullptr;
    if (digits) {
      g = topo->gpuByMinor(std::stoi(std::string(entry)));
    } else {
      for (const topology::Gpu& x : topo->gpus) {
        if (x.nvidia_driver && ((!x.uuid.empty() && x.uuid == entry) || x.address == entry)) {
          g = &x;
          break;
        }
      }
    }
    if (g != nullptr && g->nvidia_driver && g->minor >= 0) return cat("minor ", g->minor);
  }
  return cat("as written ", entry);
}

bool sameGpus(std::string_view a, std::string_view b, const topology::Snapshot* topo) {
  auto gpus = [&](std::string_view text) {
    std::set<std::string> out;
    for (std::string_view entry : split(text)) out.insert(gpuOf(entry, topo));
    return out;
  };
  return gpus(a) == gpus(b);
}

bool sameCpus(std::string_view a, std::string_view b) {
  std::vector<int> x, y;
  if (!topology::parseCpuList(a, x) || !topology::parseCpuList(b, y)) return false;
  std::sort(x.begin(), x.end());
  x.erase(std::unique(x.begin(), x.end()), x.end());
  std::sort(y.begin(), y.end());
  y.erase(std::unique(y.begin(), y.end()), y.end());
  return x == y;
}

}  // namespace

OwnerClass ownerClassOf(const FieldKey& key) {
  switch (key.field) {
    case Field::kEnv:
      return deviceEnv(key.key) ? OwnerClass::kDeviceEnv : OwnerClass::kOther;
    case Field::kMount:
    case Field::kDevice:
    case Field::kCdi:
      return OwnerClass::kDeviceEnv;  // Koordinator's protocol cannot carry them
    case Field::kCpusetCpus:
    case Field::kCpusetMems:
      return OwnerClass::kCpuset;
    case Field::kCpuShares:
    case Field::kCpuQuota:
    case Field::kCpuPeriod:
    case Field::kMemoryLimitBytes:
    case Field::kMemorySwapLimitBytes:
    case Field::kOomScoreAdj:
    case Field::kHugepage:
    case Field::kUnified:
      return OwnerClass::kResources;
    case Field::kAnnotation:
    case Field::kLabel:
    case Field::kCgroupParent:
    case Field::kSupplementalGroup:
      return OwnerClass::kOther;
  }
  return OwnerClass::kOther;
}

bool sameDecision(const FieldKey& key, std::string_view a, std::string_view b,
                  const topology::Snapshot* topology) {
  if (a == b) return true;
  if (a == kRemoved || b == kRemoved) return false;
  switch (key.field) {
    case Field::kEnv:
      return key.key == "NVIDIA_VISIBLE_DEVICES" && sameGpus(a, b, topology);
    case Field::kCpusetCpus:
    case Field::kCpusetMems:
      return sameCpus(a, b);
    default:
      return false;
  }
}

}  // namespace crihook
