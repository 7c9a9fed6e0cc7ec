#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "hooks/builtin/lifecycle/records.h"
#include "test/support/fake_cri_server.h"
#include "test/tools/crihookctl/run_ctl.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

TEST(CrihookctlDevices, ListsEachSandboxsDevicesAndWhatItOwes) {
  TempDir dir;
  DeviceRecordDir records(dir.path());
  DeviceRecord ready;
  ready.key = {"uid-a", 0};
  ready.pod = {"ml", "train-0", "uid-a"};
  ready.sandbox_id = "5f2c0ffee0123456789";
  ready.phase = DevicePhase::kReady;
  ready.devices = {{"gpu", 0, 0, "", "GPU-0", "0000:1a:00.0", "", "nvidia0"},
                   {"rdma", 0, 1, "0000:1c:00.3", "", "0000:1c:00.3", "mlx5_6", ""}};
  ready.touched = 2;
  DeviceRecord owed;
  owed.key = {"uid-b", 1};
  owed.pod = {"ml", "eval-0", "uid-b"};
  owed.phase = DevicePhase::kCleanupPending;
  owed.devices = {{"gpu", 0, 3, "", "GPU-3", "", "", "nvidia3"}};
  owed.touched = 1;
  owed.cleanup_failures = 4;
  owed.last_error = "cleanup of gpu 0: exited with status 3: busy";
  ASSERT_TRUE(records.save(ready).ok());
  ASSERT_TRUE(records.save(owed).ok());
  std::ofstream(dir.file("uid-c_0.json")) << "{";

  Result r = ctl({"devices", "--state-dir", dir.path()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("POD +ATTEMPT +SANDBOX +PHASE +DEVICES +FAILURES"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "ml/train-0 +0 +5f2c0ffee0123 +ready +gpu0,rdma1\\(mlx5_6\\) +0"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "ml/eval-0 +1 +cleanup-pending +gpu3 +4 +cleanup of gpu 0: exited"));
  EXPECT_THAT(r.out, HasSubstr("warning: device record " + dir.file("uid-c_0.json")));
  // A reader leaves a broken record where it is: only crihookd moves it aside.
  EXPECT_TRUE(std::ifstream(dir.file("uid-c_0.json")).good());

  Result json = ctl({"-o", "json", "devices", "--state-dir", dir.path()});
  auto parsed = nlohmann::json::parse(json.out.substr(0, json.out.find("warning:")));
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0]["phase"], "ready");
  EXPECT_EQ(parsed[1]["cleanup_failures"], 4);

  EXPECT_EQ(ctl({"devices", "--state-dir", dir.file("absent")}).code, 1);
}

}  // namespace
}  // namespace crihook::testing
