#include "tools/crihookctl/devices.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "hooks/builtin/lifecycle/records.h"
#include "topology/topology.h"
#include "topology/views.h"

namespace crihook::ctl {
namespace {

void printRecords(const std::vector<DeviceRecord>& records, std::ostream& out) {
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
  printTable(out, rows);
}

// Where each sandbox's devices sit, so a wrong allocation shows.
void printPlacement(const std::vector<DeviceRecord>& records, const std::string& root,
                    std::ostream& out) {
  const topology::Snapshot machine = topology::discover(topology::SysRoot(root));
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

}  // namespace

absl::StatusOr<int> cmdDevices(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--state-dir", true}, {"--root", true}});
  if (!p.ok()) return p.status();
  const std::string dir = p->get("--state-dir", "/var/lib/crihook/devices");
  if (::access(dir.c_str(), R_OK | X_OK) != 0)
    return absl::UnavailableError(cat("cannot read ", dir, ": ", std::strerror(errno)));
  std::vector<std::string> errors;
  std::vector<DeviceRecord> records = DeviceRecordDir(dir).loadAll(errors, /*quarantine=*/false);
  std::sort(records.begin(), records.end(),
            [](const DeviceRecord& a, const DeviceRecord& b) { return a.key < b.key; });
  if (in.options.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : records) all.push_back(r.toJson());
    in.out << all.dump(2) << '\n';
  } else {
    printRecords(records, in.out);
    printPlacement(records, p->get("--root", "/"), in.out);
  }
  for (const auto& e : errors) in.out << "warning: " << e << '\n';
  return 0;
}

}  // namespace crihook::ctl
