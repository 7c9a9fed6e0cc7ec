#include "topology/sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/read_file.h"

namespace crihook::topology {

namespace fs = std::filesystem;

SysRoot::SysRoot(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  std::error_code ec;
  if (auto c = fs::canonical(root_, ec); !ec) root_ = c.string();
}

std::string SysRoot::full(const std::string& path) const {
  return root_ == "/" ? "/" + path : root_ + "/" + path;
}

// Regular files only, at most kMaxSysfsAttributeBytes (config/read_file.h):
// anything else is a file that cannot be read (nullopt).
// Plain system calls (readRegularFile): discovery reads hundreds of small
// files, and streams cost several times what the read does. A regular file
// only, so a link into dev/ or a FIFO in a fixture or a bind-mounted tree
// cannot block discovery or fill memory.
std::optional<std::string> SysRoot::read(const std::string& path) const {
  auto text = readRegularFile(full(path), kMaxSysfsAttributeBytes);
  if (!text.ok()) return std::nullopt;
  std::string s = std::move(*text);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> SysRoot::list(const std::string& path) const {
  std::vector<std::string> out;
  DIR* d = ::opendir(full(path).c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      out.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> SysRoot::resolve(const std::string& path) const {
  char buf[PATH_MAX];
  if (::realpath(full(path).c_str(), buf) == nullptr) return std::nullopt;
  std::string s = buf;
  if (root_ == "/") return s.substr(1);
  if (s.compare(0, root_.size(), root_) != 0 || (s.size() > root_.size() && s[root_.size()] != '/'))
    return std::nullopt;
  return s.size() == root_.size() ? std::string() : s.substr(root_.size() + 1);
}

std::optional<std::string> SysRoot::follow(const std::string& path) const {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(full(path).c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return std::nullopt;
  const std::string target(buf, static_cast<size_t>(n));
  if (target[0] == '/') return resolve(path);  // absolute: leave it to realpath
  // Lexically: the link's directory, then the target's parts.
  std::vector<std::string> parts;
  auto push = [&](std::string_view text) -> bool {
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('/', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view part = text.substr(start, end - start);
      if (part == "..") {
        if (parts.empty()) return false;  // out of the root
        parts.pop_back();
      } else if (!part.empty() && part != ".") {
        parts.emplace_back(part);
      }
      start = end + 1;
    }
    return true;
  };
  const size_t slash = path.rfind('/');
  if (!push(slash == std::string::npos ? std::string_view()
                                       : std::string_view(path).substr(0, slash)) ||
      !push(target))
    return std::nullopt;
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : "/") + part;
  if (!exists(out)) return std::nullopt;
  return out;
}

bool SysRoot::exists(const std::string& path) const {
  return ::access(full(path).c_str(), F_OK) == 0;
}

}  // namespace crihook::topology
