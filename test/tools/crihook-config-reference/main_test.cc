// crihook-config-reference (tools/crihook-config-reference/main.cc): prints
// the reference, and `check` / `write` keep the committed copies to it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/text.h"
#include "test/support/child_process.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;

constexpr const char* kFiles[] = {"docs/configuration.md", "docs/man/crihook.toml.5.in",
                                  "debian/examples/crihook.toml"};

// A source tree holding only the files the tool reads and writes.
void copyTree(const TempDir& dir) {
  for (const char* f : kFiles) {
    runShellOrThrow(cat("mkdir -p \"$(dirname '", dir.file(f), "')\" && cp '", CRIHOOK_SOURCE_DIR,
                        "/", f, "' '", dir.file(f), "'"));
  }
}

TEST(ConfigReferenceTool, PrintsWhatIsCommitted) {
  const ShellResult md = runShell(cat(CONFIG_REFERENCE_BINARY, " markdown"));
  EXPECT_EQ(md.code, 0);
  EXPECT_EQ(md.out, readFile(CRIHOOK_SOURCE_DIR "/docs/configuration.md"));
  const ShellResult man = runShell(cat(CONFIG_REFERENCE_BINARY, " man"));
  EXPECT_EQ(man.code, 0);
  EXPECT_THAT(readFile(CRIHOOK_SOURCE_DIR "/docs/man/crihook.toml.5.in"), HasSubstr(man.out));
}

TEST(ConfigReferenceTool, CheckNamesADefaultChangedInTheDocOnlyAndWriteRestoresIt) {
  TempDir dir;
  copyTree(dir);
  const std::string check = cat(CONFIG_REFERENCE_BINARY, " check ", dir.path(), " 2>&1");
  ASSERT_EQ(runShell(check).code, 0) << runShell(check).out;
  runShellOrThrow(cat("sed -i 's/^| `workers` | integer | `2` |/| `workers` | integer | `3` |/' ",
                      dir.file("docs/configuration.md")));
  const ShellResult drifted = runShell(check);
  EXPECT_EQ(drifted.code, 1);
  EXPECT_THAT(drifted.out, HasSubstr("docs/configuration.md is not what config/config_keys.cc "
                                     "prints: line "));
  EXPECT_THAT(drifted.out, HasSubstr("| `workers` | integer | `3` |"));
  const ShellResult written =
      runShell(cat(CONFIG_REFERENCE_BINARY, " write ", dir.path(), " 2>&1"));
  EXPECT_EQ(written.code, 0) << written.out;
  EXPECT_EQ(runShell(check).code, 0);
}

TEST(ConfigReferenceTool, CheckNamesAnExampleValueThatIsNoDefault) {
  TempDir dir;
  copyTree(dir);
  runShellOrThrow(
      cat("sed -i 's/^workers = 2$/workers = 3/' ", dir.file("debian/examples/crihook.toml")));
  const ShellResult r = runShell(cat(CONFIG_REFERENCE_BINARY, " check ", dir.path(), " 2>&1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out,
            "debian/examples/crihook.toml: server.workers: states 3, but the default is 2\n");
}

TEST(ConfigReferenceTool, AnUnknownModeIsAUsageError) {
  const ShellResult r = runShell(cat(CONFIG_REFERENCE_BINARY, " frob 2>&1"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, HasSubstr("usage: crihook-config-reference"));
}

}  // namespace
}  // namespace crihook::testing
