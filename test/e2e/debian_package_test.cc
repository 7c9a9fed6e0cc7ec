// The Debian package (debian/, docs/operations.md "Installing from the Debian package"),
// as an operator meets it: built with dpkg-buildpackage from a copy of the
// source tree, checked by lintian, installed with dpkg -i; the installed
// crihookd serves a pod from a private containerd; the package is upgraded
// to a higher version while the pod runs; then removed and purged, leaving
// the machine as it was.
//
// No systemd runs on the machines this suite runs on (PID 1 is another
// supervisor; /run/systemd/system is absent), so the maintainer scripts'
// systemctl and deb-systemd-invoke steps do nothing here. The test plays
// the units' part itself: it holds the listening socket as crihookd.socket
// does and hands it to crihookd as LISTEN_FDS; "systemctl restart" on
// upgrade is its SIGTERM to the old crihookd and the new binary started on
// the same socket. What the units do under a real systemd is not exercised.
// On a machine where systemd runs the test does not run: installing would
// start crihookd.service for real.
//
// The package is compiled once (the longest step by far). The upgrade is
// the same build tree packaged again under a higher version
// (debian/changelog bumped in the copy, dpkg-buildpackage -nc), which the
// test checks recompiled nothing.
//
// Needs what the other e2e suites need plus dpkg-buildpackage, debhelper,
// lintian and man (scripts/install-deps.sh), no crihook package installed
// and nothing in /var/lib/crihook (purging deletes it). Skipped without them
// unless CRIHOOK_E2E_REQUIRED is truthy (1, true, yes, on), where it fails.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/activated_daemon.h"
#include "test/support/child_process.h"
#include "test/support/cri_pods.h"
#include "test/support/e2e_env.h"
#include "test/support/eventually.h"

