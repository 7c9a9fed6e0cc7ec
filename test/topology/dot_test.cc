// The Graphviz picture of the machine (topology/dot.cc, declared in
// topology/views.h): each device under its switch, root complex, NUMA node
// and socket on make-fixtures.sh's dgx; every fixture's picture through
// Graphviz's own parser when it is installed; text from sysfs escaped for a
// DOT string, never a character entity, and cut short.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "base/text.h"
#include "test/support/fake_cri_server.h"
#include "test/topology/topology_fixtures.h"
#include "topology/views.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// make-fixtures.sh's machines, loaded (topology_fixtures.h).
using Views = Fixtures;

TEST(DotEscape, QuotesBackslashesControlAndNonAsciiBytesAndLength) {
  EXPECT_EQ(topo::dotEscape("mlx5_0"), "mlx5_0");
  EXPECT_EQ(topo::dotEscape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(topo::dotEscape("a\nb\x01\x7f\xff"), "a\\\\x0ab\\\\x01\\\\x7f\\\\xff");
  EXPECT_EQ(topo::dotEscape(std::string(200, 'a')), std::string(64, 'a') + "...");
  EXPECT_EQ(topo::dotEscape("abcdef", 3), "abc...");
}

// The picture's structure, read back from its text: each node's label and
// the parent of each node.
struct Dot {
  std::map<std::string, std::string> label;   // id -> label
  std::map<std::string, std::string> parent;  // id -> id
  std::map<std::string, std::string> byLabelPrefix(const std::string& prefix) const {
    std::map<std::string, std::string> out;
    for (const auto& [id, l] : label) {
      if (l.rfind(prefix, 0) == 0) out[l] = id;
    }
    return out;
  }
  std::string idOf(const std::string& prefix) const {
    auto m = byLabelPrefix(prefix);
    return m.size() == 1 ? m.begin()->second : "(" + std::to_string(m.size()) + " matches)";
  }
  std::string parentLabel(const std::string& prefix) const {
    auto it = parent.find(idOf(prefix));
    return it == parent.end() ? "(none)" : label.at(it->second);
  }
};

Dot readDot(const std::string& text) {
  Dot d;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto arrow = line.find(" -> ");
    auto open = line.find(" [label=\"");
    if (arrow != std::string::npos) {
      std::string from = line.substr(2, arrow - 2);
      std::string to = line.substr(arrow + 4);
      to = to.substr(0, to.find_first_of(" ;"));
      d.parent[to] = from;
    } else if (open != std::string::npos && line.rfind("  graph", 0) != 0 &&
               line.rfind("  node", 0) != 0 && line.rfind("  edge", 0) != 0) {
      const std::string id = line.substr(2, open - 2);
      size_t end = open + 9;
      while (end < line.size() && !(line[end] == '"' && line[end - 1] != '\\')) ++end;
      d.label[id] = line.substr(open + 9, end - open - 9);
    }
  }
  return d;
}

