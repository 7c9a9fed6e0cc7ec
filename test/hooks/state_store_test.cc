// StateStore: records survive a restart; what cannot be read is skipped, not fatal.

// GCC 12 warns of an overlapping memcpy inside std::string's operator+ here
// (a known false positive, GCC PR 105329).
#pragma GCC diagnostic ignored "-Wrestrict"

#include "hooks/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fault_env.h"

namespace crihook::testing {
namespace {

namespace hv1 = ::crihook::hook::v1;

hv1::PodRecord podNamed(const std::string& sandbox, const std::string& name) {
  hv1::PodRecord p;
  p.set_sandbox_id(sandbox);
  p.mutable_config()->mutable_metadata()->set_name(name);
  p.mutable_config()->mutable_metadata()->set_namespace_("ml");
  return p;
}

hv1::ContainerRecord container(const std::string& id, const std::string& sandbox) {
  hv1::ContainerRecord c;
  c.set_id(id);
  c.set_sandbox_id(sandbox);
  c.mutable_requested()->mutable_metadata()->set_name("trainer");
  c.mutable_resources()->set_cpuset_cpus("8-15");
  return c;
}

TEST(StateStoreTest, RecordsAreReadBackAndRemovedWithTheirPod) {
  TempDir dir;
  {
    StateStore s(dir.path(), nullptr);
    ASSERT_TRUE(s.load().ok());
    s.putPod(podNamed("sb1", "train-0"));
    s.putContainer(container("c1", "sb1"));
    s.putContainer(container("c2", "sb1"));
    s.removeContainer("c2");
  }
  StateStore s(dir.path(), nullptr);
  ASSERT_TRUE(s.load().ok());
  ASSERT_NE(s.pod("sb1"), nullptr);
  EXPECT_EQ(s.pod("sb1")->config().metadata().name(), "train-0");
  ASSERT_NE(s.container("c1"), nullptr);
  EXPECT_EQ(s.container("c1")->resources().cpuset_cpus(), "8-15");
  EXPECT_EQ(s.container("c2"), nullptr);
  s.removePod("sb1");
  EXPECT_EQ(s.container("c1"), nullptr);
  s.flush();
  EXPECT_FALSE(std::filesystem::exists(dir.file("pods/sb1.json")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("pods")));  // no temporary left behind
}

// NRI's Synchronize: what the runtime no longer has is forgotten, in memory
// and on disk; what it has is kept as it was.
TEST(StateStoreTest, RetainOnlyForgetsWhatTheRuntimeNoLongerHas) {
  TempDir dir;
  StateStore s(dir.path(), nullptr);
  ASSERT_TRUE(s.load().ok());
  for (const char* id : {"sb1", "sb2"}) {
    s.putPod(podNamed(id, "train-0"));
  }
  s.putContainer(container("c1", "sb1"));
  s.putContainer(container("c2", "sb1"));
  s.putContainer(container("c3", "sb2"));
  s.flush();
  ASSERT_TRUE(std::filesystem::exists(dir.file("pods/sb2.json")));

  auto gone = s.retainOnly({"sb1", "sb-new"}, {"c1", "c-new"});
  EXPECT_THAT(gone.pods, ::testing::ElementsAre("sb2"));
  EXPECT_THAT(gone.containers, ::testing::ElementsAre("c2"));
  EXPECT_EQ(s.pod("sb2"), nullptr);
  EXPECT_EQ(s.container("c3"), nullptr);
  EXPECT_EQ(s.container("c2"), nullptr);
  ASSERT_NE(s.container("c1"), nullptr);
  EXPECT_EQ(s.container("c1")->resources().cpuset_cpus(), "8-15");
  EXPECT_NE(s.pod("sb1"), nullptr);
  EXPECT_EQ(s.pod("sb-new"), nullptr);  // listed, never seen: nothing is made up
  s.flush();
  EXPECT_FALSE(std::filesystem::exists(dir.file("pods/sb2.json")));

  StateStore again(dir.path(), nullptr);
  ASSERT_TRUE(again.load().ok());
  EXPECT_EQ(again.container("c2"), nullptr);
  EXPECT_NE(again.container("c1"), nullptr);
  EXPECT_EQ(again.podCount(), 1u);
}

TEST(StateStoreTest, UnreadableRecordsAreSkippedAndOddIdsStayInMemory) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("pods"));
  std::ofstream(dir.file("pods/broken.json")) << "{\"pod\": ";
  {
    StateStore good(dir.path(), nullptr);
    ASSERT_TRUE(good.load().ok());
    good.putContainer(container("c1", "sb1"));
  }
  StateStore s(dir.path(), nullptr);
  ASSERT_TRUE(s.load().ok());
  EXPECT_NE(s.container("c1"), nullptr);
  EXPECT_EQ(s.podCount(), 1u);