namespace crihook::testing {
namespace {

namespace v1 = ::runtime::v1;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kScripts = CRIHOOK_SOURCE_DIR "/test/e2e/";

// Where the package puts things and crihookd keeps them (its defaults).
constexpr const char* kCrihookd = "/usr/sbin/crihookd";
constexpr const char* kCrihookctl = "/usr/bin/crihookctl";
constexpr const char* kRunDir = "/run/crihook";
constexpr const char* kSocket = "/run/crihook/crihook.sock";
constexpr const char* kStateDir = "/var/lib/crihook";
constexpr const char* kExamples = "/usr/share/doc/crihook/examples";
// Written before the test installs the package, removed once it has purged
// it: a run killed in between (meson's timeout) left the package installed,
// and the next run purges it instead of refusing to start. On tmpfs: gone
// at reboot with everything else a killed run could leave in /run.
constexpr const char* kMarker = "/run/crihook-debian-package-test";

// The compile, once, from a copy of the tree, through ccache (ccacheEnv):
// 11 minutes on the project's 2-core VM with an empty cache, 2 minutes with
// the dh steps when the cache holds an earlier run's (docs/testing.md "Where the
// time goes"). The repackaging compiles nothing: a minute of stripping and
// packaging. Bounded each, so that a stuck step fails the test before
// meson's 3000 s end it with nothing said.
constexpr auto kBuildBudget = 40min;
constexpr auto kRepackageBudget = 10min;
constexpr auto kLintianBudget = 5min;
constexpr auto kDpkgBudget = 3min;
// crihookd.service's TimeoutStopSec: what a drain may take.
constexpr auto kStopBudget = 30s;

// The pod: crictl's JSON, as crihookctl takes it (the demo's pod, without
// devices). A static hook in the test's config sets kHookEnv in it.
constexpr const char* kHookEnv = "CRIHOOK_PACKAGE_TEST";

std::string shellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string lastLines(const std::string& text, int n) {
  size_t pos = text.size();
  for (int i = 0; i <= n && pos != std::string::npos && pos > 0; ++i)
    pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

bool packageInstalled() {
  // "install ok installed", or "deinstall ok config-files" after a remove.
  const ShellResult r = runShell("dpkg-query -W -f='${Status}' crihook 2>/dev/null");
  return r.code == 0 && r.out.find("not-installed") == std::string::npos && !r.out.empty();
}

// Every trace crihook can leave on the machine, one path a line, sorted:
// what dpkg knows of the package and the files named after it under /etc,
// /usr, /lib, /var/lib and /run (the package's own, deb-systemd-helper's
// enable links and state, dpkg's lists), and all of /var/lib/crihook and
// /run/crihook.
std::string machineTraces() {
  return runShell(
             "{ find /etc /usr /lib /var/lib /run -xdev -name '*crihook*' 2>/dev/null;"
             "  find /var/lib/crihook /run/crihook 2>/dev/null; } | sort -u")
      .out;
}

// What this machine lacks for the package test beyond e2eMissing(), each
// reason after "; ", or "" when it has all.
std::string packageMissing() {
  std::string missing;
  for (const char* c : {"dpkg-buildpackage", "dh", "lintian", "man"}) {
    if (runShell(cat("command -v ", c, " >/dev/null 2>&1")).code != 0)
      missing += cat("; ", c, " is not installed (scripts/install-deps.sh)");
  }
  if (std::filesystem::exists("/run/systemd/system"))
    missing +=
        "; systemd runs here: installing would start crihookd.service for real (this test "
        "plays the units' part itself)";
  if (packageInstalled() && !std::filesystem::exists(kMarker))
    missing += "; a crihook package is installed on this machine (the test would purge it)";
  const std::string held =
      runShell(cat("find ", kStateDir, " ", kRunDir, " ! -type d 2>/dev/null | head -3")).out;
  if (!held.empty() && !std::filesystem::exists(kMarker))
    missing += cat("; ", kStateDir, " or ", kRunDir,
                   " holds files (purging the package deletes them): ", trimmed(held));
  return missing;
}

// dpkg-buildpackage's compiles through ccache, into the cache the suite's
// own build uses (scripts/ccache.sh): ccache's own directory, read here
// because debhelper points HOME into the package's build tree, which would
// give it an empty cache every run. CCACHE_BASEDIR: paths under the copy
// are hashed relative to it, so that the next run's copy, in a directory of
// another name, is a cache hit. "" without ccache (meson then uses none).
std::string ccacheEnv(const std::string& src) {
  const ShellResult dir = runShell("ccache -k cache_dir 2>/dev/null");
  if (dir.code != 0 || trimmed(dir.out).empty()) return "";
  return cat("env CCACHE_DIR=", shellQuote(trimmed(dir.out)), " CCACHE_BASEDIR=", shellQuote(src),
             " ");
}

// The installed crihookd as systemd starts the socket-activated
// crihookd.service (test/support/activated_daemon.h).
class ActivatedCrihookd : public ActivatedDaemon {
 public:
  ActivatedCrihookd(int fd, const std::vector<std::string>& args, const std::string& log)
      : ActivatedDaemon(kCrihookd, fd, args, log) {}
};

class DebianPackage : public ::testing::Test {
 protected:
  void SetUp() override {
    CRIHOOK_E2E_SKIP_UNLESS_MACHINE_HAS_ALL();
    const std::string missing = packageMissing();
    if (!missing.empty()) {
      if (e2eRequired()) FAIL() << "CRIHOOK_E2E_REQUIRED is set but" << missing.substr(1);
      GTEST_SKIP() << "cannot run here:" << missing.substr(1);
    }
    if (std::filesystem::exists(kMarker)) {
      // A run killed between install and purge (see kMarker).
      std::printf("debian_package: purging the crihook package an earlier run left installed\n");
      runShell("dpkg -P crihook >/dev/null 2>&1");
      std::filesystem::remove(kMarker);
    }
    char tmpl[] = "/tmp/crihook-deb-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    traces_before_ = machineTraces();
    // Empty directories under /var/lib/crihook (a crihookd run on its
    // default state_dir leaves them) are put back after the purge.
    kept_dirs_ = runShell(cat("find ", kStateDir, " -type d 2>/dev/null | sort")).out;
    std::filesystem::remove_all(kStateDir);
  }

  void TearDown() override {
    if (dir_.empty()) return;
    // Whatever a failed run left: crihookd, the package, the pod, containerd.
    std::error_code ec;
    crihookd_.reset();
    closeSocket();
    if (std::filesystem::exists(kMarker)) {
      dpkg("-P crihook");
      std::filesystem::remove(kMarker);
    }
    // SetUp found no file in either (packageMissing): what is there now is
    // this run's, left by a purge that failed to remove it.
    std::filesystem::remove_all(kStateDir, ec);
    std::filesystem::remove_all(kRunDir, ec);
    if (!kept_dirs_.empty()) restoreKeptDirs();
    if (containerd_ > 0) {
      auto direct = v1::RuntimeService::NewStub(
          grpc::CreateChannel("unix://" + ctdSocket(), grpc::InsecureChannelCredentials()));
      for (const auto& id : pod_ids_) stopAndRemovePod(*direct, id);
      terminateDaemon(containerd_, 10s);
    }
    containerd_guard_.reset();  // kills what containerd left (shims)
    std::filesystem::remove_all(dir_, ec);
  }

  std::string ctdSocket() const { return dir_ + "/ctd/containerd.sock"; }

  // `command` (sh -c) under a ChildProcess guard (it dies with the test),
  // output to `log`; its exit code, or -1 when it ran past `budget` (then
  // killed).
  int runGuarded(const std::string& command, const std::string& log,
                 std::chrono::milliseconds budget) {
    ChildProcess child("/bin/sh", {"-c", command}, log);
    return child.wait(budget);
  }

  // dpkg ARGS, bounded by kDpkgBudget; its exit code (-1: ran past it) and
  // output.
  ShellResult dpkg(const std::string& args) {
    const std::string log = cat(dir_, "/dpkg-", ++dpkg_runs_, ".log");
    const int code = runGuarded(cat("exec dpkg ", args), log, kDpkgBudget);
    return {readFile(log), code};
  }

  // The installed crihookctl against the installed crihookd.
  ShellResult ctl(const std::string& args) {
    return runShell(cat(kCrihookctl, " -r unix://", kSocket, " -t 30 ", args, " 2>&1"));
  }

  // crihookd.socket's part: /run/crihook/crihook.sock bound and listening,
  // held by the test across crihookd's restarts (SocketMode=0660,
  // DirectoryMode=0755).
  void openSocket() {
    ::mkdir(kRunDir, 0755);
    socket_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(socket_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", kSocket);
    ::unlink(kSocket);
    ASSERT_EQ(::bind(socket_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::chmod(kSocket, 0660);
    ASSERT_EQ(::listen(socket_, SOMAXCONN), 0);
  }
  // crihookd.socket stopped (prerm on remove): the fd closed, the file left
  // (RemoveOnStop=no).
  void closeSocket() {
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
  }

  // crihookd.service's ExecStart, the config in place of $CRIHOOKD_OPTS.
  void startCrihookd(const std::string& log) {
    crihookd_ = std::make_unique<ActivatedCrihookd>(
        socket_,
        std::vector<std::string>{"--config", dir_ + "/crihook.toml", "--backend",
                                 "unix://" + ctdSocket()},
        log);
    // Serving: a call through it reaches containerd.
    ShellResult v;
    eventually(
        [&] {
          v = ctl("version");
          return v.code == 0 || crihookd_->wait(0ms) >= 0;
        },
        30s, 200ms);
    ASSERT_EQ(v.code, 0) << v.out << "\ncrihookd's log:\n" << readFile(log);
    EXPECT_NE(v.out.find("containerd"), std::string::npos) << v.out;
    EXPECT_NE(readFile(log).find(cat("serving the activated socket ", kSocket)), std::string::npos)
        << readFile(log);
  }

  // crihookd.service stopped: SIGTERM, drained within TimeoutStopSec, exit 0.
  void stopCrihookd() {
    crihookd_->signal(SIGTERM);
    EXPECT_EQ(crihookd_->wait(kStopBudget), 0);
  }

  void restoreKeptDirs() {
    std::istringstream dirs(kept_dirs_);
    for (std::string d; std::getline(dirs, d);) {
      if (!d.empty()) std::filesystem::create_directories(d);
    }
  }

  std::string dir_;
  std::string kept_dirs_;
  std::string traces_before_;
  int socket_ = -1;
  std::unique_ptr<ActivatedCrihookd> crihookd_;
  std::unique_ptr<ChildProcess> containerd_guard_;
  pid_t containerd_ = -1;
  std::vector<std::string> pod_ids_;
  int dpkg_runs_ = 0;
};

// debian/control's Build-Depends is scripts/install-deps.sh's build list,
// less build-essential (implied by Debian policy) and the test libraries
// (the package is built with -Dtests=false), plus debhelper-compat.
TEST(DebianControl, BuildDependsAreInstallDepsBuildPackages) {
  const std::string deps = readFile(CRIHOOK_SOURCE_DIR "/scripts/install-deps.sh");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(deps, m, std::regex(R"(build_pkgs=\(([^)]*)\))")));
  std::set<std::string> want;
  {
    std::istringstream words(m[1].str());
    for (std::string w; words >> w;) want.insert(w);
  }
  for (const char* left : {"build-essential", "libgtest-dev", "libgmock-dev"}) want.erase(left);
  want.insert("debhelper-compat");

  const std::string control = readFile(CRIHOOK_SOURCE_DIR "/debian/control");
  std::set<std::string> have;
  bool in_field = false;
  std::istringstream lines(control);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Build-Depends:", 0) == 0) {
      in_field = true;
      line = line.substr(14);
    } else if (in_field && (line.empty() || (line[0] != ' ' && line[0] != '#'))) {
      break;
    }
    if (!in_field || line.rfind("#", 0) == 0) continue;
    std::istringstream items(line);
    for (std::string item; std::getline(items, item, ',');) {
      std::istringstream name(item);
      std::string n;
      if (name >> n) have.insert(n);
    }
  }
  EXPECT_EQ(have, want);
}

TEST_F(DebianPackage, BuildInstallUpgradeRemovePurge) {
  const auto t0 = Clock::now();
  auto minutes = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count() / 60.0;
  };

  // --- build, from a copy of the tree (never in the tree itself) ---
  // CRIHOOK_DEB_PREBUILT (to work on this test; CI leaves it unset): a copy
  // of the tree that dpkg-buildpackage -b has built, its .deb beside it;
  // copied, and its build tree reused, instead of the compile.
  const char* prebuilt = std::getenv("CRIHOOK_DEB_PREBUILT");
  const std::string src = dir_ + "/src";
  if (prebuilt != nullptr && *prebuilt != '\0') {
    runShellOrThrow(cat("cp -a ", shellQuote(prebuilt), " ", src, " && cp ", shellQuote(prebuilt),
                        "/../crihook_*.deb ", dir_));
  } else {
    std::filesystem::create_directories(src);
    runShellOrThrow(cat("tar -C " CRIHOOK_SOURCE_DIR
                        " --anchored --exclude=./.git --exclude='./build*' --exclude=./.cache"
                        " --exclude=./obj-* -cf - . | tar -C ",
                        src, " -xf -"));
  }
  const std::string version =
      trimmed(runShellOrThrow(cat("dpkg-parsechangelog -l ", src, "/debian/changelog -S Version")));
  const std::string arch = trimmed(runShellOrThrow("dpkg --print-architecture"));
  const std::string deb = cat(dir_, "/crihook_", version, "_", arch, ".deb");
  if (prebuilt == nullptr || *prebuilt == '\0') {
    ASSERT_EQ(runGuarded(cat("cd ", src, " && exec ", ccacheEnv(src),
                             "nice -n 10 dpkg-buildpackage -b -us -uc -j",
                             std::thread::hardware_concurrency()),
                         dir_ + "/build.log", kBuildBudget),
              0)
        << lastLines(readFile(dir_ + "/build.log"), 60);
  }
  ASSERT_TRUE(std::filesystem::exists(deb)) << runShell(cat("ls ", dir_)).out;
  const auto built = Clock::now();

  // lintian: no error and no warning on the .deb (each tag left is
  // overridden with its reason in debian/).
  ASSERT_EQ(runGuarded(cat("exec lintian --fail-on error,warning ", deb), dir_ + "/lintian.log",
                       kLintianBudget),
            0)
      << readFile(dir_ + "/lintian.log");

  // The maintainer scripts' systemd path, which cannot run here (no
  // systemd): on upgrade only crihookd.service is restarted, never
  // crihookd.socket (it holds the socket kubelet's connections queue in);
  // the units are stopped on remove only.
  runShellOrThrow(cat("dpkg-deb -e ", deb, " ", dir_, "/DEBIAN"));
  {
    const std::string postinst = readFile(dir_ + "/DEBIAN/postinst");
    EXPECT_NE(postinst.find("deb-systemd-invoke restart crihookd.service"), std::string::npos)
        << postinst;
    std::istringstream lines(postinst);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("deb-systemd-invoke") != std::string::npos &&
          line.find("crihookd.socket") != std::string::npos) {
        EXPECT_EQ(line.find("restart"), std::string::npos) << line;
      }
      EXPECT_EQ(line.find("_dh_action"), std::string::npos) << line;
    }
    const std::string prerm = readFile(dir_ + "/DEBIAN/prerm");
    std::istringstream prerm_lines(prerm);
    std::string previous;
    for (std::string line; std::getline(prerm_lines, line);) {
      if (line.find("deb-systemd-invoke") != std::string::npos) {
        EXPECT_NE(line.find("deb-systemd-invoke stop"), std::string::npos) << line;
        EXPECT_NE(previous.find("\"$1\" = remove"), std::string::npos) << prerm;
      }
      if (!trimmed(line).empty()) previous = line;
    }
  }

