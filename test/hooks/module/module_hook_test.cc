// Hook modules in process (module_hook.h): the example module works through
// the C ABI; modules built wrong are refused before any of their code runs;
// one that fails, answers garbage or hangs is a hook failure, and a hung one
// costs its executor's workers, not a thread per call.

#include "hooks/module/module_hook.h"

#include <dlfcn.h>
#include <elf.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>

#include "base/logging.h"
#include "hooks/chain.h"
#include "hooks/hook_manager.h"
#include "test/hooks/module/module_test_input.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/process_stats.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

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
  // INLINE, as it declares, yet run on its workers (AnInlineModuleThatLoops...).
  EXPECT_FALSE((*hook)->runsInline());
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

// info_size must be the struct's size, as the symbol's is: a module that
// claims another is refused, naming both, and none of its code runs.
TEST(ModuleTest, AModuleWhoseInfoSizeIsWrongIsRefusedBeforeAnyOfItsCodeRuns) {
  TempDir dir;
  const std::string marker = dir.file("ran");
  ::setenv("CRIHOOK_TEST_MODULE_MARKER", marker.c_str(), 1);
  auto hook = loadModuleHook("v", variant("infosize"), "{}");
  ::unsetenv("CRIHOOK_TEST_MODULE_MARKER");
  ASSERT_FALSE(hook.ok());
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(hook.status().message()),
      HasSubstr("crihook_module_info is " + std::to_string(sizeof(crihook_module_info) + 8) +
                " bytes; expected " + std::to_string(sizeof(crihook_module_info))));
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the module's constructor ran";
}

TEST(ModuleTest, MissingSymbolsAndNonModulesAreRefused) {
  EXPECT_THAT(refusal(variant("nofini")), HasSubstr("exports no crihook_module_fini"));
  EXPECT_THAT(refusal(TEST_BINARY), HasSubstr("exports no crihook_module_info"));
  TempDir dir;
  std::ofstream(dir.file("text.so")) << "hello";
  EXPECT_THAT(refusal(dir.file("text.so")), HasSubstr("not an ELF file"));
  EXPECT_THAT(refusal(dir.file("absent.so")), HasSubstr("cannot be read"));
}

// The module's dynamic string table may be the file's last bytes: a linker
// is free to put it there. Made so by copying it to the end of the example
// module and pointing its section header there.
// The example module's bytes, its ELF header and its dynamic symbol
// table's section header (at index `dynsym_at`).
struct ExampleElf {
  std::string elf;
  Elf64_Ehdr eh{};
  Elf64_Shdr dynsym{};
  size_t dynsym_at = 0;
  size_t header(size_t i) const { return eh.e_shoff + i * sizeof(Elf64_Shdr); }
  Elf64_Shdr section(size_t i) const {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + header(i), sizeof sh);
    return sh;
  }
};

ExampleElf exampleElf() {
  ExampleElf x;
  std::ifstream in(EXAMPLE_MODULE, std::ios::binary);
  x.elf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  EXPECT_GT(x.elf.size(), sizeof(Elf64_Ehdr));
  if (x.elf.size() < sizeof(Elf64_Ehdr)) return x;
  std::memcpy(&x.eh, x.elf.data(), sizeof x.eh);
  for (size_t i = 0; i < x.eh.e_shnum; ++i) {
    if (x.section(i).sh_type == SHT_DYNSYM) x.dynsym = x.section(i), x.dynsym_at = i;
  }
  EXPECT_EQ(x.dynsym.sh_type, static_cast<uint32_t>(SHT_DYNSYM));
  return x;
}

