// hook_manager.h: the chain made from the configuration and hookserver_dir,
// and made again when a registration changes, without the proxy. The same
// live through crihookd's proxy, watched with inotify, is remote_hooks_test's
// (RegistrationFilesAddedEditedAndRemovedTakeEffectLive,
// AHookServerDirMadeRemovedAndMadeAgainIsFollowed); a module refused at
// start-up is module_hook_test's (CrihookdLeavesARefusedModuleOutAndKeepsTheOthers).
#include "hooks/hook_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/text.h"
#include "hooks/remote/hookserver_dir.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class HookManagerTest : public ::testing::Test {
 protected:
  HookManagerTest() {
    std::filesystem::create_directories(dir_.file("hookserver.d"));
    config_.state_dir = "";
    config_.hookserver_dir = dir_.file("hookserver.d");
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_);
    sink->set_pattern("%v");
    log_ = std::make_shared<spdlog::logger>("hook-manager", sink);
  }

  void registerServer(const std::string& file,
                      const std::string& hooks = R"("PreCreateContainer")") {
    std::ofstream(dir_.file("hookserver.d/" + file))
        << R"({"remote-endpoint": ")" << dir_.file(file + ".sock")
        << R"(", "failure-policy": "Fail", "runtime-hooks": [)" << hooks << "]}";
  }
  std::unique_ptr<HookManager> start() {
    auto m = HookManager::create(config_, builtinHooks(), log_);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  static std::vector<std::string> names(const HookManager& m) { return m.chains().get()->names(); }
  static size_t onCreate(const HookManager& m) {
    return m.chains().get()->subscribers(LifecycleMethod::kCreateContainer, Phase::kPre);
  }

  TempDir dir_;
  Config config_;
  std::ostringstream lines_;  // before log_: its sink writes here
  std::shared_ptr<spdlog::logger> log_;
};

TEST_F(HookManagerTest, ConfiguredHooksComeFirstThenServersInFileNameOrder) {
  HookConfig noop, off;
  noop.name = "first";
  noop.builtin = "noop";
  off = noop;
  off.name = "off";
  off.enabled = false;
  config_.hooks = {noop, off};
  registerServer("b.json");
  registerServer("a.json");
  auto m = start();
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(names(*m), ElementsAre("first", "hookserver/a", "hookserver/b"));
}

TEST_F(HookManagerTest, AnUnknownBuiltinOrStageStopsStartUpNamingTheEntry) {
  HookConfig h;
  h.name = "x";
  h.builtin = "gpus";
  h.origin = "config /etc/crihook/crihookd.toml: hook[x]";
  config_.hooks = {h};
  auto m = HookManager::create(config_, builtinHooks(), log_);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("config /etc/crihook/crihookd.toml: hook[x]: no built-in hook \"gpus\""));

  h.builtin = "";
  h.endpoint = "unix://" + dir_.file("x.sock");
  h.stages = {"PreCreateContainer", "PreCreateContainers"};
  config_.hooks = {h};
  m = HookManager::create(config_, builtinHooks(), log_);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("config /etc/crihook/crihookd.toml: hook[x].stages[1]: "));
}

TEST_F(HookManagerTest, AnEditIsTakenABrokenOneKeepsTheLastGoodAndARemovedFileItsServerGoes) {
  registerServer("k.json");
  auto m = start();
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(names(*m), ElementsAre("hookserver/k"));
  EXPECT_EQ(onCreate(*m), 1u);

  registerServer("k.json", R"("PreRunPodSandbox")");
  m->reload();
  EXPECT_THAT(lines_.str(), HasSubstr("hook server k.json changed"));
  EXPECT_EQ(onCreate(*m), 0u) << "the edit is in force";

  std::ofstream(dir_.file("hookserver.d/k.json")) << R"({"remote-endpoint": )";
  m->reload();
  EXPECT_THAT(lines_.str(), HasSubstr("its previous registration stays in force"));
  EXPECT_THAT(names(*m), ElementsAre("hookserver/k"));
  EXPECT_EQ(onCreate(*m), 0u) << "the last good registration, not the first";

  std::filesystem::remove(dir_.file("hookserver.d/k.json"));
  m->reload();
  EXPECT_THAT(lines_.str(), HasSubstr("hook server k.json removed"));
  EXPECT_TRUE(names(*m).empty());
}

// Registrations past the directory's bounds are not registered, and the
// line that says so is said once per change, not on every re-read.
TEST_F(HookManagerTest, RegistrationsPastTheBoundAreLeftOutAndSaidOnce) {
  for (size_t i = 0; i < kMaxHookServerFiles + 2; ++i) registerServer(cat("s", 100 + i, ".json"));
  auto m = start();
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(names(*m).size(), kMaxHookServerFiles);
  EXPECT_EQ(names(*m).back(), cat("hookserver/s", 100 + kMaxHookServerFiles - 1));
  m->reload();
  const std::string said = "left unread past 64 registrations: 2 (\"s164.json\" to \"s165.json\")";
  std::string all = lines_.str();
  ASSERT_NE(all.find(said), std::string::npos) << all;
  EXPECT_EQ(all.find(said), all.rfind(said)) << "said again though nothing changed";
  registerServer("s166.json");
  m->reload();
  EXPECT_THAT(lines_.str(), HasSubstr("left unread past 64 registrations: 3"));
}

TEST_F(HookManagerTest, AnUnchangedDirectoryPublishesNoNewChain) {
  registerServer("k.json", R"("PreCreateContainer", "PreStopContainer")");
  auto m = start();
  ASSERT_NE(m, nullptr);
  const auto chain = m->chains().get();
  m->reload();
  EXPECT_EQ(m->chains().get(), chain) << "nothing changed: the chain in force stays";
  // Its warning (an unknown hook) is said once per version of the file.
  const std::string all = lines_.str();
  ASSERT_NE(all.find("unknown hook \"PreStopContainer\""), std::string::npos) << all;
  EXPECT_EQ(all.find("PreStopContainer"), all.rfind("PreStopContainer")) << all;
}

// While the runtime does not answer ListPodSandbox, the reconciler tries
// again after 0.5 s, doubling, at most 30 s; it never overflows however long.
TEST(HookManagerRetry, ListingIsRetriedFromHalfASecondDoublingUpToThirtySeconds) {
  using std::chrono::milliseconds;
  std::vector<int64_t> waits;
  milliseconds wait(0);
  for (int i = 0; i < 9; ++i) waits.push_back((wait = HookManager::listingRetryAfter(wait)).count());
  EXPECT_THAT(waits, ElementsAre(500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000));
  EXPECT_EQ(HookManager::listingRetryAfter(milliseconds::max() / 4).count(), 30000);
}

}  // namespace
}  // namespace crihook::testing