  // --- install ---
  std::ofstream(kMarker) << "installed by test/e2e/debian_package_test.cc\n";
  ShellResult r = dpkg("-i " + deb);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string listed = runShellOrThrow("dpkg -L crihook");
  std::set<std::string> files;
  {
    std::istringstream l(listed);
    for (std::string p; std::getline(l, p);) files.insert(p);
  }
  for (const std::string f :
       {"/usr/sbin/crihookd", "/usr/bin/crihookctl", "/lib/systemd/system/crihookd.service",
        "/lib/systemd/system/crihookd.socket", "/usr/include/crihook/crihook_module.h",
        "/usr/lib/crihook/modules/example_module.so", "/usr/libexec/crihook/crihook-module-host",
        "/etc/default/crihookd", "/usr/share/doc/crihook/README.md",
        // the pages README.md links to, uncompressed so its links resolve
        "/usr/share/doc/crihook/docs/operations.md", "/usr/share/doc/crihook/docs/topology-dgx.svg",
        "/usr/share/doc/crihook/examples/10-crihook.conf",
        "/usr/share/doc/crihook/examples/crihook.toml", "/usr/share/man/man8/crihookd.8.gz",
        "/usr/share/man/man1/crihookctl.1.gz", "/usr/share/man/man5/crihook.toml.5.gz"}) {
    EXPECT_TRUE(files.count(f)) << f << " is not in the package:\n" << listed;
    EXPECT_TRUE(std::filesystem::is_regular_file(f)) << f;
  }
  for (const char* exe : {kCrihookd, kCrihookctl, "/usr/libexec/crihook/crihook-module-host"})
    EXPECT_EQ(::access(exe, X_OK), 0) << exe;
  const std::string unit = readFile("/lib/systemd/system/crihookd.service");
  EXPECT_NE(unit.find("ExecStart=/usr/sbin/crihookd $CRIHOOKD_OPTS"), std::string::npos) << unit;
  EXPECT_NE(unit.find("Documentation=file:///usr/share/doc/crihook/README.md"), std::string::npos)
      << unit;

