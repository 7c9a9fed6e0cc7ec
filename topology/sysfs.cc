#include "sysfs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace crihook::topology {

namespace fs = std::filesystem;

SysRoot::SysRoot(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  std::error_code ec;
  if (auto c = fs::canonical(root_, ec); !ec) root_ = c.string();
}

std::optional<std::string> SysRoot::read(const std::string& path) const {
  std::ifstream in(fs::path(root_) / path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> SysRoot::list(const std::string& path) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(root_) / path, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> SysRoot::resolve(const std::string& path) const {
  std::error_code ec;
  fs::path c = fs::canonical(fs::path(root_) / path, ec);
  if (ec) return std::nullopt;
  std::string s = c.string();
  if (root_ == "/") return s.substr(1);
  if (s.compare(0, root_.size(), root_) != 0 || (s.size() > root_.size() && s[root_.size()] != '/'))
    return std::nullopt;
  return s.size() == root_.size() ? std::string() : s.substr(root_.size() + 1);
}

bool SysRoot::exists(const std::string& path) const {
  std::error_code ec;
  return fs::exists(fs::path(root_) / path, ec);
}

}  // namespace crihook::topology
