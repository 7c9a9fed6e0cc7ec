#include "hooks/mount_policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

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

// The rules as written (normalised) and, where a link leads elsewhere, as
// resolved too: a rule "/var/run/crihook" is "/run/crihook" on a host whose
// /var/run is a link to /run.
std::vector<std::string> normalised(std::vector<std::string> paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    const std::string n = normaliseMountPath(p);
    if (n.empty()) continue;
    out.push_back(n);
    if (const std::string r = resolveHostPath(n); !r.empty() && r != n) out.push_back(r);
  }
  return out;
}

// A process's folder under /proc, or /proc itself (which holds them):
// its links (root, cwd, fd/N, map_files) reach any file of the host, or of
// another mount namespace, whatever the rest of the path says.
bool processFolder(const std::string& path) {
  if (path == "/proc") return true;
  if (path.rfind("/proc/", 0) != 0) return false;
  const std::string_view rest = std::string_view(path).substr(6);
  const std::string_view first = rest.substr(0, rest.find('/'));
  if (first == "self" || first == "thread-self") return true;
  return !first.empty() && std::all_of(first.begin(), first.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
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

std::string resolveHostPath(const std::string& path) {
  std::string left = normaliseMountPath(path);
  if (left.empty()) return "";
  std::string done;  // resolved so far: "" for "/", else "/a/b"
  int hops = 0;
  size_t at = 1;
  while (at < left.size()) {
    size_t end = left.find('/', at);
    if (end == std::string::npos) end = left.size();
    const std::string next = cat(done, "/", std::string_view(left).substr(at, end - at));
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) {
      return normaliseMountPath(cat(next, std::string_view(left).substr(end)));  // not there
    }
    if (!S_ISLNK(st.st_mode)) {
      done = next;
      at = end + 1;
      continue;
    }
    if (++hops > kMaxMountLinkHops) return "";
    char target[4096];
    const ssize_t n = ::readlink(next.c_str(), target, sizeof(target));
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(target)) return "";
    const std::string_view t(target, static_cast<size_t>(n));
    left = normaliseMountPath(cat(t[0] == '/' ? std::string() : done + "/", t, "/",
                                  std::string_view(left).substr(std::min(end + 1, left.size()))));
    done.clear();
    at = 1;
  }
  return done.empty() ? "/" : done;
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
  if (processFolder(host))
    return refuse("it is in a process's folder under /proc, whose links reach any path");
  const std::string resolved = resolveHostPath(host);
  if (resolved.empty()) {
    return refuse(cat("it passes through more than ", kMaxMountLinkHops,
                      " symbolic links, or one that cannot be read"));
  }
  const std::string via =
      resolved == host ? "" : cat(" (the host path leads to ", shown(resolved), ")");
  if (processFolder(resolved)) {
    return refuse(cat("it is in a process's folder under /proc, whose links reach any path", via));
  }
  for (const std::string& rule : deny_) {
    if (reaches(host, rule) || reaches(resolved, rule))
      return refuse(cat("[security.mounts] deny ", rule, via));
  }
  if (!m.readonly) {
    for (const std::string& rule : deny_rw_) {
      if (reaches(host, rule) || reaches(resolved, rule))
        return refuse(cat("[security.mounts] deny_rw ", rule, via));
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
