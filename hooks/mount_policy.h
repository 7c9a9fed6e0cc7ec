#pragma once

// Which mounts hooks may add. kubelet's own mounts in a CreateContainer
// request are kubelet's business and never checked; what a hook adds (a
// built-in, a module, a remote server, a CDI spec through the cdi hook) is,
// before it is merged: the chain refuses the call when one is denied,
// naming the hook, the mount and the rule.
//
// The danger is the host path: a hook giving a pod the host's /etc
// read-write, or the runtime's socket (a ro bind of a socket still
// connects). So the rules are host paths, each denying a mount of the path,
// of anything below it, and of anything above it (a mount of /var holds
// /var/lib/kubelet). Paths are compared after lexical normalisation (`//`,
// `.`, `..`, a trailing `/`), component by component (`/etcd` is not
// `/etc`), both as written and with the host's symbolic links resolved (as
// the runtime resolves them when it mounts): a link to the runtime's socket
// or its folder is the socket or the folder. A process's folder under
// /proc (/proc/1, /proc/self, ...; /proc itself) is refused in any mode:
// its root, cwd and fd links reach any file. In the container only `/` is
// refused: a mount over the container's root.
//
// Resolving reads the host's path (lstat and readlink of each component):
// a path on a hung network filesystem delays the check as it would delay
// the mount. A link changed between the check and the runtime's mount is
// not seen: whoever can change links on the host's paths can do more.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "hooks/adjustment.h"

namespace crihook {

// Host paths no hook may mount in any mode: the runtime's and crihook's
// sockets (a read-only bind still lets the pod connect, i.e. run anything
// as root on the node).
inline constexpr std::string_view kDefaultMountDeny[] = {
    "/run/containerd",  "/var/run/containerd", "/run/crihook",
    "/var/run/crihook", "/run/docker.sock",    "/var/run/docker.sock",
};
// Host paths no hook may mount read-write: the node's configuration,
// kernel interfaces, kubelet's pods (other pods' secrets) and the runtimes'
// and crihook's state.
inline constexpr std::string_view kDefaultMountDenyRw[] = {
    "/etc",
    "/proc",
    "/sys",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/crihook",
};

// `path` with `//`, `.` and `..` resolved lexically and no trailing `/`
// ("/etc/../etc/" -> "/etc", "/.." -> "/"); "" when it is not absolute.
std::string normaliseMountPath(std::string_view path);

// The most symbolic links one path may pass through (the kernel's own
// bound, MAXSYMLINKS).
inline constexpr int kMaxMountLinkHops = 40;

// `path` (absolute) normalised with every symbolic link in it resolved on
// this host; the part that does not exist is kept as written. "" when it
// is not absolute, passes more than kMaxMountLinkHops links, or a link
// cannot be read. Blocking (lstat, readlink).
std::string resolveHostPath(const std::string& path);

class MountPolicy {
 public:
  // The defaults above.
  MountPolicy();
  // `deny` and `deny_rw`: absolute host paths (normalised here).
  MountPolicy(std::vector<std::string> deny, std::vector<std::string> deny_rw);

  // [security.mounts] deny / deny_rw, or the defaults where unset; plus,
  // always, crihook's own listen socket and the runtime's socket in `deny`
  // and the state directory in `deny_rw`. INVALID_ARGUMENT naming the key
  // when an entry is not an absolute path.
  static absl::StatusOr<MountPolicy> fromConfig(const Config& config);

  // OK, or PERMISSION_DENIED: "hook NAME: mount of host PATH at CPATH (rw)
  // is refused by the mount policy: [security.mounts] deny_rw /etc" (paths
  // quoted and cut). A mount whose host or container path is not absolute
  // is refused too. Thread-safe (const).
  absl::Status check(const std::string& hook, const MountSpec& mount) const;
  // Every mount of `adjustment`; the first refusal.
  absl::Status check(const std::string& hook, const Adjustment& adjustment) const;

  const std::vector<std::string>& deny() const { return deny_; }
  const std::vector<std::string>& denyRw() const { return deny_rw_; }

 private:
  std::vector<std::string> deny_, deny_rw_;  // normalised
};

}  // namespace crihook
