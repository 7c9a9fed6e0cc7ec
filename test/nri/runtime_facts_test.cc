// nri/runtime_facts.h: which runtime versions remove a sandbox an NRI plugin
// refused at RunPodSandbox, read from the version strings runtimes send.

#include "nri/runtime_facts.h"

#include <gtest/gtest.h>

namespace crihook::nri {
namespace {

TEST(RuntimeFacts, VersionsAreReadAsContainerdSendsThem) {
  EXPECT_EQ(parseRuntimeVersion("1.7.24~ds1"), (RuntimeVersion{1, 7, 24}));
  EXPECT_EQ(parseRuntimeVersion("2.1.9+unknown"), (RuntimeVersion{2, 1, 9}));
  EXPECT_EQ(parseRuntimeVersion("v2.2.6"), (RuntimeVersion{2, 2, 6}));
  EXPECT_EQ(parseRuntimeVersion("2.3.0-rc.1"), (RuntimeVersion{2, 3, 0}));
  // A part of up to six digits is a version part; seven are not.
  EXPECT_EQ(parseRuntimeVersion("2.0.123456"), (RuntimeVersion{2, 0, 123456}));
  for (const char* bad : {"", "v", "2", "2.1", "2.x.1", "a.b.c", ".1.2", "1234567.0.0"})
    EXPECT_EQ(parseRuntimeVersion(bad), std::nullopt) << bad;
}

TEST(RuntimeFacts, TheContainerdVersionsThatLeakARefusedSandboxAreKnown) {
  struct Case {
    const char* version;
    RefusedSandbox expected;
  };
  for (const Case& c : {
           Case{"1.6.20", RefusedSandbox::kRemoved},
           Case{"1.7.24~ds1", RefusedSandbox::kRemoved},
           Case{"2.0.0", RefusedSandbox::kLeaked},
           Case{"2.0.11", RefusedSandbox::kLeaked},
           Case{"2.1.9+unknown", RefusedSandbox::kLeaked},
           Case{"2.2.0", RefusedSandbox::kLeaked},
           Case{"2.2.5", RefusedSandbox::kLeaked},
           Case{"2.2.6", RefusedSandbox::kRemoved},
           Case{"v2.2.7", RefusedSandbox::kRemoved},
           Case{"2.3.2", RefusedSandbox::kLeaked},
           Case{"2.3.3", RefusedSandbox::kRemoved},
           Case{"2.4.0", RefusedSandbox::kRemoved},
           Case{"3.0.0", RefusedSandbox::kRemoved},
           Case{"2.1", RefusedSandbox::kUnknown},
       }) {
    EXPECT_EQ(refusedSandboxOf("containerd", c.version), c.expected) << c.version;
  }
  EXPECT_EQ(refusedSandboxOf("cri-o", "1.30.0"), RefusedSandbox::kUnknown);
}

}  // namespace
}  // namespace crihook::nri
