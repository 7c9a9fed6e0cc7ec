#pragma once

// What the end-to-end tests (test/e2e/) need from the machine, and whether
// they must run: one place for both suites and for scripts/test.sh's
// decision (which checks the same list; keep them together).

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace crihook::testing {

// The image every e2e suite runs its containers from: made from
// busybox-static by make-busybox-image.sh and imported under this name (no
// registry is reachable).
inline constexpr const char* kE2eImage = "docker.io/library/busybox:crihook";

// True when CRIHOOK_E2E_REQUIRED holds a truthy value: 1, true, yes or on,
// in any case, surrounding blanks ignored. Anything else (unset, empty, 0,
// false, a typo) is false: a suite then skips when the machine lacks what it
// needs, and says so.
inline bool e2eRequired() {
  const char* raw = std::getenv("CRIHOOK_E2E_REQUIRED");
  if (raw == nullptr) return false;
  std::string v(raw);
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  v.erase(v.begin(), std::find_if_not(v.begin(), v.end(), blank));
  v.erase(std::find_if_not(v.rbegin(), v.rend(), blank).base(), v.end());
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

// What this machine lacks for the end-to-end suites, each word preceded by
// a space (" root containerd"), or "" when it has everything: root (a
// private containerd, mknod, runc), and the containerd, runc, ctr and busybox
// (busybox-static: the image) commands on PATH. scripts/test.sh checks the
// same list before it sets CRIHOOK_E2E_REQUIRED.
inline std::string e2eMissing() {
  std::string missing;
  if (::geteuid() != 0) missing += " root";
  for (const char* c : {"containerd", "runc", "ctr", "busybox"}) {
    const std::string probe = std::string("command -v ") + c + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) != 0) missing += std::string(" ") + c;
  }
  return missing;
}

// A containerd for the NRI suites, as test/e2e/`script` (containerd17.sh:
// Debian 13's 1.7; containerd2.sh: Debian unstable's 2.x) prints it from its
// cache ($`cache_env`, default /var/cache/crihook-test/`cache_name`;
// filled from deb.debian.org on the first run). "" when it could not be
// had, `why` saying so.
inline std::string debianContainerdBinary(const std::string& source_dir, const std::string& script,
                                          const char* cache_env, const std::string& cache_name,
                                          std::string* why) {
  const char* env = std::getenv(cache_env);
  const std::string cache = env && *env ? env : "/var/cache/crihook-test/" + cache_name;
  const std::string cmd = source_dir + "/test/e2e/" + script + " " + cache + " 2>/dev/null";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *why = "cannot run " + cmd;
    return "";
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0 || out.empty()) {
    *why = script + " " + cache + " failed (run it by hand to see why): " + out;
    return "";
  }
  return out.substr(0, out.find('\n'));  // the binary's path
}

inline std::string containerd17Binary(const std::string& source_dir, std::string* why) {
  return debianContainerdBinary(source_dir, "containerd17.sh", "CRIHOOK_CONTAINERD17_CACHE",
                                "containerd17", why);
}
inline std::string containerd2Binary(const std::string& source_dir, std::string* why) {
  return debianContainerdBinary(source_dir, "containerd2.sh", "CRIHOOK_CONTAINERD2_CACHE",
                                "containerd2", why);
}

// Which containerd an NRI suite runs against: CRIHOOK_TEST_CONTAINERD "2"
// (test/e2e/meson.build's containerd2_* programs) for 2.x, else 1.7.
inline bool e2eContainerd2() {
  const char* v = std::getenv("CRIHOOK_TEST_CONTAINERD");
  return v != nullptr && std::string(v) == "2";
}

// The containerd a proxy-mode suite (containerd, soak, koordlet) runs
// against: "" for the one on PATH (Debian 12's 1.6), or, with
// CRIHOOK_TEST_CONTAINERD=2, containerd 2.x's binary; "" with `why` set when
// that could not be had.
inline std::string e2eProxyContainerd(const std::string& source_dir, std::string* why) {
  return e2eContainerd2() ? containerd2Binary(source_dir, why) : "";
}

}  // namespace crihook::testing

// In an end-to-end test's SetUp(): when the machine lacks what the suites
// need (e2eMissing), the test fails if CRIHOOK_E2E_REQUIRED is set, and is
// skipped naming what is missing otherwise. (A macro: FAIL and GTEST_SKIP
// return from the function they are written in.)
// In an NRI suite's SetUp(): `binary` (a std::string) gets containerd 1.7's
// path (containerd17Binary); when it cannot be had, the test fails if
// CRIHOOK_E2E_REQUIRED is set and is skipped otherwise.
// The same for the containerd e2eContainerd2() names.
#define CRIHOOK_E2E_NRI_CONTAINERD_OR_SKIP(binary)                                            \
  do {                                                                                        \
    std::string crihook_why_;                                                                 \
    const bool crihook_2_ = ::crihook::testing::e2eContainerd2();                             \
    binary = crihook_2_                                                                       \
                 ? ::crihook::testing::containerd2Binary(CRIHOOK_SOURCE_DIR, &crihook_why_)   \
                 : ::crihook::testing::containerd17Binary(CRIHOOK_SOURCE_DIR, &crihook_why_); \
    if (binary.empty()) {                                                                     \
      if (::crihook::testing::e2eRequired()) FAIL() << crihook_why_;                          \
      GTEST_SKIP() << "containerd " << (crihook_2_ ? "2.x" : "1.7")                           \
                   << " could not be fetched (deb.debian.org unreachable?)";                  \
    }                                                                                         \
  } while (0)

#define CRIHOOK_E2E_CONTAINERD17_OR_SKIP(binary)                                           \
  do {                                                                                     \
    std::string crihook_why_;                                                              \
    binary = ::crihook::testing::containerd17Binary(CRIHOOK_SOURCE_DIR, &crihook_why_);    \
    if (binary.empty()) {                                                                  \
      if (::crihook::testing::e2eRequired()) FAIL() << crihook_why_;                       \
      GTEST_SKIP() << "containerd 1.7 could not be fetched (deb.debian.org unreachable?)"; \
    }                                                                                      \
  } while (0)

#define CRIHOOK_E2E_SKIP_UNLESS_MACHINE_HAS_ALL()                                            \
  do {                                                                                       \
    const std::string crihook_missing_ = ::crihook::testing::e2eMissing();                   \
    if (!crihook_missing_.empty()) {                                                         \
      if (::crihook::testing::e2eRequired())                                                 \
        FAIL() << "CRIHOOK_E2E_REQUIRED is set but this machine lacks:" << crihook_missing_; \
      GTEST_SKIP() << "needs" << crihook_missing_;                                           \
    }                                                                                        \
  } while (0)
