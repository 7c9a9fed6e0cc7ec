// hookserver_dir.h: Koordinator's hook server registrations, read as
// koord-runtime-proxy reads them, bounded, with what was ignored said. How a
// registration reaches the chain live is remote_hooks_test's.
#include "hooks/remote/hookserver_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "base/text.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

TEST(HookServerFileTest, BadRegistrationsNameFileKeyAndReason) {
  auto error = [](const std::string& text) {
    auto r = parseHookServerFile("k.json", text);
    return r.ok() ? "accepted" : std::string(r.status().message());
  };
  EXPECT_EQ(error("{"), "hook server registration k.json: not valid JSON");
  EXPECT_EQ(error("[]"), "hook server registration k.json: expected a JSON object");
  EXPECT_THAT(error(R"({"failure-policy": "Fail", "runtime-hooks": ["PreCreateContainer"]})"),
              HasSubstr("k.json: remote-endpoint: expected the hook server's Unix socket path"));
  EXPECT_THAT(error(R"({"remote-endpoint": "tcp://x", "runtime-hooks": ["PreCreateContainer"]})"),
              HasSubstr("k.json: remote-endpoint: expected a Unix socket endpoint"));
  // What Go's json.Unmarshal refuses too: a value of the wrong type.
  EXPECT_THAT(error(R"({"remote-endpoint": "/k.sock", "failure-policy": 1})"),
              HasSubstr("k.json: failure-policy: expected a string"));
  EXPECT_THAT(error(R"({"remote-endpoint": "/k.sock", "runtime-hooks": "PreCreateContainer"})"),
              HasSubstr("k.json: runtime-hooks: expected an array of hook names"));
  EXPECT_THAT(
      error(R"({"remote-endpoint": "/k.sock", "runtime-hooks": ["PreCreateContainer", 7]})"),
      HasSubstr("k.json: runtime-hooks[1]: expected a string"));
  auto ok = parseHookServerFile("koordlet.json",
                                R"({"remote-endpoint": "unix:///var/run/koordlet/koordlet.sock",
       "runtime-hooks": ["PreRunPodSandbox", "PostStopPodSandbox", "PreCreateContainer",
       "PreStartContainer", "PostStartContainer", "PostStopContainer", "PreUpdateContainerResources"]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->name, "hookserver/koordlet");
  EXPECT_EQ(ok->socket_path, "/var/run/koordlet/koordlet.sock");
  EXPECT_TRUE(ok->ignore_failures);
  EXPECT_EQ(ok->stages.size(), 7u);
  EXPECT_TRUE(ok->warnings.empty());
}

// What koord-runtime-proxy accepts (pkg/runtimeproxy/config at Koordinator
// a7a1b76: json.Unmarshal into RuntimeHookConfig, `policy == PolicyFail`),
// crihook accepts, and says what it ignored.
TEST(HookServerFileTest, RegistrationsKoordinatorAcceptsAreAcceptedWithWarnings) {
  auto parse = [](const std::string& text) {
    auto r = parseHookServerFile("koordlet.json", text);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : HookServerRegistration{};
  };
  auto warnings = [](const HookServerRegistration& r) {
    std::string all;
    for (const auto& w : r.warnings) all += w + "\n";
    return all;
  };
  // koordlet with its Resctrl feature on.
  auto r = parse(R"({"remote-endpoint": "/var/run/koordlet/koordlet.sock",
      "failure-policy": "Ignore", "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer",
      "PreRemoveRunPodSandbox"]})");
  EXPECT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.uncallable, std::vector<std::string>{"PreRemoveRunPodSandbox"});
  EXPECT_THAT(warnings(r), HasSubstr("runtime-hooks: PreRemoveRunPodSandbox: Koordinator's "
                                     "RuntimeHookService has no call for this stage"));

  r = parse(R"({"remote-endpoint": "/k.sock", "runtime-hooks": ["PreCreateContainer"],
      "priority": 3})");
  EXPECT_EQ(r.stages.size(), 1u);
  EXPECT_THAT(warnings(r), HasSubstr("\"priority\": unknown key, ignored"));

  r = parse(R"({"remote-endpoint": "/k.sock", "runtime-hooks": ["PreStopContainer",
      "PreCreateContainer"]})");
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].method, LifecycleMethod::kCreateContainer);
  EXPECT_THAT(warnings(r), HasSubstr("runtime-hooks[0]: unknown hook \"PreStopContainer\""));

  for (const char* hooks : {R"("runtime-hooks": [])", R"("runtime-hooks": null)", ""}) {
    r = parse(cat(R"({"remote-endpoint": "/k.sock")", *hooks ? ", " : "", hooks, "}"));
    EXPECT_TRUE(r.stages.empty()) << hooks;
    EXPECT_THAT(warnings(r), HasSubstr("no hook crihook can call")) << hooks;
  }

  // Only exactly "Fail" fails; "fail" is ignored, as koord-runtime-proxy compares.
  r = parse(R"({"remote-endpoint": "/k.sock", "failure-policy": "Fail"})");
  EXPECT_FALSE(r.ignore_failures);
  r = parse(R"({"remote-endpoint": "/k.sock", "failure-policy": "fail",
      "runtime-hooks": ["PreCreateContainer"]})");
  EXPECT_TRUE(r.ignore_failures);
  EXPECT_THAT(warnings(r), HasSubstr("failure-policy: \"fail\" is not \"Fail\""));

  // Go matches keys case-insensitively, an exact match first.
  r = parse(R"({"Remote-Endpoint": "/other.sock", "remote-endpoint": "/k.sock",
      "RUNTIME-HOOKS": ["PreCreateContainer"]})");
  EXPECT_EQ(r.socket_path, "/k.sock");
  EXPECT_EQ(r.stages.size(), 1u);
  EXPECT_TRUE(r.warnings.empty()) << warnings(r);

  // Untrusted text in a warning is quoted and cut short.
  r = parse(cat(R"({"remote-endpoint": "/k.sock", "runtime-hooks": ["PreCreateContainer"], ")",
                std::string(500, 'x'), R"(\n": 1})"));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_LT(r.warnings[0].size(), 200u);
  EXPECT_EQ(r.warnings[0].find('\n'), std::string::npos);
}

