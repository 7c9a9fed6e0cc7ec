// PosixEnv: the real files, directories, watch and commands behind the Env
// seam (base/env.h), and the faults test/support/fault_env.h injects through
// it.

#include "base/env.h"
#include "base/inotify_events.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "test/support/child_process.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fault_env.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;
using namespace std::chrono_literals;

std::vector<std::string> namesIn(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PosixEnv, WriteAtomicReplacesTheFileWholeWithMode0600) {
  TempDir dir;
  PosixEnv env(nullptr);
  const std::string file = dir.file("record.json");
  ASSERT_TRUE(env.writeFileAtomic(file, "old", Sync::kDurable).ok());
  ASSERT_TRUE(env.writeFileAtomic(file, "new record", Sync::kNone).ok());
  EXPECT_EQ(readFile(file), "new record");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_THAT(namesIn(dir.path()), ElementsAre("record.json"));
}

// A temporary file that is a symlink (planted by whoever can write the
// directory) is not followed: the write fails, the link's target is intact.
TEST(PosixEnv, WriteAtomicDoesNotFollowALinkAtItsTemporaryFile) {
  TempDir dir;
  PosixEnv env(nullptr);
  std::ofstream(dir.file("target")) << "precious";
  ASSERT_EQ(::symlink(dir.file("target").c_str(), dir.file(".record.json.tmp").c_str()), 0);
  auto s = env.writeFileAtomic(dir.file("record.json"), "x", Sync::kNone);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(s.message()),
            "cannot write " + dir.file("record.json") + ": Too many levels of symbolic links");
  EXPECT_EQ(readFile(dir.file("target")), "precious");
}

// A folder crihookd writes records into is its own: replaced by a link to a
// folder elsewhere, nothing is written, removed or made through it, and
// each refusal names the link. The path above it may hold links (an
// operator's state_dir on another disk).
TEST(PosixEnv, AFolderOfItsOwnReplacedByALinkIsNeitherWrittenNorRemovedThrough) {
  TempDir dir, elsewhere;
  PosixEnv env(nullptr);
  std::ofstream(elsewhere.file("victim.json")) << "precious";
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), dir.file("pods").c_str()), 0);
  auto s = env.writeFileAtomic(dir.file("pods/sb1.json"), "x", Sync::kDurable);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(s.message()),
            "cannot write " + dir.file("pods/sb1.json") + ": its folder " + dir.file("pods") +
                " is a symbolic link; crihookd writes only into a folder of its own");
  s = env.removeFile(dir.file("pods/victim.json"), Sync::kDurable);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("is a symbolic link"));
  s = env.makeDirectories(dir.file("pods"), 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("cannot create " + dir.file("pods") +
                                                             ": it is a symbolic link"));
  ASSERT_EQ(::symlink(elsewhere.file("gone").c_str(), dir.file("devices").c_str()), 0);
  EXPECT_THAT(std::string(env.makeDirectories(dir.file("devices"), 0700).message()),
              ::testing::HasSubstr("it is a symbolic link"))
      << "a dangling one too";
  EXPECT_THAT(namesIn(elsewhere.path()), ElementsAre("victim.json"));
  EXPECT_EQ(readFile(elsewhere.file("victim.json")), "precious");

  // A link above the folder is the operator's: followed.
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), dir.file("state").c_str()), 0);
  ASSERT_TRUE(env.makeDirectories(dir.file("state/devices"), 0700).ok());
  ASSERT_TRUE(env.writeFileAtomic(dir.file("state/devices/a.json"), "a", Sync::kDurable).ok());
  EXPECT_EQ(readFile(elsewhere.file("devices/a.json")), "a");
  EXPECT_TRUE(env.removeFile(dir.file("state/devices/a.json"), Sync::kDurable).ok());
  EXPECT_FALSE(std::filesystem::exists(elsewhere.file("devices/a.json")));
}

// write(2) may write less than asked: the rest is written after, one byte
// at a time if need be, and the file is whole.
TEST(FaultEnv, ShortWritesStillWriteTheWholeFile) {
  TempDir dir;
  FaultEnv env(nullptr);
  env.shortWrites(1);
  ASSERT_TRUE(env.writeFileAtomic(dir.file("record.json"), "a record", Sync::kDurable).ok());
  EXPECT_EQ(readFile(dir.file("record.json")), "a record");
}

// The disk fills part-way: the old file is whole, the partial temporary
// file is gone, and the error names the file and ENOSPC.
TEST(FaultEnv, AFullDiskLeavesTheOldFileWholeAndNoTemporaryFile) {
  TempDir dir;
  FaultEnv env(nullptr);
  const std::string file = dir.file("record.json");
  ASSERT_TRUE(env.writeFileAtomic(file, "the old record", Sync::kDurable).ok());
  env.fillDisk(4);
  auto s = env.writeFileAtomic(file, "a new, longer record", Sync::kDurable);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(s.message()), "cannot write " + file + ": No space left on device");
  EXPECT_EQ(readFile(file), "the old record");
  EXPECT_THAT(namesIn(dir.path()), ElementsAre("record.json"));
  env.freeDisk();
  EXPECT_TRUE(env.writeFileAtomic(file, "a new, longer record", Sync::kDurable).ok());
  EXPECT_EQ(readFile(file), "a new, longer record");
}

