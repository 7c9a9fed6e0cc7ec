// The reference printed from the table (config/config_reference.h): the
// committed docs/configuration.md and crihook.toml(5)'s key reference are
// what the table prints, and debian/examples/crihook.toml states only keys
// of the table, with their types and defaults.

#include "config/config_reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "base/text.h"
#include "test/support/child_process.h"
#include "test/support/fake_cri_server.h"

namespace crihook {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::readFile;
using testing::runShell;
using testing::TempDir;

// `diff -u` of the committed file and what the table prints, for a failure's message.
std::string unifiedDiff(const GeneratedFile& f) {
  TempDir dir;
  std::ofstream(dir.file("generated")) << f.text;
  return runShell(cat("diff -u '", CRIHOOK_SOURCE_DIR, "/", f.path, "' '", dir.file("generated"),
                      "' 2>&1"))
      .out;
}

// A key added, removed or given another default in the table, the page or
// the man page alone fails here: rewrite them with `ninja -C build config-reference`.
// What a key's text may hold reaches the man page as roff reads it: a
// backslash as \e (not the start of an escape), hyphens and double quotes
// escaped, backticked code in bold.
TEST(ConfigReference, ManTextEscapesWhatRoffWouldRead) {
  EXPECT_EQ(manText(R"(a\b "c" `d-e` f)"), R"(a\eb \(dqc\(dq \fBd\-e\fR f)");
  EXPECT_EQ(manText(R"(\fB)"), R"(\efB)") << "not a font change";
}

TEST(ConfigReference, TheCommittedFilesAreWhatTheTablePrints) {
  const std::vector<std::string> problems = checkCommittedReference(CRIHOOK_SOURCE_DIR);
  std::string diffs;
  if (!problems.empty()) {
    auto files = generatedFiles(CRIHOOK_SOURCE_DIR);
    ASSERT_TRUE(files.ok()) << files.status();
    for (const GeneratedFile& f : *files) diffs += unifiedDiff(f);
  }
  EXPECT_THAT(problems, ElementsAre()) << diffs;
}

TEST(ConfigReference, TheExampleStatesOnlyDefaults) {
  EXPECT_THAT(checkExampleConfig("[server]\nworkers = 2\nidle_timeout = \"300s\"\n", "x.toml"),
              ElementsAre());
  EXPECT_THAT(checkExampleConfig("[server]\nworkers = 4\n", "x.toml"),
              ElementsAre("x.toml: server.workers: states 4, but the default is 2"));
  EXPECT_THAT(checkExampleConfig("[hooks.owners]\ncpuset = \"crihook\"\n", "x.toml"),
              ElementsAre("x.toml: hooks.owners.cpuset: states \"crihook\", but the default is "
                          "\"koordinator\""));
}

TEST(ConfigReference, TheExampleStatesOnlyKeysOfTheTableWithTheirTypes) {
  // The parser refuses a key of the file the table lacks; a built-in's
  // settings are checked here.
  EXPECT_THAT(checkExampleConfig("[server]\nfrob = 1\n", "x.toml"),
              ElementsAre(HasSubstr("config x.toml: server.frob: unknown key")));
  const std::string gpu = "[[hook]]\nname = \"gpu\"\nbuiltin = \"gpu\"\n[hook.settings]\n";
  EXPECT_THAT(checkExampleConfig(gpu + "visible_devices = \"uuid\"\n", "x.toml"), ElementsAre());
  EXPECT_THAT(checkExampleConfig(gpu + "frob = 1\n", "x.toml"),
              ElementsAre("x.toml: hook[0].settings.frob: no such key in the table "
                          "(config/config_keys.cc)"));
  EXPECT_THAT(checkExampleConfig(gpu + "visible_devices = 1\n", "x.toml"),
              ElementsAre("x.toml: hook[0].settings.visible_devices: expected a string as the "
                          "table says"));
  EXPECT_THAT(checkExampleConfig(gpu + "visible_devices = \"index\"\n", "x.toml"),
              ElementsAre("x.toml: hook[0].settings.visible_devices: states \"index\", but the "
                          "default is \"uuid\""));
  // A module's settings are its own.
  EXPECT_THAT(checkExampleConfig(
                  "[[hook]]\nname = \"m\"\nmodule = \"m.so\"\n[hook.settings]\nfrob = 1\n", "x"),
              ElementsAre());
}

TEST(ConfigReference, TheManPageKeepsItsTextAroundTheMarkers) {
  const std::string page = cat(".TH X 5\n", kManBegin, "\nold\n", kManEnd, "\n.SH EXAMPLES\n");
  auto spliced = spliceManReference(page, "new\n", "x.5");
  ASSERT_TRUE(spliced.ok()) << spliced.status();
  EXPECT_EQ(*spliced, cat(".TH X 5\n", kManBegin, "\nnew\n", kManEnd, "\n.SH EXAMPLES\n"));
  auto missing = spliceManReference(".TH X 5\n", "new\n", "x.5");
  EXPECT_THAT(missing.status().message(), HasSubstr("x.5: expected a line"));
}

TEST(ConfigReference, EachKeyIsARowOfItsSection) {
  const std::string md = configReferenceMarkdown();
  EXPECT_THAT(md, HasSubstr("## `[server]`"));
  EXPECT_THAT(md, HasSubstr("| `workers` | integer | `2` | 1 to 64 | event-loop threads |"));
  EXPECT_THAT(md, HasSubstr("| `level` | string | `\"info\"` | one of `\"trace\"`, `\"debug\"`"));
  EXPECT_THAT(md, HasSubstr("### `[hook.settings] of builtin = \"gpu\"`"));
  const std::string man = configReferenceMan();
  EXPECT_THAT(man, HasSubstr(".SH [server]\n"));
  EXPECT_THAT(man, HasSubstr(".TP\n.B workers\nInteger, 1 to 64; default \\fB2\\fR.\n"
                             "Event\\-loop threads.\n"));
  EXPECT_THAT(man, HasSubstr(".SS topology\\-check\n"));
}

}  // namespace
}  // namespace crihook
