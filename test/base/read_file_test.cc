// readRegularFile: what other software writes is read as a regular file of
// bounded size, or refused without blocking and without being read.

#include "base/read_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>

#include "test/support/fake_cri_server.h"

namespace crihook {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string message(const absl::Status& s) { return std::string(s.message()); }

// Runs the read on its own thread: a read that blocks on `fifo` fails the
// test after 5 s (the FIFO then gets a writer and EOF, so the thread ends)
// instead of hanging it.
absl::StatusOr<std::string> readWithin5s(const std::string& path, size_t max,
                                         FileLinks links = FileLinks::kFollow,
                                         const std::string& fifo = "") {
  auto f = std::async(std::launch::async, [&] { return readRegularFile(path, max, links); });
  if (f.wait_for(5s) != std::future_status::ready) {
    ADD_FAILURE() << path << ": still reading after 5 s";
    if (!fifo.empty()) ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));
  }
  return f.get();
}

TEST(ReadRegularFile, ReadsARegularFileAndALinkToOne) {
  testing::TempDir dir;
  std::ofstream(dir.file("a")) << "hello\n";
  ASSERT_EQ(::symlink(dir.file("a").c_str(), dir.file("link").c_str()), 0);
  EXPECT_EQ(*readRegularFile(dir.file("a"), 6), "hello\n");
  EXPECT_EQ(*readRegularFile(dir.file("link"), 64), "hello\n");
  // An empty file, and a file of exactly the cap.
  std::ofstream(dir.file("empty"));
  EXPECT_EQ(*readRegularFile(dir.file("empty"), 0), "");
}

// A daemon started with its standard input closed gets descriptor 0 for the
// first file it opens: that is a file like any other.
TEST(ReadRegularFile, ReadsAFileOpenedAsDescriptorZero) {
  testing::TempDir dir;
  std::ofstream(dir.file("a")) << "hello\n";
  const int saved = ::dup(0);
  ASSERT_GE(saved, 0);
  ::close(0);
  absl::StatusOr<std::string> text = readRegularFile(dir.file("a"), 64);
  const bool restored = ::dup2(saved, 0) == 0;
  ::close(saved);
  ASSERT_TRUE(restored);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello\n");
}

TEST(ReadRegularFile, MissingIsNotFound) {
  testing::TempDir dir;
  auto r = readRegularFile(dir.file("none"), 64);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(readRegularFile(dir.file("none/x"), 64).status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadRegularFile, AFifoIsRefusedWithoutBlocking) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  auto r = readWithin5s(dir.file("fifo"), 64, FileLinks::kFollow, dir.file("fifo"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(message(r.status()), "a FIFO, not a regular file");
}

// A link to /dev/zero once read until memory ran out.
TEST(ReadRegularFile, ALinkToADeviceIsRefusedUnread) {
  testing::TempDir dir;
  ASSERT_EQ(::symlink("/dev/zero", dir.file("zero").c_str()), 0);
  auto r = readWithin5s(dir.file("zero"), 64);
  EXPECT_EQ(message(r.status()), "a character device, not a regular file");
  EXPECT_EQ(message(readRegularFile(dir.path(), 64).status()), "a directory, not a regular file");
}

TEST(ReadRegularFile, AFileOverTheCapIsRefusedWithoutBeingRead) {
  testing::TempDir dir;
  std::ofstream(dir.file("seven")) << "1234567";
  EXPECT_EQ(message(readRegularFile(dir.file("seven"), 6).status()),
            "7 bytes, more than the 6 allowed");
  // 300 MB, sparse: refused from its size, in far less time than reading it.
  std::ofstream(dir.file("huge")) << "x";
  ASSERT_EQ(::truncate(dir.file("huge").c_str(), 300 << 20), 0);
  const auto start = std::chrono::steady_clock::now();
  auto r = readRegularFile(dir.file("huge"), 64 << 10);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_EQ(message(r.status()), "314572800 bytes, more than the 65536 allowed");
}

TEST(ReadRegularFile, AFileWhoseSizeSaysNothingIsStillCapped) {
  // /proc files report size 0 and hold more.
  auto r = readRegularFile("/proc/self/status", 16);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(message(r.status()), HasSubstr("more than the 16 bytes allowed"));
  EXPECT_TRUE(readRegularFile("/proc/self/status", 64 << 10).ok());
}

TEST(ReadRegularFile, ALinkIsRefusedWhereTheFileMustNotBeOne) {
  testing::TempDir dir;
  std::ofstream(dir.file("a")) << "x";
  ASSERT_EQ(::symlink(dir.file("a").c_str(), dir.file("link").c_str()), 0);
  EXPECT_EQ(message(readRegularFile(dir.file("link"), 64, FileLinks::kRefuse).status()),
            "a symlink, not a regular file");
  EXPECT_EQ(*readRegularFile(dir.file("a"), 64, FileLinks::kRefuse), "x");
}

}  // namespace
}  // namespace crihook
