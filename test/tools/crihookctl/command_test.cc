#include "tools/crihookctl/command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace crihook::ctl {
namespace {

TEST(CrihookctlCommand, FlagsComeFirstAndEverythingAfterAPositionalIsPositional) {
  auto p = parseArgs({"-q", "--timeout", "5", "c1", "ls", "-l"},
                     {{"-q", false}, {"--timeout", true}, {"-l", false}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->get("-q"), "true");
  EXPECT_EQ(p->get("--timeout"), "5");
  EXPECT_FALSE(p->has("-l"));
  EXPECT_EQ(p->get("-l", "none"), "none");
  EXPECT_EQ(p->positional, (std::vector<std::string>{"c1", "ls", "-l"}));
  // "-" alone is a positional argument (a file name), not a flag.
  p = parseArgs({"-", "-q"}, {{"-q", false}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->positional, (std::vector<std::string>{"-", "-q"}));
}

TEST(CrihookctlCommand, AnUnknownFlagOrAMissingValueIsAUsageError) {
  auto p = parseArgs({"-x"}, {{"-q", false}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "unknown flag -x");
  EXPECT_TRUE(showsUsage(p.status()));
  EXPECT_EQ(exitCodeOf(p.status()), 2);
  p = parseArgs({"--timeout"}, {{"--timeout", true}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "flag --timeout needs a value");
  auto need = needArgs(ParsedArgs{}, 1, "a container ID");
  EXPECT_EQ(need.message(), "expected a container ID");
  EXPECT_TRUE(showsUsage(need));
}

// How an error ends crihookctl rides on it, whatever its code.
TEST(CrihookctlCommand, TheExitCodeIsTheErrorsKindNotItsCode) {
  EXPECT_EQ(exitCodeOf(absl::InvalidArgumentError("the runtime refused")), 1);
  EXPECT_FALSE(showsUsage(absl::InvalidArgumentError("the runtime refused")));
  EXPECT_EQ(exitCodeOf(absl::UnavailableError("not there")), 1);
  const absl::Status input = inputError(absl::NotFoundError("config x: cannot be read"));
  EXPECT_EQ(exitCodeOf(input), 2);
  EXPECT_FALSE(showsUsage(input));
  EXPECT_EQ(input.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(input.message(), "config x: cannot be read");
  EXPECT_EQ(exitCodeOf(usageError("no")), 2);
}

// As std::stoll reads it (what the flags took before): the leading number.
TEST(CrihookctlCommand, AnIntegerFlagTakesItsLeadingNumber) {
  EXPECT_EQ(*integerFlag("-t", "30"), 30);
  EXPECT_EQ(*integerFlag("-t", "-2"), -2);
  EXPECT_EQ(*integerFlag("-t", "15x"), 15);
  auto bad = integerFlag("--timeout", "soon");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--timeout: expected a whole number, got \"soon\"");
  EXPECT_TRUE(showsUsage(bad.status()));
  EXPECT_FALSE(integerFlag("-t", "99999999999999999999").ok());
}

TEST(CrihookctlCommand, ATableIsAlignedOnItsWidestCells) {
  std::ostringstream out;
  printTable(out, {{"A", "BB", "C"}, {"long", "x", "y"}});
  EXPECT_EQ(out.str(), "A       BB    C\nlong    x     y\n");
}

}  // namespace
}  // namespace crihook::ctl
