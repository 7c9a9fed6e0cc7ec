// One version, from one source: debian/changelog's top entry names the
// release, and everything the build shows carries its number — crihookd
// --version, crihookctl --version, the man pages' .TH lines and the
// crihook_build_info metric of a running crihookd. The changelog is read here
// on its own, not with meson.build's code, so a slip in either shows as a
// disagreement; a binary or a page left from another version fails too.
// And the man pages name every option and command the binaries' usage texts
// name, and no other.

#include "base/version.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
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
    // .TH CRIHOOKD 8 "" "crihook 0.1.0" "System Administration" (no date: the
    // version names the release)
    std::smatch m;
    const std::regex title(R"re(\n\.TH \S+ \d "[^"]*" "crihook ([^"]*)")re");
    ASSERT_TRUE(std::regex_search(text, m, title)) << page;
    EXPECT_EQ(m[1], v) << page;
    EXPECT_EQ(text.find('@'), std::string::npos) << page << " has a placeholder left";
  }
}

// The options in `text`: "-x" and "--word" not inside a word, not "--flag=".
std::set<std::string> optionsIn(const std::string& text) {
  std::set<std::string> out;
  const std::regex option(R"((^|[^A-Za-z0-9_-])(--?[A-Za-z][A-Za-z-]*)(?![A-Za-z=-]))");
  for (std::sregex_iterator it(text.begin(), text.end(), option), end; it != end; ++it)
    out.insert((*it)[2]);
  return out;
}

// A usage text's calls: the "usage:" line and each indented line's text up
// to its description (two spaces), not the descriptions' own lines (from
// column 36) nor the prose at column 0.
std::string usageCalls(const std::string& usage) {
  std::istringstream in(usage);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos || indent >= 36) continue;
    if (indent == 0 && line.rfind("usage:", 0) != 0) continue;
    out += line.substr(0, line.find("  ", indent)) + "\n";
  }
  return out;
}

// The commands of crihookctl's usage: the first word of each line under
// "commands:" indented by two.
std::set<std::string> usageCommands(const std::string& usage) {
  std::set<std::string> out;
  const std::string list = usage.substr(usage.find("\ncommands:\n"));
  const std::regex command(R"(\n  ([a-z][a-z0-9]*)\b)");
  for (std::sregex_iterator it(list.begin(), list.end(), command), end; it != end; ++it)
    out.insert((*it)[1]);
  return out;
}

// A man page source's sections named `titles` (".SH TITLE"), as text:
// hyphens unescaped, font changes and macro names dropped.
std::string manSections(const std::string& page, const std::set<std::string>& titles) {
  std::istringstream in(page);
  std::string out;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(".SH ", 0) == 0) {
      inside = titles.count(line.substr(4)) > 0;
      continue;
    }
    if (!inside) continue;
    line = std::regex_replace(line, std::regex(R"(\\f[BIRP])"), "");
    line = std::regex_replace(line, std::regex(R"(\\-)"), "-");
    line = std::regex_replace(line, std::regex(R"(^\.[A-Z]+ ?)"), "");
    out += std::regex_replace(line, std::regex("\""), "") + "\n";
  }
  return out;
}

// The commands crihookctl(1) describes: the lower-case words of each tag
// (the line after .TP) under COMMANDS.
std::set<std::string> manCommands(const std::string& page) {
  std::set<std::string> out;
  const std::string section = page.substr(page.find("\n.SH COMMANDS\n"));
  const std::string tags = section.substr(0, section.find("\n.SH ", 1));
  const std::regex tag(R"(\n\.TP\n([^\n]*))");
  for (std::sregex_iterator it(tags.begin(), tags.end(), tag), end; it != end; ++it) {
    std::istringstream words(manSections(".SH X\n" + (*it)[1].str(), {"X"}));
    for (std::string w; words >> w;) {
      if (!w.empty() && w.back() == ',') w.pop_back();
      if (std::regex_match(w, std::regex("[a-z][a-z0-9]*"))) out.insert(w);
    }
  }
  return out;
}

// Names in one set and not the other, for a failure's message.
std::string onlyIn(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  for (const std::string& x : a) {
    if (!b.count(x)) out += cat(out.empty() ? "" : ", ", x);
  }
  return out.empty() ? "(none)" : out;
}

TEST(ManPages, CrihookdsOptionsAreItsUsagesOwn) {
  const ShellResult help = runShell(cat(CRIHOOKD_BINARY, " --help"));
  ASSERT_EQ(help.code, 0) << help.out;
  const std::set<std::string> usage = optionsIn(usageCalls(help.out));
  const std::set<std::string> man = optionsIn(
      manSections(readFile(CRIHOOK_SOURCE_DIR "/docs/man/crihookd.8.in"), {"SYNOPSIS", "OPTIONS"}));
  EXPECT_THAT(usage, ::testing::Contains("--config"));
  EXPECT_EQ(usage, man) << "in crihookd --help only: " << onlyIn(usage, man)
                        << "; in crihookd(8) only: " << onlyIn(man, usage);
}

TEST(ManPages, CrihookctlsOptionsAndCommandsAreItsUsagesOwn) {
  const ShellResult help = runShell(cat(CRIHOOKCTL_BINARY, " --help"));
  ASSERT_EQ(help.code, 0) << help.out;
  const std::string page = readFile(CRIHOOK_SOURCE_DIR "/docs/man/crihookctl.1.in");
  const std::set<std::string> usage = optionsIn(usageCalls(help.out));
  std::set<std::string> man = optionsIn(manSections(page, {"SYNOPSIS", "OPTIONS", "COMMANDS"}));
  man.erase("-m");  // nvidia-smi's, in "nvidia-smi topo -m prints it"
  EXPECT_THAT(usage, ::testing::Contains("--pcie-id"));
  EXPECT_EQ(usage, man) << "in crihookctl --help only: " << onlyIn(usage, man)
                        << "; in crihookctl(1) only: " << onlyIn(man, usage);
  const std::set<std::string> commands = usageCommands(help.out), described = manCommands(page);
  EXPECT_THAT(commands, ::testing::Contains("topology"));
  EXPECT_EQ(commands, described) << "commands in crihookctl --help only: "
                                 << onlyIn(commands, described)
                                 << "; in crihookctl(1) only: " << onlyIn(described, commands);
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
