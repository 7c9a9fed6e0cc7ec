// Capability sets by name and the drop (confine/capabilities.h), in a forked
// child (a drop cannot be undone).

#include "confine/capabilities.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <thread>

namespace crihook::confine {
namespace {

constexpr CapSet bit(int c) { return CapSet{1} << c; }

TEST(CapabilitiesTest, NamesEitherWayAndUnknownOnesNamed) {
  auto s = parseCapabilities({"CAP_CHOWN", "net_admin", "Sys_Admin"}, "security.capabilities");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, bit(0) | bit(12) | bit(21));
  EXPECT_EQ(capabilityNames(*s), "CAP_CHOWN,CAP_NET_ADMIN,CAP_SYS_ADMIN");
  EXPECT_EQ(capabilityNames(0), "none");
  // Bits this build has no name for (a newer kernel's), up to the last.
  EXPECT_EQ(capabilityNames(bit(0) | bit(50) | bit(63)), "CAP_CHOWN,cap_50,cap_63");
  EXPECT_EQ(parseCapabilities({"chown", "cap_fly"}, "security.capabilities").status().message(),
            "security.capabilities[1]: unknown capability \"cap_fly\"");
  EXPECT_EQ(*parseCapabilities({}, "x"), 0u);
  EXPECT_GE(lastCapability(), 40);
}

TEST(CapabilitiesTest, DropKeepsOnlyTheGivenOnesInEverySet) {
  auto self = readCapStatus();
  ASSERT_TRUE(self.ok()) << self.status();
  if (!(self->effective & bit(8))) GTEST_SKIP() << "needs CAP_SETPCAP";
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    absl::Status s = keepOnlyCapabilities(bit(0) | bit(12));
    CapStatus after;
    if (s.ok()) after = *readCapStatus();
    (void)!::write(report[1], &after, sizeof(after));
    ::_exit(s.ok() ? 0 : 1);
  }
  ::close(report[1]);
  CapStatus after;
  ASSERT_EQ(::read(report[0], &after, sizeof(after)), static_cast<ssize_t>(sizeof(after)));
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(after.effective, (bit(0) | bit(12)) & self->effective);
  EXPECT_EQ(after.permitted, (bit(0) | bit(12)) & self->permitted);
  EXPECT_EQ(after.bounding, (bit(0) | bit(12)) & self->bounding);
}

TEST(CapabilitiesTest, RefusedWhileOtherThreadsWouldKeepTheirs) {
  std::promise<void> stop;
  std::thread other([done = stop.get_future()] { done.wait(); });
  absl::Status s = keepOnlyCapabilities(0);
  stop.set_value();
  other.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "capabilities: the process has 2 threads; they are dropped per thread, so only while "
            "it has one");
  EXPECT_NE(readCapStatus()->effective, 0u) << "nothing was dropped";
}

}  // namespace
}  // namespace crihook::confine
