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
  auto files = readHookServerDir(dir.path());
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
  auto files = readHookServerDir(dir.path());
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

}  // namespace
}  // namespace crihook::testing
