// HostPaths (hooks/builtin/devices/host_paths.h): a directory's entries and
// single paths answered from memory, kept current by its own thread as
// nodes come and go, and never read on the caller's thread.

#include "hooks/builtin/devices/host_paths.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "base/logging.h"
#include "base/mutex.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using namespace std::chrono_literals;

void touch(const std::string& path) { std::ofstream(path) << ""; }

// The real filesystem, and which threads asked it what.
class CountingEnv final : public PosixEnv {
 public:
  CountingEnv() : PosixEnv(nullptr) {}
  absl::StatusOr<DirListing> listDirectoryFirst(const std::string& path,
                                                size_t max_entries) override {
    seen();
    return PosixEnv::listDirectoryFirst(path, max_entries);
  }
  bool exists(const std::string& path) override {
    seen();
    return PosixEnv::exists(path);
  }
  std::unique_ptr<DirectoryWatch> watchDirectory(const std::string& dir,
                                                 std::chrono::milliseconds poll) override {
    seen();
    return PosixEnv::watchDirectory(dir, poll);
  }
  // Calls made on the calling thread.
  size_t mine() const {
    MutexLock lock(mu_);
    return by_thread_.count(std::this_thread::get_id());
  }

 private:
  void seen() {
    MutexLock lock(mu_);
    by_thread_.insert(std::this_thread::get_id());
  }
  mutable Mutex mu_;
  std::multiset<std::thread::id> by_thread_ ABSL_GUARDED_BY(mu_);
};

class HostPathsTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_.file("dev")); }
  std::unique_ptr<HostPaths> make(HostPaths::Spec spec, std::chrono::milliseconds poll = 10ms) {
    return std::make_unique<HostPaths>(std::move(spec), logger("hook.gpu"), env_, poll);
  }

  TempDir dir_;
  CountingEnv env_;
};

TEST_F(HostPathsTest, AnswersFromWhatWasThereWhenMade) {
  for (const char* n : {"nvidia0", "nvidiactl", "null"}) touch(dir_.file("dev/") + n);
  touch(dir_.file("libvgpu.so"));
  auto paths = make({dir_.file("dev"), "nvidia", {dir_.file("libvgpu.so"), dir_.file("none")}});
  EXPECT_TRUE(paths->hasEntry("nvidia0"));
  EXPECT_TRUE(paths->hasEntry("nvidiactl"));
  EXPECT_FALSE(paths->hasEntry("nvidia1"));
  EXPECT_FALSE(paths->hasEntry("null"));  // not named by the prefix: not kept
  EXPECT_TRUE(paths->exists(dir_.file("libvgpu.so")));
  EXPECT_FALSE(paths->exists(dir_.file("none")));
  EXPECT_FALSE(paths->exists(dir_.file("dev/nvidia0")));  // not one of the single paths
}

TEST_F(HostPathsTest, NodesCreatedAndRemovedLaterAreSeen) {
  touch(dir_.file("dev/nvidia0"));
  // The default poll: a change in a directory that exists is reported by
  // inotify, not found by looking again.
  auto paths = make({dir_.file("dev"), "nvidia", {}}, HostPaths::kPoll);
  touch(dir_.file("dev/nvidia1"));
  EXPECT_TRUE(eventually([&] { return paths->hasEntry("nvidia1"); }));
  std::filesystem::remove(dir_.file("dev/nvidia0"));
  EXPECT_TRUE(eventually([&] { return !paths->hasEntry("nvidia0"); }));
  EXPECT_TRUE(paths->hasEntry("nvidia1"));
}

// /dev/infiniband appears when the RDMA driver loads, maybe after crihookd started.
TEST_F(HostPathsTest, ADirectoryThatAppearsLaterIsRead) {
  auto paths = make({dir_.file("dev/infiniband"), "", {}});
  EXPECT_FALSE(paths->hasEntry("rdma_cm"));
  std::filesystem::create_directories(dir_.file("dev/infiniband"));
  touch(dir_.file("dev/infiniband/rdma_cm"));
  EXPECT_TRUE(eventually([&] { return paths->hasEntry("rdma_cm"); }));
  std::filesystem::remove_all(dir_.file("dev/infiniband"));
  EXPECT_TRUE(eventually([&] { return !paths->hasEntry("rdma_cm"); }));
}