  // kubelet is not pointed at crihookd: the drop-in is only an example, and
  // nothing of the package is in kubelet's unit directories.
  EXPECT_FALSE(std::filesystem::exists("/etc/systemd/system/kubelet.service.d/10-crihook.conf"));
  for (const auto& f : files) {
    EXPECT_EQ(f.find("kubelet.service.d"), std::string::npos) << f;
    EXPECT_NE(f.rfind("/etc/systemd", 0), 0u) << f;
  }
  EXPECT_NE(readFile(cat(kExamples, "/10-crihook.conf"))
                .find("--container-runtime-endpoint=unix:///run/crihook/crihook.sock"),
            std::string::npos);
  // crihookd itself is enabled (docs/operations.md: it serves only its own socket).
  EXPECT_EQ(std::filesystem::read_symlink("/etc/systemd/system/multi-user.target.wants/"
                                          "crihookd.service"),
            "/lib/systemd/system/crihookd.service");
  EXPECT_EQ(
      std::filesystem::read_symlink("/etc/systemd/system/sockets.target.wants/crihookd.socket"),
      "/lib/systemd/system/crihookd.socket");
  // /etc/default/crihookd: a conffile that sets nothing.
  EXPECT_NE(
      runShellOrThrow("dpkg-query -W -f='${Conffiles}' crihook").find("/etc/default/crihookd"),
      std::string::npos);
  EXPECT_EQ(runShell("grep -v -e '^#' -e '^[[:space:]]*$' /etc/default/crihookd").out, "");