// Graphviz's own parser on `text`, when `dot` is installed (Debian:
// graphviz, scripts/install-deps.sh): "" when it rendered, else why not.
// nullopt without Graphviz.
std::optional<std::string> renderSvg(const std::string& text, const std::string& dir,
                                     std::string* svg = nullptr) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) return std::nullopt;
  std::ofstream(dir + "/g.dot") << text;
  const int rc =
      std::system(("dot -Tsvg -o " + dir + "/g.svg " + dir + "/g.dot 2>" + dir + "/g.err").c_str());
  std::ifstream err(dir + "/g.err");
  std::string why((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  if (svg != nullptr) {
    std::ifstream s(dir + "/g.svg");
    svg->assign((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
  }
  return rc == 0 && why.empty() ? "" : cat("dot exited ", rc, ": ", why);
}

TEST_F(Views, DgxDotHangsEachDeviceUnderItsSwitchRootComplexNodeAndSocket) {
  const Dot d = readDot(topo::dot(load("dgx")));
  EXPECT_EQ(d.byLabelPrefix("GPU").size(), 8u);
  EXPECT_EQ(d.byLabelPrefix("NIC").size(), 7u);
  EXPECT_EQ(d.byLabelPrefix("PCIe switch").size(), 4u);
  EXPECT_EQ(d.byLabelPrefix("root complex").size(), 4u);
  EXPECT_EQ(d.label.at(d.idOf("GPU0 ")),
            "GPU0 minor 0\\n0000:1a:00.0\\nNVIDIA A100-SXM4-40GB\\nNUMA 0");
  EXPECT_EQ(d.parentLabel("GPU0 "), "PCIe switch\\n0000:18:00.0");
  EXPECT_EQ(d.parentLabel("GPU7 "), "PCIe switch\\n0000:b8:00.0");
  EXPECT_THAT(d.label.at(d.idOf("GPU7 ")), HasSubstr("NUMA 1 (inferred)"));
  EXPECT_EQ(d.parentLabel("NIC3 mlx5_3"), "PCIe switch\\n0000:98:00.0");
  EXPECT_EQ(d.parentLabel("PCIe switch\\n0000:18:00.0"), "root complex\\npci0000:17");
  EXPECT_EQ(d.parentLabel("root complex\\npci0000:17"), "NUMA node 0\\nCPUs 0-15,32-47\\n256 GiB");
  EXPECT_EQ(d.parentLabel("root complex\\npci0000:b7"), "NUMA node 1\\nCPUs 16-31,48-63\\n256 GiB");
  EXPECT_EQ(d.parentLabel("NUMA node 1"), "socket 1");
  // VFs under their PF.
  EXPECT_THAT(d.parentLabel("NIC5 mlx5_5"), ::testing::StartsWith("NIC0 mlx5_0\\n"));
  EXPECT_THAT(d.label.at(d.idOf("NIC4 ")), HasSubstr("port 1 InfiniBand 1: DOWN"));
}

TEST_F(Views, EveryFixturesDotIsValidGraphviz) {
  TempDir out;
  int rendered = 0;
  for (const char* name : {"dgx", "workstation", "intel-rdma", "snc"}) {
    const std::string text = topo::dot(load(name));
    EXPECT_THAT(text, ::testing::StartsWith("digraph topology {\n"));
    EXPECT_THAT(text, ::testing::EndsWith("}\n"));
    if (auto why = renderSvg(text, out.path())) {
      EXPECT_EQ(*why, "") << name;
      ++rendered;
    }
  }
  if (rendered == 0) GTEST_SKIP() << "no Graphviz (dot): only the structure was checked";
}

// What sysfs and the driver hold is anyone's text: a model with a quote, a
// backslash, a newline and DOT syntax, and an RDMA name with a newline, stay
// inside their labels, one line each, and Graphviz reads the graph.
TEST(DotHostile, NamesAreEscapedAndBounded) {
  topo::Snapshot s;
  s.nodes.push_back({.id = 0, .socket = 0, .cpus = {0, 1}});
  s.cpus.push_back({.id = 0, .socket = 0, .core = 0, .node = 0});
  s.cpus.push_back({.id = 1, .socket = 0, .core = 1, .node = 0});
  topo::PciDevice d;
  d.address = "0000:01:00.0";
  d.root_complex = "pci0000:00\"\n]; evil -> x; \\";
  d.bridges = {"0000:00:01.0"};
  s.pci.push_back(d);
  topo::PciDevice n = d;
  n.address = "0000:02:00.0";
  n.bridges = {"0000:00:02.0"};
  s.pci.push_back(n);
  topo::Gpu g;
  g.address = d.address;
  g.model = "A100\"];\n  pwned [label=\"x\\" + std::string(300, 'Z');
  g.minor = 0;
  s.gpus.push_back(g);
  topo::RdmaDevice x;
  x.name = "mlx5_0\nfake_line\x1b[31m";
  x.address = n.address;
  x.ports.push_back({1, "4: ACTIVE\"", "Infini\\Band"});
  s.rdma.push_back(x);

  const std::string text = topo::dot(s);
  const Dot parsed = readDot(text);
  EXPECT_EQ(parsed.label.count("pwned"), 0u) << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line == "}" || line.rfind("digraph", 0) == 0 || line.rfind("  ", 0) == 0)
        << "a line of its own from a name: " << line;
  }
  EXPECT_THAT(text, HasSubstr("A100\\\"];\\\\x0a  pwned [label=\\\"x\\\\ZZZ"));
  EXPECT_THAT(text, HasSubstr("mlx5_0\\\\x0afake_line\\\\x1b[31m"));
  EXPECT_THAT(text, HasSubstr("Infini\\\\Band 4: ACTIVE\\\""));
  EXPECT_THAT(text, Not(HasSubstr(std::string(65, 'Z'))));
  EXPECT_THAT(text, HasSubstr("ZZZ..."));
  // The matrix's legends: one printable line each.
  const std::string matrix = topo::matrixText(topo::connectionMatrix(s));
  EXPECT_THAT(matrix, HasSubstr("NIC0: mlx5_0?fake_line?[31m 0000:02:00.0\n"));
  EXPECT_THAT(matrix, Not(HasSubstr(std::string(65, 'Z'))));

  TempDir out;
  std::string svg;
  auto why = renderSvg(text, out.path(), &svg);
  if (!why) GTEST_SKIP() << "no Graphviz (dot): the escaping was checked, not rendered";
  EXPECT_EQ(*why, "");
  // Rendered as written: the quote a quote, the newline as the text \x0a.
  EXPECT_THAT(svg, HasSubstr("A100&quot;];\\x0a"));
  EXPECT_THAT(svg, HasSubstr("mlx5_0\\x0afake_line\\x1b[31m"));
}

// Graphviz turns character entities in a plain label into characters:
// "&#10;" in a model name would draw a line of its own in the picture (a
// forged "GPU9" under the real GPU). '&' is written as "&amp;", which
// Graphviz draws as the '&' it was.
TEST(DotEscape, AmpersandsAreNotEntities) {
  EXPECT_EQ(topo::dotEscape("A&B"), "A&amp;B");
  EXPECT_EQ(topo::dotEscape("x&#10;GPU9"), "x&amp;#10;GPU9");
  topo::Snapshot s = oddMachine();
  s.gpus[0].model = "A100&#10;GPU9 minor 9&#x0a;";
  const std::string text = topo::dot(s);
  EXPECT_THAT(text, Not(HasSubstr("&#10;"))) << text;
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_SKIP() << "no Graphviz (dot)";
  TempDir out;
  std::ofstream(out.file("g.dot")) << text;
  ASSERT_EQ(std::system(("dot -Tplain -o " + out.file("g.txt") + " " + out.file("g.dot")).c_str()),
            0);
  std::ifstream plain(out.file("g.txt"));
  const std::string drawn((std::istreambuf_iterator<char>(plain)),
                          std::istreambuf_iterator<char>());
  // Drawn as written, on the model's own line.
  EXPECT_THAT(drawn, HasSubstr("A100&#10;GPU9 minor 9&#x0a;")) << drawn;
  EXPECT_THAT(drawn, Not(HasSubstr("\nGPU9 minor 9"))) << drawn;
}

}  // namespace
}  // namespace crihook::testing