// A folder that cannot be read is said once; read again, it says nothing
// more (and a failure after that is said again).
TEST_F(HostPathsTest, AnUnreadableFolderIsSaidOnceAndItsRecoveryIsQuiet) {
  std::ostringstream text;
  auto log = std::make_shared<spdlog::logger>(
      "hook.gpu", std::make_shared<spdlog::sinks::ostream_sink_mt>(text));
  touch(dir_.file("dev/x"));  // a file where the folder should be
  auto paths =
      std::make_unique<HostPaths>(HostPaths::Spec{dir_.file("dev/x"), "", {}}, log, env_, 10ms);
  std::filesystem::remove(dir_.file("dev/x"));
  std::filesystem::create_directories(dir_.file("dev/x"));
  touch(dir_.file("dev/x/node"));
  ASSERT_TRUE(eventually([&] { return paths->hasEntry("node"); }));
  touch(dir_.file("dev/x/later"));
  ASSERT_TRUE(eventually([&] { return paths->hasEntry("later"); })) << "read again since";
  paths.reset();  // its thread gone: the text is the test's
  const std::string said = text.str();
  size_t lines = 0;
  for (size_t at = said.find("none found there"); at != std::string::npos;
       at = said.find("none found there", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << said;
  EXPECT_NE(said.find("device nodes " + dir_.file("dev/x") + ": cannot read"), std::string::npos)
      << said;
}

TEST_F(HostPathsTest, ASinglePathIsCheckedAgainEveryPoll) {
  const std::string lib = dir_.file("vgpu/libvgpu.so");
  auto paths = make({dir_.file("dev"), "nvidia", {lib}});
  EXPECT_FALSE(paths->exists(lib));
  std::filesystem::create_directories(dir_.file("vgpu"));
  touch(lib);
  EXPECT_TRUE(eventually([&] { return paths->exists(lib); }));
  std::filesystem::remove(lib);
  EXPECT_TRUE(eventually([&] { return !paths->exists(lib); }));
}

// What an inline hook relies on: a lookup is memory only. Every read of the
// filesystem after the constructor is the thread's.
TEST_F(HostPathsTest, LookupsNeverReadTheFilesystem) {
  touch(dir_.file("dev/nvidia0"));
  auto paths = make({dir_.file("dev"), "nvidia", {dir_.file("libvgpu.so")}});
  const size_t made = env_.mine();
  EXPECT_GT(made, 0u);  // the constructor read what was there
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(paths->hasEntry("nvidia0"));
    EXPECT_FALSE(paths->hasEntry("nvidia1"));
    EXPECT_FALSE(paths->exists(dir_.file("libvgpu.so")));
  }
  // Something to read: the thread reads it, the caller never does.
  touch(dir_.file("dev/nvidia1"));
  touch(dir_.file("libvgpu.so"));
  EXPECT_TRUE(eventually([&] { return paths->hasEntry("nvidia1"); }));
  EXPECT_TRUE(eventually([&] { return paths->exists(dir_.file("libvgpu.so")); }));
  EXPECT_EQ(env_.mine(), made);
}

TEST_F(HostPathsTest, KeepsAtMostMaxEntriesOfADirectory) {
  char name[32];
  for (size_t i = 0; i < HostPaths::kMaxEntries + 3; ++i) {
    std::snprintf(name, sizeof(name), "nvidia%05zu", i);
    touch(dir_.file("dev/") + name);
  }
  auto paths = make({dir_.file("dev"), "nvidia", {}});
  EXPECT_TRUE(paths->hasEntry("nvidia00000"));
  std::snprintf(name, sizeof(name), "nvidia%05zu", HostPaths::kMaxEntries - 1);
  EXPECT_TRUE(paths->hasEntry(name));
  std::snprintf(name, sizeof(name), "nvidia%05zu", HostPaths::kMaxEntries);
  EXPECT_FALSE(paths->hasEntry(name));  // sorted by name: the first kMaxEntries kept
}

}  // namespace
}  // namespace crihook::testing
