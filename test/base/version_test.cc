// One version, from one source: debian/changelog's top entry names the
// release, and everything the build shows carries its number — crihookd
// --version, crihookctl --version, the man pages' .TH lines and the
// crihook_build_info metric of a running crihookd. The changelog is read here
// on its own, not with meson.build's code, so a slip in either shows as a
// disagreement; a binary or a page left from another version fails too.

#include "base/version.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "base/text.h"
#include "config/config.h"
#include "confine/capabilities.h"
#include "test/support/child_process.h"
#include "test/support/e2e_env.h"
#include "test/support/fake_cri_server.h"
#include "tools/crihookctl/status.h"

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;

// The upstream version of the changelog's top entry, "crihook (VERSION)
// DISTRIBUTION; ...": VERSION without an epoch "N:" and without what follows
// the first '+', '~' or '-' (the package's revision or suffix).
std::string changelogVersion() {
  std::istringstream changelog(readFile(CRIHOOK_SOURCE_DIR "/debian/changelog"));
  std::string top;
  std::getline(changelog, top);
  std::smatch m;
  if (!std::regex_search(top, m, std::regex(R"(^crihook \(([^)]+)\) )"))) {
    ADD_FAILURE() << "debian/changelog's first line is no entry's: " << top;
    return "";
  }
  std::string v = m[1];
  if (auto colon = v.find(':'); colon != std::string::npos) v = v.substr(colon + 1);
  return v.substr(0, v.find_first_of("+~-"));
}

// What the program prints for --version, and how it exits.
ShellResult versionOutput(const std::string& binary) {
  return runShell(cat(binary, " --version 2>&1"));
}

TEST(Version, TheChangelogNamesAReleaseAndTheBuildCarriesIt) {
  const std::string v = changelogVersion();
  EXPECT_TRUE(std::regex_match(v, std::regex(R"([0-9]+(\.[0-9]+)*)"))) << v;
  EXPECT_EQ(version(), v);
}

TEST(Version, CrihookdAndCrihookctlPrintTheSameLine) {
  const std::string v = changelogVersion();
  const ShellResult d = versionOutput(CRIHOOKD_BINARY);
  const ShellResult c = versionOutput(CRIHOOKCTL_BINARY);
  EXPECT_EQ(d.code, 0) << d.out;
  EXPECT_EQ(c.code, 0) << c.out;
  // "crihookd 0.1.0 (git 6ccc633e6840-dirty)\n", or without the commit.
  const std::regex line(R"(([a-z]+) ([0-9.]+)( \(git [A-Za-z0-9._+-]+\))?\n)");
  std::smatch dm, cm;
  ASSERT_TRUE(std::regex_match(d.out, dm, line)) << d.out;
  ASSERT_TRUE(std::regex_match(c.out, cm, line)) << c.out;
  EXPECT_EQ(dm[1], "crihookd");
  EXPECT_EQ(cm[1], "crihookctl");
  EXPECT_EQ(dm[2], v);
  EXPECT_EQ(cm[2], v);
  EXPECT_EQ(dm[3], cm[3]) << "the two binaries were built from different commits";
  EXPECT_EQ(d.out, versionLine("crihookd", version(), commit()) + "\n");
}

TEST(Version, TheCommitIsShownOnlyWhereTheTreeIsAGitCheckout) {
  if (std::filesystem::exists(CRIHOOK_SOURCE_DIR "/.git")) {
    EXPECT_NE(commit(), "");
    EXPECT_NE(commit(), "unknown") << "git could not describe " CRIHOOK_SOURCE_DIR;
  } else {
    EXPECT_EQ(commit(), "");
  }
}

TEST(Version, TheLineNamesTheCommitWhenThereIsOne) {
  EXPECT_EQ(versionLine("crihookd", "1.2.3", ""), "crihookd 1.2.3");
  EXPECT_EQ(versionLine("crihookctl", "1.2.3", "6ccc633e6840-dirty"),
            "crihookctl 1.2.3 (git 6ccc633e6840-dirty)");
}

TEST(Version, TheManPagesTitleLinesCarryIt) {
  const std::string v = changelogVersion();
  for (const char* page : {"crihookd.8", "crihookctl.1", "crihook.toml.5"}) {
    const std::string text = readFile(cat(CRIHOOK_MAN_DIR "/", page));
    // .TH CRIHOOKD 8 "2026-12-01" "crihook 0.1.0" "System Administration"
    std::smatch m;
    const std::regex title(R"re(\n\.TH \S+ \d "[^"]*" "crihook ([^"]*)")re");
    ASSERT_TRUE(std::regex_search(text, m, title)) << page;
    EXPECT_EQ(m[1], v) << page;
    EXPECT_EQ(text.find('@'), std::string::npos) << page << " has a placeholder left";
  }
}

TEST(Version, CrihookdsBuildInfoMetricAndReadyzCarryItAndTheCommit) {
  auto self = confine::readCapStatus();
  ASSERT_TRUE(self.ok()) << self.status();
  if (!(self->effective & (confine::CapSet{1} << 8))) {
    // CI runs as root: there, as where the e2e suite is required, a skip
    // would hide the only check of a running crihookd's version.
    if (e2eRequired()) FAIL() << "CRIHOOK_E2E_REQUIRED is set but this test lacks CAP_SETPCAP";
    GTEST_SKIP() << "needs CAP_SETPCAP: crihookd drops capabilities from the bounding set at start";
  }
  TempDir dir;
  FakeCriServer runtime(dir.file("runtime.sock"));
  runtime.start();
  // [metrics] listen's default: metrics.sock beside the CRI socket.
  ChildProcess crihookd(
      CRIHOOKD_BINARY,
      {"--listen", dir.file("crihook.sock"), "--backend", "unix://" + dir.file("runtime.sock"),
       "--state-dir", dir.file("state"), "--log-level", "warn"},
      dir.file("crihookd.log"));
  ASSERT_TRUE(waitForFile(dir.file("metrics.sock"), 10s)) << readFile(dir.file("crihookd.log"));
  MetricsListen where;
  where.kind = MetricsListen::Kind::kUnix;
  where.path = dir.file("metrics.sock");
  auto scraped = ctl::httpGet(where, "/metrics", 5s);
  ASSERT_TRUE(scraped.ok()) << scraped.status();
  auto samples = ctl::parseExposition(scraped->body);
  ASSERT_TRUE(samples.ok()) << samples.status();
  int found = 0;
  for (const ctl::Sample& s : *samples) {
    if (s.name != "crihook_build_info") continue;
    ++found;
    EXPECT_EQ(s.labels, (std::map<std::string, std::string>{{"version", changelogVersion()},
                                                            {"commit", std::string(commit())}}));
    EXPECT_EQ(s.value, 1);
  }
  EXPECT_EQ(found, 1) << scraped->body;
  // /readyz names the build on its second line, ready or not yet.
  auto ready = ctl::httpGet(where, "/readyz", 5s);
  ASSERT_TRUE(ready.ok()) << ready.status();
  const std::string body = ready->body;
  const size_t nl = body.find('\n');
  ASSERT_NE(nl, std::string::npos) << body;
  EXPECT_EQ(body.substr(nl + 1),
            versionLine("crihookd", changelogVersion(), std::string(commit())) + "\n");
  crihookd.signal(SIGTERM);
  EXPECT_EQ(crihookd.wait(10s), 0) << readFile(dir.file("crihookd.log"));
}

}  // namespace
}  // namespace crihook::testing
