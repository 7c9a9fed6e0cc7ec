#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/version.h"
#include "test/support/fake_cri_server.h"
#include "test/tools/crihookctl/run_ctl.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

TEST(Crihookctl, UsageErrorsExitTwoWithUsage) {
  EXPECT_EQ(ctl({}).code, 2);
  Result r = ctl({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command frobnicate"));
  EXPECT_THAT(r.err, HasSubstr("usage: crihookctl"));
  EXPECT_EQ(ctl({"--help"}).code, 0);
}

// --version is crihookctl's own and asks no runtime (the version command
// does): an endpoint nothing listens on is never dialled.
TEST(Crihookctl, VersionFlagPrintsItsOwnVersionLine) {
  Result r = ctl({"-r", "unix:///nonexistent/cri.sock", "--version"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, versionLine("crihookctl", version(), commit()) + "\n");
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(ctl({"--help"}).out, HasSubstr("--version"));
}

// The usage text is made from the command table: every command on a line of
// its own, its help text at one column, a long call on lines of its own.
TEST(Crihookctl, TheUsageTextListsEveryCommandFromTheTable) {
  const std::string text = ctl({"help"}).out;
  EXPECT_EQ(text, ctl({"--help"}).out);
  for (const char* line : {
           "\n  version                           runtime name and versions (crihookctl's\n"
           "                                    own: --version)\n",
           "\n  ps [-a] [-q] [-p POD-ID]          list containers (running only unless -a)\n",
           "\n  create POD-ID CONTAINER.json POD-CONFIG.json\n"
           "                                    create a container, print its id\n",
           "\n  inspecti IMAGE                    image status as JSON\n",
           "\n  topology [--root DIR] [--output tree|json|device-crd|matrix|dot]\n"
           "           [--format yaml|json] [--node NAME] [--pcie-id root-complex|switch]\n"
           "                                    the node's NUMA, PCIe, GPU and RDMA layout read\n",
           "\n  devices [--state-dir DIR] [--root DIR]\n"
           "                                    the device-lifecycle hook's records: each\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  for (const char* name : {"info", "pods", "images", "runp", "start", "stop", "rm", "stopp", "rmp",
                           "exec", "inspect", "inspectp", "update", "explain", "status"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\n  ") + name + " ")) << name;
  }
}

// Each command's usage errors end the same way, printed in one place: the
// reason, the usage text, exit 2; none of them dials the runtime.
TEST(Crihookctl, ACommandLineThatCannotRunExitsTwoWithTheReasonAndUsage) {
  const std::string nowhere = "unix:///nonexistent/cri.sock";
  struct Case {
    std::vector<std::string> args;
    const char* why;
  } cases[] = {
      {{"-r", nowhere, "runp"}, "crihookctl: expected a pod config file\n\nusage: "},
      {{"-r", nowhere, "start"}, "crihookctl: expected at least one ID\n\nusage: "},
      {{"-r", nowhere, "inspecti"}, "crihookctl: expected an image\n\nusage: "},
      {{"-r", nowhere, "ps", "-z"}, "crihookctl: unknown flag -z\n\nusage: "},
      {{"-r", nowhere, "stop", "--timeout", "soon", "c1"},
       "crihookctl: --timeout: expected a whole number, got \"soon\"\n\nusage: "},
      {{"-t", "abc", "version"}, "crihookctl: -t: expected a whole number, got \"abc\""},
      {{"-o", "yaml", "ps"}, "crihookctl: output must be table or json, got yaml\n\nusage: "},
      {{"-r"}, "crihookctl: flag -r needs a value\n\nusage: "},
      {{"--frob"}, "crihookctl: unknown flag --frob\n\nusage: "},
      {{"status", "extra"}, "crihookctl: status takes no arguments\n\nusage: "},
  };
  for (const Case& c : cases) {
    Result r = ctl(c.args);
    EXPECT_EQ(r.code, 2) << c.args.back();
    EXPECT_THAT(r.err, ::testing::StartsWith(c.why)) << c.args.back();
    EXPECT_EQ(r.out, "") << c.args.back();
  }
}

// A runtime that cannot be reached is the call's error, exit 1, no usage.
TEST(Crihookctl, AnUnreachableRuntimeExitsOneNamingTheCall) {
  TempDir dir;
  Result r = ctl({"-r", "unix://" + dir.file("absent.sock"), "-t", "2s", "pods"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, ::testing::StartsWith("crihookctl: ListPodSandbox: Unavailable: "));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("usage:")));
}

}  // namespace
}  // namespace crihook::testing