  // The man pages render without a warning.
  for (const char* page :
       {"/usr/share/man/man8/crihookd.8.gz", "/usr/share/man/man1/crihookctl.1.gz",
        "/usr/share/man/man5/crihook.toml.5.gz"}) {
    r = runShell(cat("MANWIDTH=80 man --warnings -l ", page, " 2>&1 >/dev/null"));
    EXPECT_EQ(r.code, 0) << page;
    EXPECT_EQ(r.out, "") << page;
    EXPECT_NE(runShell(cat("MANWIDTH=80 man -l ", page, " 2>/dev/null")).out.find("NAME"),
              std::string::npos)
        << page;
  }
  // The module header compiles from the standard include path, in C.
  r = runShell("printf '#include <crihook/crihook_module.h>\\n' | cc -fsyntax-only -x c - 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;

  // --version: the upstream version the package carries, and no commit:
  // the package is built from a copy of the tree without .git.
  const std::string upstream = version.substr(0, version.find_first_of("+~-"));
  r = runShell(cat(kCrihookd, " --version 2>&1"));
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, cat("crihookd ", upstream, "\n"));
  r = runShell(cat(kCrihookctl, " --version 2>&1"));
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, cat("crihookctl ", upstream, "\n"));

  // --- the installed crihookd in front of a private containerd ---
  runShellOrThrow(
      cat(kScripts, "make-busybox-image.sh ", dir_, "/busybox.tar ", kE2eImage, " 2>&1"));
  containerd_ = startGuardedDaemon(containerd_guard_, kScripts + "containerd-private.sh",
                                   {dir_ + "/ctd", kE2eImage, dir_ + "/busybox.tar"},
                                   dir_ + "/containerd-start.log", 120s);
  // The example config as the operator copies it, plus a static hook whose
  // env var the container must see and whose record must outlive upgrades.
  std::ofstream(dir_ + "/crihook.toml")
      << readFile(cat(kExamples, "/crihook.toml")) << "\n[[hook]]\nname = \"package-env\"\n"
      << "builtin = \"static\"\n[hook.settings.adjustment]\nenv = [{ key = \"" << kHookEnv
      << "\", value = \"set by a hook\" }]\n";
  openSocket();
  ASSERT_NO_FATAL_FAILURE(startCrihookd(dir_ + "/crihookd-1.log"));
  std::ofstream(dir_ + "/pod.json")
      << R"({"metadata":{"name":"packaged","namespace":"default","uid":"packaged-uid"},)"
      << R"("log_directory":")" << dir_ << R"(/logs",)"
      << R"("linux":{"security_context":{"namespace_options":{"network":"NODE"}}}})";
  std::ofstream(dir_ + "/container.json")
      << R"({"metadata":{"name":"sleeper"},"image":{"image":")" << kE2eImage << R"("},)"
      << R"("command":["/bin/sleep","3600"],"log_path":"sleeper.log","linux":{}})";
  r = ctl(cat("runp ", dir_, "/pod.json"));
  ASSERT_EQ(r.code, 0) << r.out << readFile(dir_ + "/crihookd-1.log");
  const std::string pod = trimmed(r.out);
  pod_ids_.push_back(pod);
  r = ctl(cat("create ", pod, " ", dir_, "/container.json ", dir_, "/pod.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string container = trimmed(r.out);
  r = ctl(cat("start ", container));
  ASSERT_EQ(r.code, 0) << r.out;
  auto hookEnvInContainer = [&] {
    return ctl(cat("exec ", container, " sh -c ", shellQuote(cat("echo $", kHookEnv))));
  };
  r = hookEnvInContainer();
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "set by a hook\n");
  const std::string record = cat(kStateDir, "/pods/", pod, ".json");
  ASSERT_TRUE(std::filesystem::is_regular_file(record)) << runShell(cat("find ", kStateDir)).out;
  r = ctl(cat("explain ", container));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("package-env"), std::string::npos) << r.out;
  const std::string explained = r.out;
  const auto pod_up = Clock::now();

  // --- upgrade, while the pod runs ---
  // The same build tree packaged under a higher version: debian/changelog
  // bumped in the copy, dpkg-buildpackage -nc (no clean, so no compile).
  const std::string next = version + "+pkgtest1";
  const std::string maintainer = trimmed(
      runShellOrThrow(cat("dpkg-parsechangelog -l ", src, "/debian/changelog -S Maintainer")));
  {
    const std::string old_log = readFile(src + "/debian/changelog");
    std::ofstream(src + "/debian/changelog")
        << "crihook (" << next << ") unstable; urgency=medium\n\n"
        << "  * Packaged again by test/e2e/debian_package_test.cc, to upgrade to.\n\n"
        << " -- " << maintainer << "  " << trimmed(runShellOrThrow("date -R")) << "\n\n"
        << old_log;
  }
  ASSERT_EQ(
      runGuarded(cat("cd ", src, " && exec ", ccacheEnv(src), "dpkg-buildpackage -b -nc -us -uc"),
                 dir_ + "/repackage.log", kRepackageBudget),
      0)
      << lastLines(readFile(dir_ + "/repackage.log"), 60);
  const std::string repackaged = readFile(dir_ + "/repackage.log");
  EXPECT_EQ(repackaged.find(" -c "), std::string::npos) << "the repackaging compiled something:\n"
                                                        << lastLines(repackaged, 60);
  const std::string next_deb = cat(dir_, "/crihook_", next, "_", arch, ".deb");
  ASSERT_TRUE(std::filesystem::exists(next_deb)) << runShell(cat("ls ", dir_)).out;
  const auto repackaged_at = Clock::now();

  const pid_t old_pid = crihookd_->pid();
  r = dpkg("-i " + next_deb);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(runShellOrThrow("dpkg-query -W -f='${Version}' crihook"), next);
  // dpkg replaced the binary under the running crihookd.
  EXPECT_EQ(std::filesystem::read_symlink(cat("/proc/", old_pid, "/exe")).string(),
            cat(kCrihookd, " (deleted)"));
  // What `systemctl restart crihookd` does (postinst, --restart-after-upgrade):
  // SIGTERM, crihookd drains and exits; the socket stays held.
  ASSERT_NO_FATAL_FAILURE(stopCrihookd());
  // While no crihookd runs, a client's call waits in the socket's backlog...
  ChildProcess waiting(kCrihookctl, {"-r", cat("unix://", kSocket), "-t", "60", "pods", "-q"},
                       dir_ + "/waiting.log");
  EXPECT_EQ(waiting.wait(1500ms), -1)
      << "refused while no crihookd ran: " << readFile(dir_ + "/waiting.log");
  // ...and the new crihookd, on the same socket, answers it.
  ASSERT_NO_FATAL_FAILURE(startCrihookd(dir_ + "/crihookd-2.log"));
  EXPECT_EQ(waiting.wait(60s), 0) << readFile(dir_ + "/waiting.log");
  EXPECT_NE(readFile(dir_ + "/waiting.log").find(pod), std::string::npos)
      << readFile(dir_ + "/waiting.log");
  EXPECT_EQ(std::filesystem::read_symlink(cat("/proc/", crihookd_->pid(), "/exe")).string(),
            kCrihookd);
  // The pod still runs, its record is kept and read by the new crihookd.
  r = ctl("ps -q");
  EXPECT_NE(r.out.find(container), std::string::npos) << r.out;
  r = hookEnvInContainer();
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "set by a hook\n");
  EXPECT_TRUE(std::filesystem::is_regular_file(record));
  r = ctl(cat("explain ", container));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, explained);

  // --- remove: state kept ---
  // What prerm does on remove with systemd: crihookd.service and
  // crihookd.socket stopped.
  ASSERT_NO_FATAL_FAILURE(stopCrihookd());
  closeSocket();
  r = dpkg("-r crihook");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(std::filesystem::exists(kCrihookd));
  EXPECT_FALSE(std::filesystem::exists(kCrihookctl));
  EXPECT_TRUE(std::filesystem::is_regular_file(record)) << "remove deleted crihookd's records";
  EXPECT_TRUE(std::filesystem::exists("/etc/default/crihookd"));  // a conffile, until purge
  EXPECT_EQ(runShellOrThrow("dpkg-query -W -f='${Status}' crihook"), "deinstall ok config-files");

  // --- purge: the machine as it was ---
  r = dpkg("-P crihook");
  ASSERT_EQ(r.code, 0) << r.out;
  std::filesystem::remove(kMarker);
  EXPECT_FALSE(std::filesystem::exists(kStateDir));
  EXPECT_FALSE(std::filesystem::exists(kRunDir));
  EXPECT_FALSE(std::filesystem::exists("/etc/default/crihookd"));
  EXPECT_FALSE(packageInstalled());
  for (const auto& f : files) {
    if (!std::filesystem::is_directory(f)) {
      EXPECT_FALSE(std::filesystem::exists(f)) << f << " is left after purge";
    }
  }
  if (!kept_dirs_.empty()) restoreKeptDirs();
  EXPECT_EQ(machineTraces(), traces_before_);

  std::printf("%s", readFile(dir_ + "/lintian.log").c_str());
  std::printf(
      "debian_package: build %.1f min; lintian, install, checks and a pod %.1f min; "
      "repackage %.1f min; upgrade to purge %.1f min\n",
      minutes(built - t0), minutes(pod_up - built), minutes(repackaged_at - pod_up),
      minutes(Clock::now() - repackaged_at));
}

}  // namespace
}  // namespace crihook::testing
