// actions.h: an action's settings, its templates filled from the device
// and the pod, commands (status, output, timeouts, why one could not start),
// the built-ins through a fixture sysfs and device root, and the device facts
// a record holds, checked when read back.

#include "hooks/builtin/lifecycle/actions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test/support/child_process.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kGpu0[] = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";

TEST(Action, SettingsAreCheckedWhenRead) {
  auto err = [](const char* json) {
    auto a = Action::parse(nlohmann::json::parse(json), "settings.gpu.init[0]");
    return a.ok() ? std::string("ok") : std::string(a.status().message());
  };
  EXPECT_EQ(err(R"({"command": ["/bin/true", "{uid}"]})"),
            "settings.gpu.init[0].command[1]: unknown placeholder {uid}; known: {type}, {index}, "
            "{minor}, {id}, {uuid}, {pci}, {name}, {node}, {pod_namespace}, {pod_name}, {pod_uid}");
  EXPECT_EQ(err(R"({"command": ["/bin/true", "{minor"]})"),
            "settings.gpu.init[0].command[1]: unclosed placeholder in \"{minor\"");
  EXPECT_EQ(err(R"({"command": []})"),
            "settings.gpu.init[0].command: expected a non-empty array of strings, got []");
  EXPECT_EQ(
      err(R"({"builtin": "reboot"})"),
      "settings.gpu.init[0].builtin: expected \"pci-reset\" or \"check-node\", got \"reboot\"");
  EXPECT_EQ(err(R"({"command": ["/bin/true"], "timeout": "soon"})"),
            "settings.gpu.init[0].timeout: expected a duration such as \"2s\" or \"500ms\", got "
            "\"soon\"");
  EXPECT_EQ(err(R"({"command": ["/bin/true"], "builtin": "pci-reset"})"),
            "settings.gpu.init[0]: \"command\" and \"builtin\" are either-or");
  EXPECT_EQ(err(R"({"cmd": ["/bin/true"]})"),
            "settings.gpu.init[0]: unknown key \"cmd\" (known: command, builtin, timeout)");
  EXPECT_EQ(err(R"({"timeout": "1s"})"),
            "settings.gpu.init[0]: expected \"command\" or \"builtin\"");
  EXPECT_EQ(err(R"({"command": ["/bin/true", "{{literal}}"], "timeout": "1s"})"), "ok");
}

TEST(Action, TemplatesAreFilledFromTheDeviceAndThePod) {
  auto a = Action::parse(
      nlohmann::json::parse(
          R"({"command": ["tool", "--dev={node}", "{uuid}@{pci}", "{pod_namespace}/{pod_name}/{pod_uid}", "{{x}}"]})"),
      "a");
  ASSERT_TRUE(a.ok()) << a.status();
  DeviceFacts gpu{"gpu", 0, 3, "", kGpu0, "0000:18:00.0", "", "nvidia3"};
  auto argv = a->expand(gpu, {"ml", "train-0", "uid-1"});
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("tool", "--dev=/dev/nvidia3", std::string(kGpu0) + "@0000:18:00.0",
                                 "ml/train-0/uid-1", "{x}"));
  // A value the device lacks fails the action instead of running it with "".
  DeviceFacts nic{"rdma", 0, 1, "0000:1c:00.3", "", "0000:1c:00.3", "mlx5_6", ""};
  auto missing = a->expand(nic, {"ml", "train-0", "uid-1"});
  EXPECT_EQ(std::string(missing.status().message()),
            "rdma 0 (minor 1, mlx5_6, 0000:1c:00.3) has no value for {node}");
}