TEST(PosixEnv, ListingIsSortedAndSaysWhatEachEntryIs) {
  TempDir dir;
  PosixEnv env(nullptr);
  std::ofstream(dir.file("b.json")) << "{}";
  std::filesystem::create_directory(dir.file("a"));
  ASSERT_EQ(::symlink("nowhere", dir.file("c.json").c_str()), 0);
  auto list = env.listDirectory(dir.path());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "a");
  EXPECT_TRUE((*list)[0].directory);
  EXPECT_EQ((*list)[1].name, "b.json");
  EXPECT_TRUE((*list)[1].regular);
  EXPECT_GT((*list)[1].mtime_ns, 0);
  EXPECT_EQ((*list)[2].name, "c.json");
  EXPECT_TRUE((*list)[2].symlink);
  EXPECT_EQ((*list)[2].mtime_ns, -1);  // dangling
  EXPECT_EQ(env.listDirectory(dir.file("missing")).status().code(), absl::StatusCode::kNotFound);
}

// An entry's mtime is its nanoseconds since the epoch, to the nanosecond (a
// CDI spec is read again when it changes).
TEST(PosixEnv, AnEntrysMtimeIsItsNanosecondsSinceTheEpoch) {
  TempDir dir;
  PosixEnv env(nullptr);
  std::ofstream(dir.file("spec.json")) << "{}";
  const timespec when[2] = {{1, 5}, {1, 5}};  // atime, mtime: 1 s and 5 ns
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("spec.json").c_str(), when, 0), 0);
  auto list = env.listDirectory(dir.path());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].mtime_ns, 1000000005);
}

TEST(PosixEnv, ABoundedListingHoldsTheFirstEntriesByNameAndCountsTheRest) {
  TempDir dir;
  for (const char* n : {"e", "b", "d", "a", "c"}) std::ofstream(dir.file(n)) << n;
  PosixEnv env(nullptr);
  auto list = env.listDirectoryFirst(dir.path(), 3);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->total, 5u);
  ASSERT_EQ(list->entries.size(), 3u);
  EXPECT_EQ(list->entries[0].name, "a");
  EXPECT_EQ(list->entries[1].name, "b");
  EXPECT_EQ(list->entries[2].name, "c");
  EXPECT_TRUE(list->entries[2].regular);
  auto none = env.listDirectoryFirst(dir.path(), 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->total, 5u);
  EXPECT_TRUE(none->entries.empty());
}

