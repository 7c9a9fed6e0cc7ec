// Hook modules: the example module works through the C ABI; modules built
// wrong are refused before any of their code runs.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/logging.h"
#include "hooks/chain.h"
#include "hooks/hook_manager.h"
#include "hooks/module/module_hook.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;
using ::testing::HasSubstr;

std::string variant(const std::string& name) { return VARIANT_DIR "/variant_" + name + ".so"; }

HookInput createInput(std::map<std::string, std::string> annotations = {}) {
  auto pod = std::make_shared<hv1::PodRecord>();
  for (const auto& [k, v] : annotations) (*pod->mutable_config()->mutable_annotations())[k] = v;
  HookInput in;
  in.method = LifecycleMethod::kCreateContainer;
  in.phase = Phase::kPre;
  in.pod = pod;
  return in;
}

std::string refusal(const std::string& path) {
  auto info = readModuleInfo(path);
  return info.ok() ? "accepted" : std::string(info.status().message());
}

TEST(ModuleTest, ExampleModuleSetsItsEnvAndRejectsDeniedPods) {
  auto info = readModuleInfo(EXAMPLE_MODULE);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_STREQ(info->name, "example");
  EXPECT_EQ(info->stages, CRIHOOK_STAGE(CRIHOOK_CREATE_CONTAINER, CRIHOOK_PRE));

  auto hook = loadModuleHook("example", EXAMPLE_MODULE, R"({"env": "TEAM", "value": "ml"})");
  ASSERT_TRUE(hook.ok()) << hook.status();
  EXPECT_TRUE((*hook)->subscribes(LifecycleMethod::kCreateContainer, Phase::kPre));
  EXPECT_FALSE((*hook)->subscribes(LifecycleMethod::kStartContainer, Phase::kPre));
  EXPECT_TRUE((*hook)->runsInline());
  HookDecision d = (*hook)->run(createInput());
  ASSERT_EQ(d.kind, HookDecision::Kind::kContinue) << d.status;
  ASSERT_EQ(d.adjustment.env.size(), 1u);
  EXPECT_EQ(d.adjustment.env[0], (EnvVar{"TEAM", "ml"}));

  d = (*hook)->run(createInput({{"example.crihook.io/deny", "quota spent"}}));
  EXPECT_EQ(d.kind, HookDecision::Kind::kReject);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status.message(), "denied by the example module: quota spent");
}

TEST(ModuleTest, InitFailureNamesTheModuleAndTheSetting) {
  auto hook = loadModuleHook("example", EXAMPLE_MODULE, R"({"colour": "blue"})");
  ASSERT_FALSE(hook.ok());
  EXPECT_THAT(std::string(hook.status().message()),
              HasSubstr(std::string("module ") + EXAMPLE_MODULE +
                        ": init failed (1): settings.colour: expected env or value"));
}

TEST(ModuleTest, WrongAbiIsRefusedBeforeAnyModuleCodeRuns) {
  TempDir dir;
  const std::string marker = dir.file("ran");
  ::setenv("CRIHOOK_TEST_MODULE_MARKER", marker.c_str(), 1);
  auto hook = loadModuleHook("v", variant("abi99"), "{}");
  ASSERT_FALSE(hook.ok());
  EXPECT_THAT(std::string(hook.status().message()),
              HasSubstr("built for module ABI version 99; this crihookd speaks 1"));
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the module's constructor ran";

  // The same module with the right ABI does load (and so runs its constructor).
  ASSERT_TRUE(loadModuleHook("v", variant("ok"), "{}").ok());
  EXPECT_TRUE(std::filesystem::exists(marker));
  ::unsetenv("CRIHOOK_TEST_MODULE_MARKER");
}

TEST(ModuleTest, MissingSymbolsAndNonModulesAreRefused) {
  EXPECT_THAT(refusal(variant("nofini")), HasSubstr("exports no crihook_module_fini"));
  EXPECT_THAT(refusal(TEST_BINARY), HasSubstr("exports no crihook_module_info"));
  TempDir dir;
  std::ofstream(dir.file("text.so")) << "hello";
  EXPECT_THAT(refusal(dir.file("text.so")), HasSubstr("not an ELF file"));
  EXPECT_THAT(refusal(dir.file("absent.so")), HasSubstr("cannot be read"));
}

TEST(ModuleTest, FailingSlowAndGarbageModulesAreHookFailures) {
  HookChain chain(logger("hook"));
  auto fail = loadModuleHook("fails", variant("fail"), "{}");
  auto garbage = loadModuleHook("garbage", variant("garbage"), "{}");
  auto slow = loadModuleHook("slow", variant("slow"), "{}");
  ASSERT_TRUE(fail.ok() && garbage.ok() && slow.ok());
  EXPECT_FALSE((*slow)->runsInline());
  HookDecision d = (*fail)->run(createInput());
  EXPECT_EQ(d.kind, HookDecision::Kind::kError);
  EXPECT_EQ(d.status.message(), "module returned 3: device busy");
  d = (*garbage)->run(createInput());
  EXPECT_EQ(d.kind, HookDecision::Kind::kError);
  EXPECT_THAT(std::string(d.status.message()),
              HasSubstr("reply of hook garbage: not a crihook.hook.v1.HookResponse"));

  HookSettings ignore;
  ignore.failure_policy = FailurePolicy::kIgnore;
  HookSettings quick;
  quick.timeout = std::chrono::milliseconds(100);
  chain.add(*fail, ignore);
  chain.add(*garbage, ignore);
  chain.add(*slow, quick);
  ChainOutcome out = chain.run(createInput(), std::chrono::steady_clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook slow failed in PreCreateContainer: timed out after 100ms"));
  EXPECT_EQ(out.ignored.size(), 2u);
}

TEST(ModuleTest, CrihookdLeavesARefusedModuleOutAndKeepsTheOthers) {
  Config config;
  config.state_dir = "";
  config.hookserver_dir = "";
  config.module_dir = VARIANT_DIR;
  HookConfig bad, good;
  bad.name = "old";
  bad.module = "variant_abi99.so";
  good.name = "example";
  good.module = EXAMPLE_MODULE;
  HookConfig off = good;
  off.name = "off";
  off.enabled = false;
  config.hooks = {bad, good, off};
  auto manager = HookManager::create(config, builtinHooks(), logger("hook"));
  ASSERT_TRUE(manager.ok()) << manager.status();
  EXPECT_EQ((*manager)->chains().get()->names(), std::vector<std::string>{"example"});
}

}  // namespace
}  // namespace crihook::testing