TEST(Action, CommandsReportStatusOutputTimeoutsAndWhyTheyCouldNotStart) {
  EXPECT_TRUE(runCommand({"/bin/sh", "-c", "exit 0"}, std::chrono::seconds(5)).ok());
  auto s = runCommand({"/bin/sh", "-c", "echo warming up; echo 'GPU 0 is busy' >&2; exit 3"},
                      std::chrono::seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(s.message()), "exited with status 3: GPU 0 is busy");
  const auto start = Clock::now();
  s = runCommand({"/bin/sh", "-c", "sleep 30 & sleep 30"}, std::chrono::milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(std::string(s.message()), "timed out after 300ms (killed)");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // the whole group was killed
  s = runCommand({"/nonexistent/tool"}, std::chrono::seconds(5));
  EXPECT_EQ(std::string(s.message()), "cannot run /nonexistent/tool: No such file or directory");
  EXPECT_TRUE(runCommand({"true"}, std::chrono::seconds(5)).ok());  // found in PATH
  EXPECT_EQ(std::string(runCommand({"no-such-tool-here"}, std::chrono::seconds(5)).message()),
            "cannot run no-such-tool-here: not found in PATH");
}

TEST(Action, BuiltinsResetThroughSysfsAndCheckTheNode) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("sys/bus/pci/devices/0000:18:00.0"));
  std::filesystem::create_directories(dir.file("dev"));
  std::ofstream(dir.file("sys/bus/pci/devices/0000:18:00.0/reset")) << "";
  std::ofstream(dir.file("dev/nvidia0")) << "";
  ActionRoots roots{dir.path(), dir.file("dev")};
  auto reset = Action::parse(nlohmann::json::parse(R"({"builtin": "pci-reset"})"), "a");
  auto check = Action::parse(nlohmann::json::parse(R"({"builtin": "check-node"})"), "a");
  DeviceFacts gpu{"gpu", 0, 0, "", kGpu0, "0000:18:00.0", "", "nvidia0"};
  EXPECT_TRUE(reset->run(gpu, {}, roots, Clock::time_point::max()).ok());
  EXPECT_EQ(readFile(dir.file("sys/bus/pci/devices/0000:18:00.0/reset")), "1");
  EXPECT_TRUE(check->run(gpu, {}, roots, Clock::time_point::max()).ok());
  DeviceFacts other{"gpu", 1, 1, "", "", "0000:19:00.0", "", "nvidia1"};
  EXPECT_THAT(std::string(reset->run(other, {}, roots, Clock::time_point::max()).message()),
              HasSubstr("cannot write " + dir.path() + "/sys/bus/pci/devices/0000:19:00.0/reset"));
  EXPECT_EQ(std::string(check->run(other, {}, roots, Clock::time_point::max()).message()),
            "no device node " + dir.file("dev") + "/nvidia1");
}

// Facts that did not come through the allocation parser (a record edited
// or corrupted on disk) never make a path outside sysfs or the device root.
TEST(Action, BuiltinsRefuseAPciAddressOrNodeThatIsNotOne) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("sys/bus/pci/devices"));
  std::filesystem::create_directories(dir.file("escaped"));
  ActionRoots roots{dir.path(), dir.file("dev")};
  auto reset = Action::parse(nlohmann::json::parse(R"({"builtin": "pci-reset"})"), "a");
  auto check = Action::parse(nlohmann::json::parse(R"({"builtin": "check-node"})"), "a");
  DeviceFacts bad{"gpu", 0, 0, "", kGpu0, "../../../escaped", "", "../sys/bus"};
  absl::Status s = reset->run(bad, {}, roots, Clock::time_point::max());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(std::filesystem::exists(dir.file("escaped/reset")));
  s = check->run(bad, {}, roots, Clock::time_point::max());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(DeviceFacts, ReadBackFactsAreCheckedAsTheAllocationWas) {
  const DeviceFacts good{
      "rdma", 0, 1, "0000:1c:00.3", "", "0000:1c:00.3", "mlx5_6", "infiniband/uverbs6"};
  ASSERT_TRUE(DeviceFacts::fromJson(good.toJson()).ok());
  auto with = [&](const char* field, const std::string& value) {
    nlohmann::json j = good.toJson();
    j[field] = value;
    return DeviceFacts::fromJson(j).status();
  };
  EXPECT_EQ(std::string(with("pci", "../../etc").message()),
            "device.pci: not a PCI address: \"../../etc\"");
  EXPECT_EQ(std::string(with("node", "infiniband/../../etc/shadow").message()),
            "device.node: not a device node name: \"infiniband/../../etc/shadow\"");
  EXPECT_FALSE(with("node", "/dev/nvidia0").ok());
  EXPECT_FALSE(with("name", "mlx5\n6").ok());
  EXPECT_FALSE(with("id", std::string(300, 'a')).ok());
  EXPECT_FALSE(with("type", "disk").ok());
}

}  // namespace
}  // namespace crihook::testing
