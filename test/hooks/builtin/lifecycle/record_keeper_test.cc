// record_keeper.h: the device-lifecycle hook's records as it keeps them:
// stamped, written before the hook goes on, read back at start, and the
// cleanups they owe counted.

#include "hooks/builtin/lifecycle/record_keeper.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "base/logging.h"
#include "hooks/process_env.h"
#include "metrics/metric_registry.h"
#include "test/support/child_process.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

DeviceRecord record(const std::string& name, DevicePhase phase) {
  DeviceRecord r;
  r.key = {"uid-" + name, 0};
  r.pod = {"ml", name, "uid-" + name};
  r.phase = phase;
  r.devices = {DeviceFacts{"gpu", 0, 0, "", "GPU-0", "", "", "nvidia0"}};
  return r;
}

class RecordKeeperTest : public ::testing::Test {
 protected:
  RecordKeeper keeper(const std::string& dir) {
    return RecordKeeper(dir, processEnv(), metrics_, logger("hook.devices"));
  }
  std::string phaseOnDisk(const DeviceRecord& r) const {
    return nlohmann::json::parse(readFile(dir_.file("devices/uid-" + r.pod.name + "_0.json")))
        .at("phase")
        .get<std::string>();
  }

  TempDir dir_;
  metrics::Registry registry_;
  metrics::Gauge& pending_ =
      registry_.gauge("crihook_device_cleanups_pending", "p", {"hook"}).with({"devices"});
  LifecycleMetrics metrics_{&registry_, "devices"};
};

TEST_F(RecordKeeperTest, EachChangeIsStampedWrittenAndCountedWhileACleanupIsOwed) {
  RecordKeeper records = keeper(dir_.file("devices"));
  std::vector<std::string> errors;
  auto loaded = records.open("devices", errors);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(*loaded, IsEmpty());
  EXPECT_TRUE(std::filesystem::is_directory(dir_.file("devices")));

  DeviceRecord r = record("train-0", DevicePhase::kInitialising);
  const int64_t before = nowMs();
  ASSERT_TRUE(records.create(r).ok());
  EXPECT_GE(r.changed_ms, before);
  EXPECT_LE(r.changed_ms, nowMs());
  EXPECT_EQ(phaseOnDisk(r), "initialising");
  r.phase = DevicePhase::kCleanupPending;
  records.save(r);
  EXPECT_EQ(phaseOnDisk(r), "cleanup-pending");
  EXPECT_EQ(pending_.value(), 1);
  r.phase = DevicePhase::kCleaned;
  records.save(r);
  EXPECT_EQ(phaseOnDisk(r), "cleaned");
  EXPECT_EQ(pending_.value(), 0);
  r.phase = DevicePhase::kCleanupPending;
  records.save(r);
  records.remove(r);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("devices/uid-train-0_0.json")));
  EXPECT_EQ(pending_.value(), 0);
}

TEST_F(RecordKeeperTest, OpeningReadsWhatWasLeftAndCountsTheCleanupsItOwes) {
  {
    DeviceRecordDir left(dir_.file("devices"));
    ASSERT_TRUE(left.open().ok());
    ASSERT_TRUE(left.save(record("owed-0", DevicePhase::kCleanupPending)).ok());
    ASSERT_TRUE(left.save(record("ready-0", DevicePhase::kReady)).ok());
    std::ofstream(dir_.file("devices/uid-broken_0.json")) << "{not json";
  }
  RecordKeeper records = keeper(dir_.file("devices"));
  std::vector<std::string> errors;
  auto loaded = records.open("devices", errors);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), 2u);
  EXPECT_EQ(pending_.value(), 1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("uid-broken_0.json"));
  EXPECT_THAT(errors[0], HasSubstr("moved aside"));
}

TEST_F(RecordKeeperTest, ARecordOfANewerFormatStopsTheOpeningNamingTheFile) {
  {
    DeviceRecordDir left(dir_.file("devices"));
    ASSERT_TRUE(left.open().ok());
    nlohmann::json newer = record("future-0", DevicePhase::kReady).toJson();
    newer["version"] = 2;
    std::ofstream(dir_.file("devices/uid-future-0_0.json")) << newer.dump();
  }
  RecordKeeper records = keeper(dir_.file("devices"));
  std::vector<std::string> errors;
  auto loaded = records.open("devices", errors);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("hook devices: device record " + dir_.file("devices/uid-future-0_0.json") +
                        ": format version 2"));
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("move the file out of " + dir_.file("devices")));
  // A directory that cannot be made stops it too.
  std::ofstream(dir_.file("file")) << "";
  RecordKeeper under_a_file = keeper(dir_.file("file/devices"));
  auto refused = under_a_file.open("devices", errors);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("hook devices: "));
}

TEST_F(RecordKeeperTest, AFirstWriteThatFailsIsReturnedALaterOneIsLoggedAndGoesOn) {
  RecordKeeper records = keeper(dir_.file("devices"));
  std::vector<std::string> errors;
  ASSERT_TRUE(records.open("devices", errors).ok());
  std::filesystem::remove_all(dir_.file("devices"));
  std::ofstream(dir_.file("devices")) << "";  // no record can be written
  DeviceRecord r = record("train-0", DevicePhase::kInitialising);
  absl::Status s = records.create(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("cannot write " + dir_.file("devices/uid-train-0_0.json")));
  r.phase = DevicePhase::kCleanupPending;
  records.save(r);
  EXPECT_EQ(pending_.value(), 1);  // owed all the same
}

TEST_F(RecordKeeperTest, WithoutADirectoryRecordsLiveInMemoryOnly) {
  RecordKeeper records = keeper("");
  std::vector<std::string> errors;
  auto loaded = records.open("devices", errors);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(*loaded, IsEmpty());
  DeviceRecord r = record("train-0", DevicePhase::kInitialising);
  EXPECT_TRUE(records.create(r).ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
}

}  // namespace
}  // namespace crihook::testing
