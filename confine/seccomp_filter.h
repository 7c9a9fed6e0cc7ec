#pragma once

// crihookd's seccomp filter: an allow-list of the system calls it makes once
// started (config read, sockets bound, modules loaded, topology discovered),
// installed with PR_SET_NO_NEW_PRIVS and synchronised to every thread
// (SCMP_FLTATR_CTL_TSYNC: gRPC, the event loops and the hook pool already
// run). What is not on the list gets the mode's action.
//
// An operator who meets a refused call runs crihookd with
// `[security] seccomp = "log"`: everything is allowed, and each call off the
// list is written by the kernel to the audit log / kernel log
// (`dmesg | grep 'type=1326'` or `ausearch -m SECCOMP`: `syscall=N` names it,
// `ausyscall N` translates) — docs/security.md "Confinement".

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace crihook::confine {

enum class SeccompMode {
  kOff,    // no filter
  kErrno,  // calls off the list fail with EPERM (the default)
  kKill,   // calls off the list kill the process (SCMP_ACT_KILL_PROCESS)
  kLog,    // calls off the list are allowed and logged by the kernel (SCMP_ACT_LOG)
};

// "off", "errno", "kill", "log". INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<SeccompMode> parseSeccompMode(std::string_view text);
std::string_view seccompModeName(SeccompMode mode);

enum class FilterFor {
  kDaemon,   // crihookd after start-up: no execve, no fork, no namespaces
  kSpawner,  // the spawner and the commands it runs: the daemon's list plus
             // process creation, exec, wait, kill, setpgid, ...
};

// The allow-list, by name (names this architecture lacks are skipped when
// installed). The daemon's clone must make a thread (CLONE_THREAD, no
// CLONE_NEW* flag: no fork, no namespace); clone3, whose flags a filter
// cannot read, answers ENOSYS so that glibc falls back to clone.
const std::vector<std::string_view>& allowedSyscalls(FilterFor who);

// Installs the filter on the calling process, every thread. Returns how many
// system calls the allow-list resolved to on this architecture (0 for kOff,
// which installs nothing). FAILED_PRECONDITION with libseccomp's reason
// (e.g. "seccomp_load: Operation not permitted") when it cannot be installed.
// Irreversible; inherited by every child forked afterwards.
absl::StatusOr<size_t> installFilter(SeccompMode mode, FilterFor who);

}  // namespace crihook::confine