TEST(HookServerFileTest, OnlyBoundedRegularFilesAreRead) {
  TempDir dir;
  std::ofstream(dir.file("big.json")) << std::string(100 << 10, ' ');
  ASSERT_EQ(::mkfifo(dir.file("fifo.json").c_str(), 0600), 0);
  std::ofstream(dir.file("ok.json")) << R"({"remote-endpoint": "/k.sock"})";
  auto files = readHookServerDir(dir.path()).files;
  ASSERT_EQ(files.size(), 3u);
  EXPECT_THAT(std::string(files[0].registration.status().message()),
              HasSubstr("big.json: 102400 bytes, more than the 65536 allowed"));
  EXPECT_THAT(std::string(files[1].registration.status().message()),
              HasSubstr("fifo.json: a FIFO, not a regular file"));
  EXPECT_TRUE(files[2].registration.ok()) << files[2].registration.status();
}

// A link to /dev/zero once read gigabytes and aborted crihookd; a 300 MB
// registration was read and kept whole. Both are refused unread; a link to a
// regular registration is still followed.
TEST(HookServerFileTest, LinkToADeviceAndHugeSparseFileAreRefusedUnread) {
  TempDir dir;
  ASSERT_EQ(::symlink("/dev/zero", dir.file("a-zero.json").c_str()), 0);
  {
    std::ofstream(dir.file("b-huge.json")) << "{";
    ASSERT_EQ(::truncate(dir.file("b-huge.json").c_str(), 300 << 20), 0);  // sparse
  }
  std::ofstream(dir.file("real")) << R"({"remote-endpoint": "/k.sock"})";
  ASSERT_EQ(::symlink(dir.file("real").c_str(), dir.file("c-link.json").c_str()), 0);
  const auto start = std::chrono::steady_clock::now();
  auto files = readHookServerDir(dir.path()).files;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_THAT(std::string(files[0].registration.status().message()),
              HasSubstr("a-zero.json: a character device, not a regular file"));
  EXPECT_THAT(std::string(files[1].registration.status().message()),
              HasSubstr("b-huge.json: 314572800 bytes, more than the 65536 allowed"));
  ASSERT_TRUE(files[2].registration.ok()) << files[2].registration.status();
  EXPECT_EQ(files[2].registration->socket_path, "/k.sock");
}