  s.putContainer(container("c9", "../escape"));
  EXPECT_NE(s.container("c9"), nullptr);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find("escape"), std::string::npos) << entry.path();
  }
}

// A sandbox id becomes a file name only when it is letters, digits, '-',
// '_' and '.' (not first): one with a '/' or any other character stays in
// memory, and nothing is written outside the state folder.
TEST(StateStoreTest, OnlyIdsOfSafeCharactersBecomeFileNames) {
  TempDir dir;
  {
    StateStore s(dir.file("state"), nullptr);
    ASSERT_TRUE(s.load().ok());
    s.putContainer(container("c1", "sb_1-a.b"));
    s.putContainer(container("c2", "up/../../escape"));
    s.putContainer(container("c3", "sp ace"));
    s.putContainer(container("c4", "new\nline"));
    for (const char* c : {"c1", "c2", "c3", "c4"}) EXPECT_NE(s.container(c), nullptr) << c;
  }  // its records written
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (entry.is_regular_file()) files.push_back(entry.path().lexically_relative(dir.path()));
  }
  EXPECT_THAT(files, ::testing::ElementsAre("state/pods/sb_1-a.b.json"));
}

// A logger whose lines the test reads.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> logger = std::make_shared<spdlog::logger>(
      "state", std::make_shared<spdlog::sinks::ostream_sink_st>(text));
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StateStoreTest, FilesCarryTheirVersionAndOnesWithoutAreReadAsVersionOne) {
  TempDir dir;
  {
    StateStore s(dir.path(), nullptr);
    ASSERT_TRUE(s.load().ok());
    s.putContainer(container("c1", "sb1"));
  }
  nlohmann::json written = nlohmann::json::parse(slurp(dir.file("pods/sb1.json")));
  EXPECT_EQ(written.at("version"), 1);

  // What crihookd wrote before versions existed.
  written.erase("version");
  std::ofstream(dir.file("pods/sb1.json"), std::ios::trunc) << written.dump();
  StateStore s(dir.path(), nullptr);
  ASSERT_TRUE(s.load().ok());
  ASSERT_NE(s.container("c1"), nullptr);
  EXPECT_EQ(s.container("c1")->resources().cpuset_cpus(), "8-15");
  s.putContainer(container("c2", "sb1"));
  s.flush();
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.file("pods/sb1.json"))).at("version"), 1);
}

// A pod record is of the sandbox its file is named after: one copied under
// another sandbox's name, or of version 0, is skipped and named, not taken.
TEST(StateStoreTest, ARecordUnderAnotherSandboxsNameOrOfVersionZeroIsSkipped) {
  TempDir dir;
  {
    StateStore s(dir.path(), nullptr);
    ASSERT_TRUE(s.load().ok());
    s.putPod(podNamed("sb1", "train-0"));
    s.putContainer(container("c1", "sb1"));
    s.putContainer(container("c2", "sb2"));
  }
  const std::string sb1 = slurp(dir.file("pods/sb1.json"));
  std::ofstream(dir.file("pods/sb3.json")) << sb1;
  nlohmann::json sb2 = nlohmann::json::parse(slurp(dir.file("pods/sb2.json")));
  sb2["version"] = 0;
  std::ofstream(dir.file("pods/sb2.json"), std::ios::trunc) << sb2.dump();
  CapturedLog log;
  StateStore s(dir.path(), log.logger);
  ASSERT_TRUE(s.load().ok());
  EXPECT_EQ(s.podCount(), 1u);
  EXPECT_EQ(s.pod("sb3"), nullptr);
  ASSERT_NE(s.pod("sb1"), nullptr);
  ASSERT_NE(s.container("c1"), nullptr);
  EXPECT_EQ(s.container("c1")->sandbox_id(), "sb1");
  EXPECT_EQ(s.container("c2"), nullptr);
  EXPECT_THAT(log.text.str(),
              ::testing::HasSubstr(dir.file("pods/sb3.json") +
                                   ": names another sandbox than its file name does; skipped"));
  EXPECT_THAT(log.text.str(), ::testing::HasSubstr("version: expected a positive integer, got 0"));
}