TEST(PosixEnv, RemovingAMissingFileIsFineAndDirectoriesAreMadeWithTheirMode) {
  TempDir dir;
  PosixEnv env(nullptr);
  EXPECT_TRUE(env.removeFile(dir.file("missing"), Sync::kDurable).ok());
  ASSERT_TRUE(env.makeDirectories(dir.file("a/b"), 0700).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("a/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::ofstream(dir.file("file")) << "";
  EXPECT_EQ(std::string(env.makeDirectories(dir.file("file/x"), 0700).message()),
            "cannot create " + dir.file("file/x") + ": Not a directory");
}

TEST(PosixEnv, WriteExistingNeitherCreatesNorTruncatesAnythingElse) {
  TempDir dir;
  PosixEnv env(nullptr);
  auto s = env.writeExisting(dir.file("reset"), "1");
  EXPECT_EQ(std::string(s.message()),
            "cannot write " + dir.file("reset") + ": No such file or directory");
  EXPECT_FALSE(env.exists(dir.file("reset")));
  std::ofstream(dir.file("reset")) << "";
  EXPECT_TRUE(env.writeExisting(dir.file("reset"), "1").ok());
  EXPECT_EQ(readFile(dir.file("reset")), "1");
}

// A watch reports the directory's appearance, a file written in it and its
// removal, and nothing while nothing changes (a missing directory included).
TEST(PosixEnv, AWatchSeesTheDirectoryAppearChangeAndGo) {
  TempDir dir;
  PosixEnv env(nullptr);
  auto watch = env.watchDirectory(dir.file("hookserver.d"), 20ms);
  EXPECT_FALSE(watch->wait(100ms));  // missing: looked for, quietly
  std::filesystem::create_directory(dir.file("hookserver.d"));
  EXPECT_TRUE(watch->wait(5s));     // appeared: watched from now on
  EXPECT_FALSE(watch->wait(50ms));  // nothing changed
  std::ofstream(dir.file("hookserver.d/koordlet.json")) << "{}";
  EXPECT_TRUE(watch->wait(5s));
  while (watch->wait(50ms)) {
  }
  std::filesystem::remove_all(dir.file("hookserver.d"));
  EXPECT_TRUE(watch->wait(5s));
  while (watch->wait(50ms)) {
  }
  std::filesystem::create_directory(dir.file("hookserver.d"));
  EXPECT_TRUE(watch->wait(5s));  // back: watched again
}

// The events of one read: those it returned are read, the bytes after them
// (a buffer's stale events from an earlier read) never are, and an event
// whose name is cut short is left out.
TEST(InotifyEvents, OnlyTheBytesReadAreEvents) {
  auto event = [](uint32_t mask, std::string_view name) {
    inotify_event ev{};
    ev.mask = mask;
    ev.len = static_cast<uint32_t>(name.size());
    std::string bytes(reinterpret_cast<const char*>(&ev), sizeof(ev));
    return bytes.append(name);
  };
  const std::string created = event(IN_CREATE, std::string("a.json\0\0", 8));
  const std::string gone = event(IN_DELETE_SELF, "");
  EXPECT_FALSE(inotifyWatchGone(""));
  EXPECT_FALSE(inotifyWatchGone(created));
  EXPECT_TRUE(inotifyWatchGone(created + gone));  // the last event read, whole
  EXPECT_TRUE(inotifyWatchGone(event(IN_IGNORED, "") + created));
  EXPECT_TRUE(inotifyWatchGone(event(IN_MOVE_SELF, "")));
  const std::string buffer = created + gone;  // read: `created`; `gone` is stale
  EXPECT_FALSE(inotifyWatchGone(std::string_view(buffer).substr(0, created.size())));
  EXPECT_FALSE(inotifyWatchGone(std::string_view(buffer).substr(0, buffer.size() - 1)));
  std::string cut = event(IN_DELETE_SELF, "long-name");
  EXPECT_FALSE(inotifyWatchGone(std::string_view(cut).substr(0, cut.size() - 1)));
}

// stop() from another thread ends a long wait on a watched directory and on
// a missing one at once, and every wait after it.
TEST(PosixEnv, AStoppedWatchEndsItsWaitAtOnce) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("watched"));
  PosixEnv env(nullptr);
  for (const char* name : {"watched", "missing"}) {
    auto watch = env.watchDirectory(dir.file(name), 10min);
    while (watch->wait(50ms)) {
    }
    std::thread stopper([&] {
      std::this_thread::sleep_for(50ms);
      watch->stop();
    });
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(watch->wait(10min)) << name;
    stopper.join();
    EXPECT_FALSE(watch->wait(10min)) << name;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5min) << name;
  }
}

TEST(PosixEnv, ExecWithoutAnExecutorSaysSo) {
  PosixEnv env(nullptr);
  auto r = env.exec({{"/bin/true"}, 1s});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FaultEnv, AHungCommandEndsAtItsTimeoutOrWhenReleased) {
  FaultEnv env(nullptr);
  env.hangCommands();
  const auto start = std::chrono::steady_clock::now();
  auto r = env.exec({{"/usr/bin/nvidia-smi"}, 100ms});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->end, ExecResult::End::kTimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_THAT(env.execTimeouts(), ElementsAre(100ms));
}

TEST(JumpingClock, AJumpMovesNowAndEndsAWaitWithinASlice) {
  JumpingClock clock;
  std::mutex mu;
  std::condition_variable cv;
  const auto deadline = clock.now() + std::chrono::hours(1);
  std::unique_lock lock(mu);
  clock.jump(std::chrono::hours(2));
  EXPECT_GE(clock.now(), deadline);
  const auto start = std::chrono::steady_clock::now();
  clock.waitUntil(cv, lock, deadline);  // already passed: returns at once
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

// What crihook's classes hold (base/mutex.h's CondVar and MutexLock) waits
// by the clock as the std types do, and returns with the lock held.
TEST(JumpingClock, WaitsOnTheAnnotatedLockTypesByItsOwnTime) {
  JumpingClock jumping;
  for (const MonotonicClock* clock : {static_cast<const MonotonicClock*>(&jumping),
                                      static_cast<const MonotonicClock*>(&steadyClock())}) {
    Mutex mu;
    CondVar cv;
    const auto deadline = clock->now() + std::chrono::hours(1);
    MutexLock lock(mu);
    jumping.jump(std::chrono::hours(2));
    if (clock == &jumping) {
      const auto start = std::chrono::steady_clock::now();
      cv.waitUntilBy(lock, *clock, deadline);  // already passed by this clock: at once
      EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
    } else {
      cv.waitUntilBy(lock, *clock, clock->now());  // a deadline now: returns
    }
    bool other_got_it = true;
    std::thread([&] {
      other_got_it = mu.try_lock();
      if (other_got_it) mu.unlock();
    }).join();
    EXPECT_FALSE(other_got_it) << "the wait returned without the lock";
  }
}

}  // namespace
}  // namespace crihook::testing