TEST(HookServerFileTest, DeepNestingIsRefusedBeforeItIsParsed) {
  auto r =
      parseHookServerFile("deep.json", R"({"remote-endpoint": "/k.sock", "x": )" +
                                           std::string(30000, '[') + std::string(30000, ']') + "}");
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("hook server registration deep.json: nested deeper than 8"));
}

// 10,000 registrations of 60 KB dropped in once took crihookd to a
// gigabyte, 25,000 aborted it: the directory is read within its bounds, and
// what is left out is said in one line.
TEST(HookServerDirTest, AtMostSixtyFourRegistrationsAreReadAndTheRestNamed) {
  TempDir dir;
  for (int i = 0; i < 100; ++i)
    std::ofstream(dir.file(cat("s", 100 + i, ".json"))) << R"({"remote-endpoint": "/k.sock"})";
  auto read = readHookServerDir(dir.path());
  ASSERT_EQ(read.files.size(), kMaxHookServerFiles);
  EXPECT_EQ(read.files.front().file, "s100.json");
  EXPECT_EQ(read.files.back().file, "s163.json");
  EXPECT_EQ(read.skipped, cat("hook server registrations in ", dir.path(),
                              ": 100 entries; left unread past 64 registrations: 36 (\"s164.json\" "
                              "to \"s199.json\")"));
}

TEST(HookServerDirTest, RegistrationsStopAtAMebibyteTogether) {
  TempDir dir;
  const std::string padded =
      R"({"remote-endpoint": "/k.sock", "x": ")" + std::string(60000, 'x') + R"("})";
  for (int i = 0; i < 20; ++i) std::ofstream(dir.file(cat("s", 10 + i, ".json"))) << padded;
  auto read = readHookServerDir(dir.path());
  const size_t fit = kMaxHookServerDirBytes / padded.size();  // 17
  ASSERT_EQ(read.files.size(), fit);
  for (const auto& f : read.files) EXPECT_TRUE(f.registration.ok()) << f.registration.status();
  EXPECT_THAT(read.skipped, HasSubstr(cat("left unread past 1048576 bytes of registrations: ",
                                          20 - fit, " (\"s", 10 + fit, ".json\" to \"s29.json\")")));
}

TEST(HookServerDirTest, AHugeDirectoryIsListedOnlyToItsBound) {
  TempDir dir;
  for (int i = 0; i < 1500; ++i) std::ofstream(dir.file(cat("junk-", 1000 + i)));
  std::ofstream(dir.file("a.json")) << R"({"remote-endpoint": "/k.sock"})";
  std::ofstream(dir.file("zz.json")) << R"({"remote-endpoint": "/k.sock"})";
  auto read = readHookServerDir(dir.path());
  ASSERT_EQ(read.files.size(), 1u);  // zz.json sorts past the 1024 listed
  EXPECT_EQ(read.files[0].file, "a.json");
  EXPECT_THAT(read.skipped, HasSubstr(": 1502 entries; left unread past the first 1024 entries "
                                      "listed: 478, of them 478 not listed"));
}

TEST(HookServerDirTest, NothingLeftOutSaysNothing) {
  TempDir dir;
  std::ofstream(dir.file("k.json")) << R"({"remote-endpoint": "/k.sock"})";
  EXPECT_EQ(readHookServerDir(dir.path()).skipped, "");
  EXPECT_EQ(readHookServerDir(dir.file("missing")).skipped, "");
}

}  // namespace
}  // namespace crihook::testing