TEST(ModuleTest, AStringTableThatEndsTheFileIsRead) {
  ExampleElf x = exampleElf();
  ASSERT_EQ(x.dynsym.sh_type, static_cast<uint32_t>(SHT_DYNSYM));
  std::string& elf = x.elf;
  auto header = [&](size_t i) { return x.header(i); };
  const Elf64_Shdr& dynsym = x.dynsym;
  Elf64_Shdr strtab = x.section(dynsym.sh_link);
  const std::string names = elf.substr(strtab.sh_offset, strtab.sh_size);
  strtab.sh_offset = elf.size();
  elf += names;
  std::memcpy(elf.data() + header(dynsym.sh_link), &strtab, sizeof strtab);
  TempDir dir;
  std::ofstream(dir.file("last.so"), std::ios::binary) << elf;
  auto info = readModuleInfo(dir.file("last.so"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->abi_version, CRIHOOK_MODULE_ABI_VERSION);
}

// A symbol table whose string table is named one past the last section: no
// string table, though the bytes after the section table would read as the
// real one's header.
TEST(ModuleTest, AStringTableLinkPastTheLastSectionIsNone) {
  ExampleElf x = exampleElf();
  ASSERT_EQ(x.dynsym.sh_type, static_cast<uint32_t>(SHT_DYNSYM));
  std::string& elf = x.elf;
  ASSERT_EQ(x.header(x.eh.e_shnum), elf.size()) << "the section table ends the file";
  const Elf64_Shdr strtab = x.section(x.dynsym.sh_link);
  elf.append(reinterpret_cast<const char*>(&strtab), sizeof strtab);
  Elf64_Shdr dynsym = x.dynsym;
  dynsym.sh_link = x.eh.e_shnum;
  std::memcpy(elf.data() + x.header(x.dynsym_at), &dynsym, sizeof dynsym);
  TempDir dir;
  std::ofstream(dir.file("past.so"), std::ios::binary) << elf;
  auto info = readModuleInfo(dir.file("past.so"));
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("no dynamic string table"));
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

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Whether `ex` refuses every call from now on: its hook is unhealthy and
// every worker is stuck, so no probe can be let through (executor.h).
bool refusesEveryCall(const HookExecutor& ex) {
  return !ex.healthy() && ex.stuckWorkers() == ex.workers();
}

// What a wait for refusesEveryCall() that ran out says of `ex`.
std::string stateOf(const HookExecutor& ex) {
  return std::to_string(ex.stuckWorkers()) + " of " + std::to_string(ex.workers()) +
         " workers stuck, " + (ex.healthy() ? "healthy" : "unhealthy");
}

// A hook that never answers is refused once every worker is stuck on it and
// it has timed out kUnhealthyAfterTimeouts times in a row. How many calls
// that takes is the scheduler's to say: a call whose budget passes before a
// worker takes it off the queue never reaches the hook and sticks no worker,
// and while a worker is idle the next call is let through as a probe. So the
// tests below call until the executor says so, not a fixed number of times.
// A module that declares itself INLINE and loops: run on its workers all
// the same, its call is answered at its timeout by its failure policy, and
// the caller's thread (an event loop's, for an inline hook) is never held.
TEST(ModuleTest, AnInlineModuleThatLoopsCostsAWorkerNotTheCaller) {
  auto spin = loadModuleHook("spin", variant("spin"), "{}");
  ASSERT_TRUE(spin.ok()) << spin.status();
  EXPECT_FALSE((*spin)->runsInline());
  HookChain chain(logger("hook"));
  HookSettings s;
  s.timeout = std::chrono::milliseconds(100);
  chain.add(*spin, s);
  auto run = std::async(std::launch::async,
                        [&] { return chain.run(createInput(), Clock::time_point::max()); });
  const bool answered = run.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  // Let the loop end whatever happened (the module is loaded once: this is
  // the handle the loader got).
  void* handle = ::dlopen(variant("spin").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  auto release = reinterpret_cast<void (*)()>(::dlsym(handle, "variant_release"));
  ASSERT_NE(release, nullptr);
  release();
  ::dlclose(handle);
  ASSERT_TRUE(answered) << "the module held its caller";
  const ChainOutcome out = run.get();
  EXPECT_EQ(out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook spin failed in PreCreateContainer: timed out after 100ms"));
}

TEST(ModuleTest, AHungModuleUnderAThousandCallsKeepsThreadsAndMemoryFlat) {
  auto hang = loadModuleHook("hang", variant("hang"), "{}");
  ASSERT_TRUE(hang.ok()) << hang.status();
  ASSERT_FALSE((*hang)->runsInline());
  const size_t threads_before = threadCount();
  HookChain chain(logger("hook"));
  HookSettings s;
  s.timeout = 5ms;
  s.failure_policy = FailurePolicy::kIgnore;
  // The executor add() would make, kept to ask it how many workers are stuck.
  std::shared_ptr<HookExecutor> ex = HookChain::makeExecutor(**hang, s, logger("hook"), nullptr);
  ASSERT_NE(ex, nullptr);
  ASSERT_EQ(ex->workers(), size_t{kDefaultHookWorkers});
  chain.add(*hang, s, ex);
  // Warm up: the workers get stuck, the hook is marked unhealthy, the
  // allocator and the logger have their buffers.
  int warm_up = 0;
  auto warmed_up = [&] {
    if (warm_up >= 20 && refusesEveryCall(*ex)) return true;
    ChainOutcome out = chain.run(createInput(), Clock::time_point::max());
    ++warm_up;
    EXPECT_TRUE(out.status.ok()) << out.status;  // ignore: skipped
    EXPECT_EQ(out.ignored.size(), 1u);
    return false;
  };
  ASSERT_TRUE(eventually(warmed_up)) << "after " << warm_up << " calls: " << stateOf(*ex);
  const size_t threads = threadCount();
  const long rss = rssKiB();
  const auto t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) {
    ChainOutcome out = chain.run(createInput(), Clock::time_point::max());
    ASSERT_TRUE(out.status.ok()) << out.status;  // ignore: skipped
    ASSERT_EQ(out.ignored.size(), 1u);
    ASSERT_THAT(out.ignored[0], HasSubstr("unhealthy")) << "call " << i;
  }
  // Refused at once while unhealthy: 1,000 calls cost nothing like 1,000 budgets.
  EXPECT_LT(Clock::now() - t0, 1000 * s.timeout / 2);
  // The pool (kDefaultHookWorkers threads, stuck for ever) and nothing more:
  // a thread per call would leave 1,000 behind.
  EXPECT_LE(threadCount(), threads);
  EXPECT_LE(threadCount(), threads_before + kDefaultHookWorkers);
  // Flat: a thread per call costs at least its touched stack and TLS (8 KiB
  // and more each, 8 MiB per 1,000); a leaked copy of each request (~1 KiB)
  // would show as 1 MiB. 1 MiB of slack absorbs the allocator's noise.
  EXPECT_LT(rssKiB() - rss, 1024) << "RSS grew from " << rss << " KiB";
  ChainOutcome out = chain.run(createInput(), Clock::time_point::max());
  ASSERT_EQ(out.ignored.size(), 1u);
  EXPECT_THAT(out.ignored[0], HasSubstr("hook hang failed in PreCreateContainer: unhealthy (3 or "
                                        "more timeouts in a row, 2 of 2 workers stuck)"));

  // Under failure_policy = fail every call times out until the hook is
  // refused, and then it is refused at once, naming the hook.
  HookChain failing(logger("hook"));
  HookSettings f;
  f.timeout = 5ms;
  std::shared_ptr<HookExecutor> fex = HookChain::makeExecutor(**hang, f, logger("hook"), nullptr);
  ASSERT_NE(fex, nullptr);
  failing.add(*hang, f, fex);
  size_t timeouts = 0;
  auto refusing = [&] {
    if (refusesEveryCall(*fex)) return true;
    EXPECT_EQ(failing.run(createInput(), Clock::time_point::max()).status.code(),
              absl::StatusCode::kDeadlineExceeded);
    ++timeouts;
    return false;
  };
  ASSERT_TRUE(eventually(refusing)) << "after " << timeouts << " calls: " << stateOf(*fex);
  // Not refused before it had timed out kUnhealthyAfterTimeouts times and
  // every worker had taken a call.
  EXPECT_GE(timeouts, std::max<size_t>(kUnhealthyAfterTimeouts, fex->workers()));
  out = failing.run(createInput(), Clock::time_point::max());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(out.status.message()),
              HasSubstr("hook hang failed in PreCreateContainer: unhealthy"));
}

}  // namespace
}  // namespace crihook::testing
