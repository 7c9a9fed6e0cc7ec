#include "confine/capabilities.h"

#include <dirent.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <fstream>

#include "base/text.h"

namespace crihook::confine {
namespace {

// Names by number, as <linux/capability.h> (6.x) defines them.
constexpr std::string_view kNames[] = {
    "CAP_CHOWN",           "CAP_DAC_OVERRIDE",    "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
    "CAP_FSETID",          "CAP_KILL",            "CAP_SETGID",          "CAP_SETUID",
    "CAP_SETPCAP",         "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",       "CAP_NET_RAW",         "CAP_IPC_LOCK",        "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",      "CAP_SYS_RAWIO",       "CAP_SYS_CHROOT",      "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",       "CAP_SYS_ADMIN",       "CAP_SYS_BOOT",        "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",    "CAP_SYS_TIME",        "CAP_SYS_TTY_CONFIG",  "CAP_MKNOD",
    "CAP_LEASE",           "CAP_AUDIT_WRITE",     "CAP_AUDIT_CONTROL",   "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",    "CAP_MAC_ADMIN",       "CAP_SYSLOG",          "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",   "CAP_AUDIT_READ",      "CAP_PERFMON",         "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
};
constexpr int kKnown = static_cast<int>(std::size(kNames));

}  // namespace

int processThreadCount() {
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

absl::StatusOr<CapSet> parseCapabilities(const std::vector<std::string>& names,
                                         std::string_view field) {
  CapSet set = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string upper;
    for (char c : names[i].substr(0, 64)) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (upper.rfind("CAP_", 0) != 0) upper = "CAP_" + upper;
    int found = -1;
    for (int c = 0; c < kKnown && found < 0; ++c)
      if (kNames[c] == upper) found = c;
    if (found < 0)
      return absl::InvalidArgumentError(cat(field, "[", i, "]: unknown capability \"",
                                            names[i].substr(0, 64), "\""));
    set |= CapSet{1} << found;
  }
  return set;
}

std::string capabilityNames(CapSet set) {
  std::string out;
  for (int c = 0; c < 64; ++c) {
    if (!(set & (CapSet{1} << c))) continue;
    if (!out.empty()) out += ",";
    out += c < kKnown ? std::string(kNames[c]) : cat("cap_", c);
  }
  return out.empty() ? "none" : out;
}

int lastCapability() {
  std::ifstream f("/proc/sys/kernel/cap_last_cap");
  int last = -1;
  if (f >> last && last >= 0 && last < 64) return last;
  return CAP_LAST_CAP;
}

absl::Status keepOnlyCapabilities(CapSet keep) {
  if (int n = processThreadCount(); n != 1)
    return absl::FailedPreconditionError(
        cat("capabilities: the process has ", n, " threads; they are dropped per thread, so "
            "only while it has one"));
  const int last = lastCapability();
  // CAP_SETPCAP last: dropping from the bounding set needs it.
  auto drop = [](int c) -> absl::Status {
    if (::prctl(PR_CAPBSET_READ, c, 0, 0, 0) != 1) return absl::OkStatus();  // not in it
    if (::prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == 0) return absl::OkStatus();
    return absl::FailedPreconditionError(cat("capabilities: cannot drop ",
                                             capabilityNames(CapSet{1} << c),
                                             " from the bounding set: ", strerror(errno)));
  };
  for (int c = 0; c <= last; ++c) {
    if (c == CAP_SETPCAP || (keep & (CapSet{1} << c))) continue;
    if (auto s = drop(c); !s.ok()) return s;
  }
  if (!(keep & (CapSet{1} << CAP_SETPCAP))) {
    if (auto s = drop(CAP_SETPCAP); !s.ok()) return s;
  }
  (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0)
    return absl::FailedPreconditionError(cat("capabilities: capget: ", strerror(errno)));
  const CapSet permitted = data[0].permitted | (CapSet{data[1].permitted} << 32);
  const CapSet kept = permitted & keep;
  for (int i = 0; i < 2; ++i) {
    data[i].permitted = data[i].effective = static_cast<uint32_t>(kept >> (32 * i));
    data[i].inheritable = 0;
  }
  if (::syscall(SYS_capset, &header, data) != 0)
    return absl::FailedPreconditionError(cat("capabilities: capset: ", strerror(errno)));
  return absl::OkStatus();
}

absl::StatusOr<CapStatus> readCapStatus(const std::string& pid) {
  const std::string path = "/proc/" + pid + "/status";
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(cat("cannot read ", path));
  CapStatus s;
  std::string line;
  int seen = 0;
  while (std::getline(f, line) && seen < 3) {
    auto value = [&](std::string_view key, CapSet& out) {
      if (line.rfind(key, 0) != 0) return;
      out = std::stoull(line.substr(key.size()), nullptr, 16);
      ++seen;
    };
    value("CapEff:", s.effective);
    value("CapPrm:", s.permitted);
    value("CapBnd:", s.bounding);
  }
  if (seen != 3) return absl::InvalidArgumentError(cat(path, ": no CapEff/CapPrm/CapBnd lines"));
  return s;
}

}  // namespace crihook::confine
