#include "hooks/mount_policy.h"

#include "base/text.h"

namespace crihook {
namespace {

// A path in a message: quoted, control characters replaced, cut short (a
// hook's answer is not trusted text).
std::string shown(std::string_view p) {
  constexpr size_t kMax = 160;
  std::string out = "\"";
  for (char c : p.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f && c != '"') ? c : '?';
  return out + (p.size() > kMax ? "\"..." : "\"");
}

// True when `a` is `b` or lies below it (both normalised).
bool within(const std::string& a, const std::string& b) {
  if (b == "/") return true;
  return a.size() >= b.size() && a.compare(0, b.size(), b) == 0 &&
         (a.size() == b.size() || a[b.size()] == '/');
}

// A mount of `host` reaches `rule` when it is the rule's path, below it, or
// above it (it holds the rule's path).
bool reaches(const std::string& host, const std::string& rule) {
  return within(host, rule) || within(rule, host);
}

std::vector<std::string> normalised(std::vector<std::string> paths) {
  for (std::string& p : paths) p = normaliseMountPath(p);
  std::erase(paths, std::string());
  return paths;
}

}  // namespace

std::string normaliseMountPath(std::string_view path) {
  if (path.empty() || path[0] != '/') return "";
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(i, end - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();  // "/.." is "/"
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = end + 1;
  }
  std::string out;
  for (std::string_view part : parts) out += cat("/", part);
  return out.empty() ? "/" : out;
}

MountPolicy::MountPolicy()
    : MountPolicy(
          std::vector<std::string>(std::begin(kDefaultMountDeny), std::end(kDefaultMountDeny)),
          std::vector<std::string>(std::begin(kDefaultMountDenyRw),
                                   std::end(kDefaultMountDenyRw))) {}

MountPolicy::MountPolicy(std::vector<std::string> deny, std::vector<std::string> deny_rw)
    : deny_(normalised(std::move(deny))), deny_rw_(normalised(std::move(deny_rw))) {}

absl::StatusOr<MountPolicy> MountPolicy::fromConfig(const Config& config) {
  MountPolicy defaults;
  std::vector<std::string> deny = config.mounts.deny.value_or(defaults.deny_);
  std::vector<std::string> deny_rw = config.mounts.deny_rw.value_or(defaults.deny_rw_);
  for (auto [key, list] : {std::pair{"deny", &deny}, std::pair{"deny_rw", &deny_rw}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      if (normaliseMountPath((*list)[i]).empty()) {
        return absl::InvalidArgumentError(cat("security.mounts.", key, "[", i,
                                              "]: expected an absolute path, got ",
                                              shown((*list)[i])));
      }
    }
  }
  // crihook's own: whatever the lists say, a hook has no business there.
  deny.push_back(config.listen_path);
  if (auto backend = unixSocketPath(config.backend_endpoint); backend.ok())
    deny.push_back(*backend);
  if (!config.state_dir.empty()) deny_rw.push_back(config.state_dir);
  return MountPolicy(std::move(deny), std::move(deny_rw));
}

absl::Status MountPolicy::check(const std::string& hook, const MountSpec& m) const {
  const std::string host = normaliseMountPath(m.host_path);
  const std::string target = normaliseMountPath(m.container_path);
  auto refuse = [&](std::string_view why) {
    return absl::PermissionDeniedError(
        cat("hook ", hook, ": mount of host ", shown(m.host_path), " at ", shown(m.container_path),
            m.readonly ? " (ro)" : " (rw)", " is refused by the mount policy: ", why));
  };
  if (host.empty()) return refuse("the host path is not absolute");
  if (target.empty()) return refuse("the container path is not absolute");
  if (target == "/") return refuse("it would cover the container's root");
  for (const std::string& rule : deny_) {
    if (reaches(host, rule)) return refuse(cat("[security.mounts] deny ", rule));
  }
  if (!m.readonly) {
    for (const std::string& rule : deny_rw_) {
      if (reaches(host, rule)) return refuse(cat("[security.mounts] deny_rw ", rule));
    }
  }
  return absl::OkStatus();
}

absl::Status MountPolicy::check(const std::string& hook, const Adjustment& a) const {
  for (const MountSpec& m : a.mounts) {
    if (absl::Status s = check(hook, m); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace crihook
