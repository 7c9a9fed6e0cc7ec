#pragma once

// The OS behind a seam: every file topology discovery reads is read through a
// SysRoot, a directory standing for "/" (the host's, or a fixture tree holding
// sys/, proc/ and dev/). Nothing in topology/ opens a hard-coded path.

#include <optional>
#include <string>
#include <vector>

namespace crihook::topology {

class SysRoot {
 public:
  explicit SysRoot(std::string root = "/");
  const std::string& root() const { return root_; }

  // The file's contents without the trailing newline; nullopt when it cannot
  // be read: missing, not a regular file once links are followed (a FIFO or
  // a device is never opened for blocking reads), or over
  // kMaxSysfsAttributeBytes (config/read_file.h). `path` is relative to the
  // root ("sys/devices/system/cpu/online").
  std::optional<std::string> read(const std::string& path) const;

  // Entry names in a directory, sorted; empty when it cannot be read.
  std::vector<std::string> list(const std::string& path) const;

  // `path` with every symlink followed, relative to the root again
  // ("sys/devices/pci0000:17/..."); nullopt for a dangling link, a missing
  // path, or one leading out of the root.
  std::optional<std::string> resolve(const std::string& path) const;

  // The target of the symlink `path`, relative to the root, worked out from
  // the link's text (sysfs links are relative, through real directories), so
  // one readlink and one access instead of realpath's walk; nullopt for no
  // link, a dangling one, or one leading out of the root.
  std::optional<std::string> follow(const std::string& path) const;

  bool exists(const std::string& path) const;

 private:
  std::string full(const std::string& path) const;
  std::string root_;
};

}  // namespace crihook::topology
