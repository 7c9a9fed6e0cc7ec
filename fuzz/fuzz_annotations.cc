// The pod annotations crihook reads, which anyone who can create a pod
// writes: the device-allocated and resource-status parsers, the shared JSON
// reader every annotation goes through (parseAnnotationJson, which the
// topology-check hook uses for device-joint-allocate), CPU lists and
// Kubernetes quantities. Every input goes to every parser.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "base/quote.h"
#include "base/text.h"
#include "hooks/builtin/devices/allocation.h"
#include "topology/topology.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_annotations: %s\n", what);
    std::abort();
  }
}

constexpr std::string_view kPod = "default/fuzz-0";
constexpr std::string_view kJointAllocate = "scheduling.koordinator.sh/device-joint-allocate";

// What a message may hold of the input (the cut of shownJson and
// quote) plus the fixed wording around it.
constexpr size_t kMaxMessageBytes = 1024;

void checkMessage(const absl::Status& s) {
  check(!s.ok(), "checkMessage on OK");
  check(s.code() == absl::StatusCode::kInvalidArgument, "not INVALID_ARGUMENT");
  check(s.message().size() <= kMaxMessageBytes, "an error message not cut short");
  check(crihook::sv(s.message()).find(kPod) != std::string_view::npos,
        "an error message not naming the pod");
}

void cpuList(std::string_view text) {
  std::vector<int> cpus;
  if (!crihook::topology::parseCpuList(text, cpus)) return;
  for (size_t i = 0; i < cpus.size(); ++i) {
    check(cpus[i] >= 0 && cpus[i] <= 65535, "a CPU out of range");
    check(i == 0 || cpus[i - 1] < cpus[i], "CPUs not sorted and unique");
  }
  std::vector<int> again;
  check(crihook::topology::parseCpuList(crihook::topology::formatCpuList(cpus), again),
        "formatCpuList wrote what parseCpuList refuses");
  check(again == cpus, "formatCpuList and parseCpuList disagree");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto alloc = crihook::parseDeviceAllocated(text, kPod);
  if (!alloc.ok()) {
    checkMessage(alloc.status());
  } else {
    for (const auto* list : {&alloc->gpu, &alloc->rdma, &alloc->fpga}) {
      check(list->size() <= crihook::kMaxDevicesPerType, "more devices than kMaxDevicesPerType");
      for (const auto& d : *list) {
        check(d.vfs.size() <= crihook::kMaxVirtualFunctions, "more VFs than kMaxVirtualFunctions");
        for (const auto& vf : d.vfs)
          check(crihook::isPciAddress(vf.bus_id), "a VF busID unchecked");
        (void)crihook::passthroughName(d);
        (void)crihook::isNvidiaGpu(d, nullptr);
      }
    }
    for (const auto& d : alloc->rdma) {
      check(d.id.empty() || crihook::isPciAddress(d.id), "an RDMA id that is no PCI address");
    }
  }

  auto status = crihook::parseResourceStatus(text, kPod);
  if (!status.ok()) {
    checkMessage(status.status());
  } else if (status->cpuset) {
    cpuList(*status->cpuset);
  }

  auto json = crihook::parseAnnotationJson(text, kJointAllocate, kPod);
  if (!json.ok()) {
    checkMessage(json.status());
  } else {
    // At most kMaxQuotedBytes of the value, each byte at most \xNN, quotes and "...".
    check(crihook::shownJson(*json).size() <= 4 * crihook::kMaxQuotedBytes + 5,
          "shownJson not cut");
  }

  cpuList(text);
  if (auto q = crihook::parseQuantity(text)) (void)*q;
  check(crihook::quote(text).size() >= 2, "quote without quotes");
  return 0;
}
