// records.h: the device-lifecycle hook's record files, read back bounded
// and checked (what the hook does with them: lifecycle_hook_test.cc).

#include "hooks/builtin/lifecycle/records.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;

// Device records are the hook's own files: a FIFO among them would hang the
// start, a huge or deep one cost memory or the stack. Each is reported naming
// the file and moved aside; the good ones load.
TEST(DeviceRecords, AFifoALinkAHugeOrADeepRecordIsReportedAndMovedAside) {
  TempDir dir;
  DeviceRecordDir records(dir.path());
  ASSERT_TRUE(records.open().ok());
  DeviceRecord good;
  good.key = {"uid-good", 0};
  good.pod = {"ml", "good-0", "uid-good"};
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

}  // namespace
}  // namespace crihook::testing
