// config/unix_listener.h: the CRI and metrics sockets appear listening, with
// their mode and group, or not at all.
#include "base/unix_listener.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "test/support/fake_cri_server.h"

namespace crihook {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> namesIn(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  return out;
}

TEST(UnixListener, ThePathAppearsListeningWithItsModeAndGroup) {
  testing::TempDir dir;
  const std::string path = dir.file("crihook.sock");
  // gid 1 (Debian's `daemon`): any group but the test's own proves the chown.
  auto fd = listenUnixSocket(path, {.mode = 0640, .group = "daemon"});
  ASSERT_TRUE(fd.ok()) << fd.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_gid, 1u);
  EXPECT_TRUE(unixSocketIsLive(path)) << "listening before the path appeared";
  EXPECT_THAT(namesIn(dir.path()), ::testing::ElementsAre("crihook.sock"))
      << "no temporary name left behind";
  ::close(*fd);
  EXPECT_FALSE(unixSocketIsLive(path));
}

// No group: the socket keeps the group crihookd made it with, never root's.
// Made under group 1 (Debian's `daemon`) where the test runs as root, so that
// a chown to group 0 shows.
TEST(UnixListener, WithoutAGroupTheSocketKeepsTheProcesssOwn) {
  testing::TempDir dir;
  const std::string path = dir.file("crihook.sock");
  const gid_t before = ::getegid();
  const bool switched = before == 0 && ::setegid(1) == 0;
  const gid_t made_as = ::getegid();
  auto fd = listenUnixSocket(path, {.mode = 0660});
  if (switched) {
    ASSERT_EQ(::setegid(before), 0);
  }
  if (made_as == 0) {
    GTEST_SKIP() << "runs as group 0 and cannot change it: nothing to tell apart";
  }
  ASSERT_TRUE(fd.ok()) << fd.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, made_as);
  ::close(*fd);
}

TEST(UnixListener, AFailedStepLeavesNothingAndNamesThePath) {
  testing::TempDir dir;
  const std::string path = dir.file("crihook.sock");
  auto no_group = listenUnixSocket(path, {.group = "no-such-group-crihook"});
  EXPECT_EQ(no_group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_group.status().message(), "socket group no-such-group-crihook: no such group");
  const std::string long_path = dir.file(std::string(120, 'x'));
  auto too_long = listenUnixSocket(long_path, {.what = "metrics listen"});
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(), HasSubstr("metrics listen " + long_path + ": "));
  auto no_dir = listenUnixSocket(dir.file("missing/crihook.sock"), {});
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_dir.status().message(), HasSubstr(": bind: No such file or directory"));
  EXPECT_TRUE(namesIn(dir.path()).empty());
}

TEST(UnixListener, AStaleSocketFileIsReplaced) {
  testing::TempDir dir;
  const std::string path = dir.file("crihook.sock");
  auto first = listenUnixSocket(path, {});
  ASSERT_TRUE(first.ok());
  ::close(*first);  // the file stays, nothing serves it
  auto second = listenUnixSocket(path, {});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(unixSocketIsLive(path));
  ::close(*second);
}

}  // namespace
}  // namespace crihook