// state/pods replaced by a link to a folder elsewhere: crihookd does not
// start on it, and once running writes nothing through it (the record is
// kept in memory and written again, as on a full disk).
TEST(StateStoreTest, APodsFolderReplacedByALinkIsRefusedAndNothingIsWrittenThroughIt) {
  TempDir dir, elsewhere;
  CapturedLog log;
  StateStore s(dir.path(), log.logger);
  ASSERT_TRUE(s.load().ok());
  std::filesystem::remove(dir.file("pods"));
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), dir.file("pods").c_str()), 0);
  s.putContainer(container("c1", "sb1"));
  s.flush();
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path()));
  EXPECT_THAT(log.text.str(),
              ::testing::HasSubstr("its folder " + dir.file("pods") + " is a symbolic link"));
  EXPECT_NE(s.container("c1"), nullptr) << "kept in memory";

  StateStore again(dir.path(), nullptr);
  const absl::Status st = again.load();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("cannot create " + dir.file("pods") +
                                                              ": it is a symbolic link"));
}

TEST(StateStoreTest, ANewerVersionIsSkippedNamedAndNeverOverwrittenNorRemoved) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("pods"));
  // A newer crihookd's record, whose fields this build may not even parse.
  const std::string newer =
      R"({"version": 2, "pod": {"sandbox_id": ["changed", "type"]}, "containers": []})";
  std::ofstream(dir.file("pods/sb2.json")) << newer;
  {
    StateStore good(dir.path(), nullptr);
    ASSERT_TRUE(good.load().ok());
    good.putContainer(container("c1", "sb1"));
  }
  CapturedLog log;
  StateStore s(dir.path(), log.logger);
  ASSERT_TRUE(s.load().ok());
  EXPECT_NE(s.container("c1"), nullptr);  // the others are read
  EXPECT_EQ(s.pod("sb2"), nullptr);
  EXPECT_THAT(log.text.str(),
              ::testing::HasSubstr("pod record " + dir.file("pods/sb2.json") +
                                   ": format version 2; this crihookd reads versions 1 to 1"));
  EXPECT_THAT(log.text.str(), ::testing::HasSubstr("left as it is"));

  // Calls about that pod change memory only.
  s.putPod(podNamed("sb2", "train-1"));
  s.putContainer(container("c3", "sb2"));
  s.flush();
  EXPECT_NE(s.container("c3"), nullptr);
  EXPECT_EQ(slurp(dir.file("pods/sb2.json")), newer);
  s.removePod("sb2");
  s.flush();
  EXPECT_EQ(slurp(dir.file("pods/sb2.json")), newer);

  // A version that is no version at all is a broken file, not a newer one.
  std::ofstream(dir.file("pods/sb3.json")) << R"({"version": "two"})";
  CapturedLog log3;
  StateStore s3(dir.path(), log3.logger);
  ASSERT_TRUE(s3.load().ok());
  EXPECT_THAT(log3.text.str(), ::testing::HasSubstr("version: expected a positive integer"));
}

// Records are crihookd's own files: a FIFO among them hung the start, a huge
// one was read whole. Each is skipped with a warning naming it; the rest load.
TEST(StateStoreTest, AFifoALinkAHugeOrADeepRecordIsSkippedNamed) {
  TempDir dir;
  {
    StateStore good(dir.path(), nullptr);
    ASSERT_TRUE(good.load().ok());
    good.putContainer(container("c1", "sb1"));
  }
  ASSERT_EQ(::mkfifo(dir.file("pods/fifo.json").c_str(), 0600), 0);
  std::ofstream(dir.file("pods/huge.json")) << "{";
  ASSERT_EQ(::truncate(dir.file("pods/huge.json").c_str(), 17 << 20), 0);  // sparse
  std::ofstream(dir.file("pods/deep.json"))
      << R"({"pod": )" << std::string(60000, '[') << std::string(60000, ']') << "}";
  std::filesystem::copy_file(dir.file("pods/sb1.json"), dir.file("elsewhere.json"));
  ASSERT_EQ(::symlink(dir.file("elsewhere.json").c_str(), dir.file("pods/link.json").c_str()), 0);

  std::ostringstream log;
  auto logger = std::make_shared<spdlog::logger>(
      "state", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  StateStore s(dir.path(), logger);
  ASSERT_TRUE(s.load().ok());
  EXPECT_NE(s.container("c1"), nullptr);
  EXPECT_EQ(s.podCount(), 1u);
  const std::string text = log.str();
  EXPECT_THAT(text,
              ::testing::HasSubstr(dir.file("pods/fifo.json") + ": a FIFO, not a regular file"));
  EXPECT_THAT(text,
              ::testing::HasSubstr(dir.file("pods/huge.json") + ": 17825792 bytes, more than the "
                                                                "16777216 allowed"));
  EXPECT_THAT(text, ::testing::HasSubstr(dir.file("pods/deep.json") +
                                         ": not a pod record: nested deeper than 32"));
  EXPECT_THAT(text,
              ::testing::HasSubstr(dir.file("pods/link.json") + ": a symlink, not a regular file"));
}

TEST(StateStoreTest, ADirectoryThatCannotBeMadeIsAnError) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  StateStore s((std::filesystem::path(dir.file("file")) / "state").string(), nullptr);
  auto status = s.load();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("state directory: cannot create " + dir.file("file") +
                                   "/state/pods: Not a directory"));
}

