// registry.h: built-in hooks by type name, made from their settings and
// crihookd's context. What each built-in does is its own folder's test.
#include "hooks/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace crihook {
namespace {

using ::testing::ElementsAre;

class NamedHook final : public Hook {
 public:
  explicit NamedHook(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  bool subscribes(LifecycleMethod, Phase) const override { return false; }
  HookDecision run(const HookInput&) override { return HookDecision::proceed(); }

 private:
  std::string name_;
};

TEST(HookRegistry, AnUnknownTypeIsRefusedListingTheKnownOnes) {
  auto made = builtinHooks().create("gpus", "g", "{}");
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(made.status().message(),
            "no built-in hook \"gpus\"; built-in hooks are: cdi, cpuset, device-lifecycle, gpu, "
            "noop, rdma, static, topology-check");
}

TEST(HookRegistry, AFactoryGetsTheNameTheSettingsAndCrihookdsContext) {
  HookRegistry r;
  std::string settings_seen, state_dir_seen;
  r.add("with-context",
        [&](const std::string& name, const std::string& settings,
            const BuiltinContext& context) -> absl::StatusOr<std::shared_ptr<Hook>> {
          settings_seen = settings;
          state_dir_seen = context.state_dir;
          return std::make_shared<NamedHook>(name);
        });
  r.add("simple",
        [](const std::string& name,
           const std::string& settings) -> absl::StatusOr<std::shared_ptr<Hook>> {
          if (settings != "{}") return absl::InvalidArgumentError("settings.x: unknown key");
          return std::make_shared<NamedHook>(name);
        });
  EXPECT_THAT(r.types(), ElementsAre("simple", "with-context"));

  auto made = r.create("with-context", "h1", R"({"a": 1})", {.state_dir = "/var/lib/crihook"});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->name(), "h1");
  EXPECT_EQ(settings_seen, R"({"a": 1})");
  EXPECT_EQ(state_dir_seen, "/var/lib/crihook");

  ASSERT_TRUE(r.create("simple", "h2", "{}").ok());
  EXPECT_EQ(r.create("simple", "h2", R"({"x": 1})").status().message(), "settings.x: unknown key");
}

}  // namespace
}  // namespace crihook
