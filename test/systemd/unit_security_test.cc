// The generated crihookd.service, as systemd judges it: `systemd-analyze
// security --offline=true` (works without systemd as PID 1) scores the
// sandbox, and the settings left off on purpose stay off (docs/security.md
// "Confinement" says why each).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "test/support/child_process.h"

namespace {

using crihook::testing::readFile;
using crihook::testing::runShell;

using ::testing::HasSubstr;
using ::testing::Not;

// Measured 4.2 with the unit as committed (9.6 before the sandbox): a
// setting dropped by mistake pushes it over.
constexpr double kMaxExposure = 4.5;

std::string unitText() { return readFile(CRIHOOKD_UNIT); }

TEST(UnitSecurityTest, ExposureStaysBelowTheMeasuredScore) {
  if (runShell("command -v systemd-analyze").code != 0)
    GTEST_SKIP() << "systemd-analyze is not installed (Debian: systemd)";
  auto [out, rc] =
      runShell("systemd-analyze security --offline=true --no-pager " CRIHOOKD_UNIT " 2>&1");
  if (out.find("unrecognized option") != std::string::npos)
    GTEST_SKIP() << "this systemd-analyze has no --offline (systemd < 250)";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("Overall exposure level for [^:]+: ([0-9.]+)")))
      << out;
  EXPECT_LE(std::stod(m[1]), kMaxExposure) << out;
  // The hardening docs/security.md promises, each seen by systemd as set.
  for (const char* set :
       {"NoNewPrivileges=", "SystemCallArchitectures=", "RestrictNamespaces=~user",
        "LockPersonality=", "RestrictRealtime=", "ProtectHostname=", "ProtectSystem=",
        "ProtectHome=", "ProtectKernelModules="}) {
    EXPECT_THAT(out, HasSubstr(std::string("\n✓ ") + set)) << "not seen as set: " << set;
  }
}

TEST(UnitSecurityTest, SettingsThatWouldBreakTheDeviceActionsStayOff) {
  const std::string unit = unitText();
  ASSERT_FALSE(unit.empty()) << CRIHOOKD_UNIT;
  // The HAMi-core check looks at /tmp/vgpulock in crihookd's mount namespace.
  EXPECT_THAT(unit, Not(HasSubstr("\nPrivateTmp=yes")));
  // pci-reset writes sysfs; actions open device nodes.
  EXPECT_THAT(unit, Not(HasSubstr("\nProtectKernelTunables=yes")));
  EXPECT_THAT(unit, Not(HasSubstr("\nPrivateDevices=yes")));
  EXPECT_THAT(unit, Not(HasSubstr("\nProtectClock=yes")));  // implies a device allow-list
  EXPECT_THAT(unit, Not(HasSubstr("\nDeviceAllow=")));
  // crihookd drops its own bounding set: it needs CAP_SETPCAP to start.
  EXPECT_THAT(unit, HasSubstr("CAP_SETPCAP"));
  EXPECT_THAT(unit, HasSubstr("\nReadWritePaths=-/var/lib/crihook -/run/crihook\n"));
}

}  // namespace
