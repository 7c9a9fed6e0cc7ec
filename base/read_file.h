#pragma once

// Reading a file that other software writes (CDI specs, hookserver.d
// registrations, the config file, crihook's state files, sysfs and /proc):
// a regular file only, never blocking on a FIFO or a device, never more than
// the caller's cap in memory.

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace crihook {

// What a file of each kind may hold; a file beyond its cap is not one of its
// kind (or is an attack on the daemon's memory) and is refused unread.
// A CDI spec is a few KiB (NVIDIA's whole-node spec with every GPU, MIG
// device and library mount is ~100 KiB).
inline constexpr size_t kMaxCdiSpecBytes = 1u << 20;
// A hookserver.d registration is an endpoint, a policy and up to eight hook
// names: a few hundred bytes.
inline constexpr size_t kMaxRegistrationBytes = 64u << 10;
// crihookd's config is a few dozen lines, a hook table per hook.
inline constexpr size_t kMaxConfigBytes = 1u << 20;
// A state record of crihookd (a pod's record with its containers, a device
// record, the cpuset pools of a few thousand containers).
inline constexpr size_t kMaxStateFileBytes = 16u << 20;
// A sysfs attribute is at most a page (4 KiB); a /proc file crihook reads
// (the NVIDIA driver version) a line.
inline constexpr size_t kMaxSysfsAttributeBytes = 64u << 10;

enum class FileLinks {
  kFollow,  // a symlink to a regular file is read (hookserver.d, CDI dirs, sysfs)
  kRefuse,  // the file itself must not be a symlink (O_NOFOLLOW)
};

// The bytes of `path` when it is a regular file of at most `max_bytes`.
// Opened O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC (and O_NOFOLLOW under
// kRefuse), checked with fstat before a byte is read: a FIFO, socket or
// device is refused without blocking, a file whose size is over the cap
// without being read; at most max_bytes + 1 bytes are read (a file that
// grows, or a /proc file whose size reads 0). Blocking only as a regular
// file's read does (disk I/O). Errors carry the reason only; the caller names
// the file:
//   NOT_FOUND            it does not exist (ENOENT, ENOTDIR)
//   FAILED_PRECONDITION  not a regular file ("a FIFO, not a regular file"),
//                        a symlink under kRefuse, larger than max_bytes
//   UNAVAILABLE          open or read failed otherwise (errno's text)
absl::StatusOr<std::string> readRegularFile(const std::string& path, size_t max_bytes,
                                            FileLinks links = FileLinks::kFollow);

}  // namespace crihook
