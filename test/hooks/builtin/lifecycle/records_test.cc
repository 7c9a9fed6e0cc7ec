// records.h: the device-lifecycle hook's record files, read back bounded
// and checked (what the hook does with them: lifecycle_hook_test.cc).

#include "hooks/builtin/lifecycle/records.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "hooks/state_version.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The record of attempt 0 of pod ml/`name`, whose uid is `uid`.
DeviceRecord recordOf(const std::string& uid, const std::string& name) {
  DeviceRecord r;
  r.key = {uid, 0};
  r.pod = {"ml", name, uid};
  return r;
}

// Device records are the hook's own files: a FIFO among them would hang the
// start, a huge or deep one cost memory or the stack. Each is reported naming
// the file and moved aside; the good ones load.
TEST(DeviceRecords, AFifoALinkAHugeOrADeepRecordIsReportedAndMovedAside) {
  TempDir dir;
  DeviceRecordDir records(dir.path());
  ASSERT_TRUE(records.open().ok());
  const DeviceRecord good = recordOf("uid-good", "good-0");
  ASSERT_TRUE(records.save(good).ok());
  ASSERT_EQ(::mkfifo(dir.file("fifo_0.json").c_str(), 0600), 0);
  std::ofstream(dir.file("huge_0.json")) << "{";
  ASSERT_EQ(::truncate(dir.file("huge_0.json").c_str(), 17 << 20), 0);  // sparse
  std::ofstream(dir.file("deep_0.json")) << std::string(60000, '[') << std::string(60000, ']');
  ASSERT_EQ(::symlink(dir.file("uid-good_0.json").c_str(), dir.file("link_0.json").c_str()), 0);

  std::vector<std::string> errors;
  std::vector<DeviceRecord> loaded = records.loadAll(errors);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].key.uid, "uid-good");
  std::sort(errors.begin(), errors.end());
  const std::string at = "device record " + dir.path() + "/";
  EXPECT_THAT(errors,
              ElementsAre(at + "deep_0.json: nested deeper than 16; moved aside to " + dir.path() +
                              "/deep_0.json.bad",
                          at + "fifo_0.json: a FIFO, not a regular file; moved aside to " +
                              dir.path() + "/fifo_0.json.bad",
                          at +
                              "huge_0.json: 17825792 bytes, more than the 16777216 allowed; "
                              "moved aside to " +
                              dir.path() + "/huge_0.json.bad",
                          at + "link_0.json: a symlink, not a regular file; moved aside to " +
                              dir.path() + "/link_0.json.bad"));
}

// A record is the pod its file is named after: one copied or renamed under
// another pod's name, or of a version no crihookd writes (0), is not taken
// as that pod's record (its cleanup would run on the wrong pod, or on
// nothing): reported and moved aside. A newer version is left as it is.
TEST(DeviceRecords, ARecordUnderAnotherPodsNameOrOfVersionZeroIsMovedAside) {
  TempDir dir;
  DeviceRecordDir records(dir.path());
  ASSERT_TRUE(records.open().ok());
  const DeviceRecord a = recordOf("uid-a", "a-0");
  ASSERT_TRUE(records.save(a).ok());
  const std::string text = slurp(dir.file("uid-a_0.json"));
  std::ofstream(dir.file("uid-b_0.json")) << text;  // another pod's name
  std::ofstream(dir.file("uid-a_1.json")) << text;  // another attempt's
  nlohmann::json zero = nlohmann::json::parse(text);
  zero["pod"]["uid"] = "uid-z";
  zero["version"] = 0;
  std::ofstream(dir.file("uid-z_0.json")) << zero.dump();
  zero["version"] = ::crihook::kDeviceRecordVersion + 1;
  zero["pod"]["uid"] = "uid-n";
  std::ofstream(dir.file("uid-n_0.json")) << zero.dump();

  std::vector<std::string> errors, newer;
  std::vector<DeviceRecord> loaded = records.loadAll(errors, true, &newer);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].key.uid, "uid-a");
  EXPECT_EQ(loaded[0].key.attempt, 0u);
  std::sort(errors.begin(), errors.end());
  const std::string at = "device record " + dir.path() + "/";
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0], at + "uid-a_1.json: names another pod; moved aside to " + dir.path() +
                           "/uid-a_1.json.bad");
  EXPECT_EQ(errors[1], at + "uid-b_0.json: names another pod; moved aside to " + dir.path() +
                           "/uid-b_0.json.bad");
  EXPECT_EQ(errors[3], at +
                           "uid-z_0.json: version: expected a positive integer, got 0; moved "
                           "aside to " +
                           dir.path() + "/uid-z_0.json.bad");
  EXPECT_THAT(errors[2], ::testing::StartsWith(at + "uid-n_0.json: format version "));
  EXPECT_EQ(newer.size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(dir.file("uid-n_0.json"))) << "a newer one is left alone";
  EXPECT_FALSE(std::filesystem::exists(dir.file("uid-b_0.json")));
}

// state/devices replaced by a link: the hook does not start on it, and a
// record written later goes nowhere near the link's target (its save fails,
// naming the link).
TEST(DeviceRecords, ADevicesFolderReplacedByALinkIsRefused) {
  TempDir dir, elsewhere;
  DeviceRecordDir records(dir.file("devices"));
  ASSERT_TRUE(records.open().ok());
  std::filesystem::remove(dir.file("devices"));
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), dir.file("devices").c_str()), 0);
  const DeviceRecord r = recordOf("uid-a", "a-0");
  const absl::Status saved = records.save(r);
  EXPECT_EQ(saved.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(saved.message()), ::testing::HasSubstr("is a symbolic link"));
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path()));
  EXPECT_EQ(records.open().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace crihook::testing