// ---- faults (test/support/fault_env.h) ----

// A store whose files go through a FaultEnv and whose log the test reads.
class StateStoreFaultTest : public ::testing::Test {
 protected:
  TempDir dir;
  FaultEnv env{nullptr};
  std::ostringstream log;
  std::shared_ptr<spdlog::logger> logger = std::make_shared<spdlog::logger>(
      "state", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
};

// The disk fills while a pod's record is written: the error names the file,
// the memory copy is the new one, the file on disk is the old one whole (not
// truncated, no temporary left beside it), and once space returns the new
// record reaches the disk without the pod changing again. (Before the
// writer retried failed writes, the file kept the old record until the pod
// next changed, and a restart read the old one back: checked failing.)
TEST_F(StateStoreFaultTest, AFullDiskKeepsTheOldFileAndTheNewRecordIsWrittenWhenSpaceReturns) {
  StateStore s(dir.path(), logger, env);
  ASSERT_TRUE(s.load().ok());
  s.putPod(podNamed("sb1", "train-0"));
  s.flush();
  const std::string file = dir.file("pods/sb1.json");
  const std::string old_text = readFile(file);
  ASSERT_THAT(old_text, ::testing::HasSubstr("train-0"));

  env.fillDisk(64);  // part of the new record fits, then ENOSPC
  s.putPod(podNamed("sb1", "train-0-renamed-with-a-longer-name"));
  s.flush();
  EXPECT_THAT(log.str(), ::testing::HasSubstr("cannot write " + file +
                                              ": No space left on device; the record is kept in "
                                              "memory and written again in 5s"));
  EXPECT_EQ(s.pod("sb1")->config().metadata().name(), "train-0-renamed-with-a-longer-name");
  EXPECT_EQ(readFile(file), old_text);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("pods")))
    names.push_back(e.path().filename().string());
  EXPECT_THAT(names, ::testing::ElementsAre("sb1.json"));  // the temporary file is gone
  // Said (for /readyz and the metric) until it is written.
  EXPECT_EQ(s.unwritten(), 1u);
  EXPECT_THAT(s.writeError(),
              ::testing::HasSubstr("cannot write " + file + ": No space left on device"));

  // Space returns; the pod does not change. The retry comes kStateWriteRetry
  // after the failure (the test jumps the store's clock there).
  env.freeDisk();
  env.jumpingClock().jump(kStateWriteRetry);
  EXPECT_TRUE(eventually(
      [&] {
        return readFile(file).find("train-0-renamed-with-a-longer-name") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << readFile(file);
  EXPECT_TRUE(eventually([&] { return s.unwritten() == 0; }));
  EXPECT_EQ(s.writeError(), "");
  // A restart reads the new record.
  StateStore again(dir.path(), nullptr);
  ASSERT_TRUE(again.load().ok());
  EXPECT_EQ(again.pod("sb1")->config().metadata().name(), "train-0-renamed-with-a-longer-name");
}

// A pod removed while its filesystem is read-only (ext4 remounts itself so
// after an I/O error): the file stays for now, and goes once it can, without
// the store changing again, so a restart does not bring the pod back.
// (Before failed writes were retried: checked failing.)
TEST_F(StateStoreFaultTest, AFailedRemoveIsRetriedSoARestartDoesNotBringThePodBack) {
  StateStore s(dir.path(), logger, env);
  ASSERT_TRUE(s.load().ok());
  s.putPod(podNamed("sb1", "train-0"));
  s.flush();
  env.failRemoves(EROFS);
  s.removePod("sb1");
  s.flush();
  EXPECT_THAT(log.str(), ::testing::HasSubstr("cannot remove " + dir.file("pods/sb1.json") +
                                              ": Read-only file system"));
  EXPECT_EQ(::access(dir.file("pods/sb1.json").c_str(), F_OK), 0);
  env.failRemoves(0);
  env.jumpingClock().jump(kStateWriteRetry);
  EXPECT_TRUE(eventually([&] { return ::access(dir.file("pods/sb1.json").c_str(), F_OK) != 0; },
                         std::chrono::seconds(10)));
  StateStore again(dir.path(), nullptr);
  ASSERT_TRUE(again.load().ok());
  EXPECT_EQ(again.pod("sb1"), nullptr);
}

}  // namespace
}  // namespace crihook::testing
