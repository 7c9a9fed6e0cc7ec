// The views people read (topology/views.cc): the connection matrix of each
// of make-fixtures.sh's machines, checked cell by cell against the layout
// the script documents; a hand-made tree with the classes those machines
// lack (PXB, PHB, two functions of one card); a machine written by hand
// with what sysfs rarely shows; a pod's picture. The Graphviz picture
// (topology/dot.cc) is dot_test.cc's.

#include "topology/views.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/text.h"
#include "test/support/fake_cri_server.h"
#include "test/support/fixture_trees.h"
#include "test/topology/topology_fixtures.h"

namespace crihook::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The matrix as printed, read back: cell[row][column] and each row's
// affinities, so the tests check what a user reads, not only the structure.
struct Printed {
  std::vector<std::string> columns;
  std::map<std::string, std::map<std::string, std::string>> cell;
  std::map<std::string, std::string> cpus, numa;
  std::map<std::string, std::string> legend;  // "NIC0" -> "mlx5_0 0000:1c:00.0"
};

Printed readMatrix(const std::string& text) {
  Printed p;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  std::istringstream header(line);
  for (std::string w; header >> w && w != "CPU";) p.columns.push_back(w);
  while (std::getline(in, line) && !line.empty()) {
    std::istringstream row(line);
    std::string label;
    row >> label;
    for (const std::string& c : p.columns) row >> p.cell[label][c];
    row >> p.cpus[label] >> p.numa[label];
  }
  while (std::getline(in, line)) {
    auto colon = line.find(": ");
    if (line.rfind("  GPU", 0) == 0 || line.rfind("  NIC", 0) == 0)
      p.legend[line.substr(2, colon - 2)] = line.substr(colon + 2);
  }
  return p;
}

// make-fixtures.sh's machines (test/support/fixture_trees.h).
class Views : public ::testing::Test {
 protected:
  static topo::Snapshot load(const std::string& name) {
    return topo::discover(topo::SysRoot(fixtureTree(name)));
  }
  static Printed printed(const topo::Snapshot& s) {
    return readMatrix(topo::matrixText(topo::connectionMatrix(s)));
  }
};

// make-fixtures.sh's dgx: switch k (root complexes pci0000:17, 37, 97, b7)
// holds GPUs 2k and 2k+1; mlx5_0 is on switch 0 with its VFs mlx5_5 and
// mlx5_6, mlx5_1 on switch 1, mlx5_2 and mlx5_3 on switch 2, mlx5_4 on
// switch 3; switches 0 and 1 on NUMA node 0 (socket 0), 2 and 3 on node 1.
// Every switch is on a root complex of its own. GPU 7 says -1; its switch 1.
TEST_F(Views, DgxMatrixCellByCell) {
  const Printed p = printed(load("dgx"));
  const std::vector<std::pair<std::string, int>> layout = {
      // row, switch
      {"GPU0", 0}, {"GPU1", 0}, {"GPU2", 1}, {"GPU3", 1}, {"GPU4", 2},
      {"GPU5", 2}, {"GPU6", 3}, {"GPU7", 3}, {"NIC0", 0}, {"NIC1", 1},
      {"NIC2", 2}, {"NIC3", 2}, {"NIC4", 3}, {"NIC5", 0}, {"NIC6", 0}};
  std::vector<std::string> labels;
  for (const auto& [label, sw] : layout) labels.push_back(label);
  ASSERT_EQ(p.columns, labels);
  for (const auto& [a, sa] : layout) {
    for (const auto& [b, sb] : layout) {
      const char* expect = a == b ? "X" : sa == sb ? "PIX" : sa / 2 == sb / 2 ? "NODE" : "SYS";
      EXPECT_EQ(p.cell.at(a).at(b), expect) << a << " to " << b;
    }
    EXPECT_EQ(p.cpus.at(a), sa < 2 ? "0-15,32-47" : "16-31,48-63") << a;
    EXPECT_EQ(p.numa.at(a), a == "GPU7" ? "1*" : sa < 2 ? "0" : "1") << a;
  }
  EXPECT_EQ(p.legend.at("GPU0"), "0000:1a:00.0 NVIDIA A100-SXM4-40GB, minor 0");
  EXPECT_EQ(p.legend.at("GPU7"), "0000:bb:00.0 NVIDIA A100-SXM4-40GB, minor 7");
  EXPECT_EQ(p.legend.at("NIC0"), "mlx5_0 0000:1c:00.0");
  EXPECT_EQ(p.legend.at("NIC4"), "mlx5_4 0000:bc:00.0");
  EXPECT_EQ(p.legend.at("NIC5"), "mlx5_5 0000:1c:00.2, VF of mlx5_0");
  EXPECT_EQ(p.legend.at("NIC6"), "mlx5_6 0000:1c:00.3, VF of mlx5_0");
}

// workstation: 4 GPUs, each on a root port of its own of one root complex,
// one socket, one node; no RDMA device.
TEST_F(Views, WorkstationMatrixIsAllHostBridge) {
  const topo::Snapshot s = load("workstation");
  const Printed p = printed(s);
  ASSERT_EQ(p.columns, (std::vector<std::string>{"GPU0", "GPU1", "GPU2", "GPU3"}));
  for (const std::string& a : p.columns) {
    for (const std::string& b : p.columns) {
      EXPECT_EQ(p.cell.at(a).at(b), a == b ? "X" : "PHB") << a << " to " << b;
    }
    EXPECT_EQ(p.cpus.at(a), "0-15");
    EXPECT_EQ(p.numa.at(a), "0");
  }
  const std::string text = topo::matrixText(topo::connectionMatrix(s));
  EXPECT_THAT(text, Not(HasSubstr("NIC Legend")));
  EXPECT_THAT(text, Not(HasSubstr("N/A")));
}

// intel-rdma: the AMD GPU (pci0000:80) says -1 as does its bridge, on a
// machine of 2 nodes: its node is unknown; mlx5_1 (pci0000:c0) on node 1,
// rocep24s0 (pci0000:16) on node 0; CPUs 0-3 node 0, 4-7 node 1.
TEST_F(Views, IntelRdmaMatrixWithAGpuOfUnknownNode) {
  const Printed p = printed(load("intel-rdma"));
  ASSERT_EQ(p.columns, (std::vector<std::string>{"GPU0", "NIC0", "NIC1"}));
  for (const std::string& a : p.columns) {
    for (const std::string& b : p.columns) {
      EXPECT_EQ(p.cell.at(a).at(b), a == b ? "X" : "SYS") << a << " to " << b;
    }
  }
  EXPECT_EQ(p.legend.at("GPU0"), "0000:83:00.0 amd 0x740f");
  EXPECT_EQ(p.legend.at("NIC0"), "mlx5_1 0000:c1:00.0");
  EXPECT_EQ(p.legend.at("NIC1"), "rocep24s0 0000:18:00.0");
  EXPECT_EQ(p.cpus.at("GPU0"), "N/A");
  EXPECT_EQ(p.numa.at("GPU0"), "N/A");
  EXPECT_EQ(p.cpus.at("NIC0"), "4-7");
  EXPECT_EQ(p.numa.at("NIC0"), "1");
  EXPECT_EQ(p.cpus.at("NIC1"), "0-3");
  EXPECT_EQ(p.numa.at("NIC1"), "0");
}

// snc: GPU 0 on node 1, GPU 1 on node 2, mlx5_0 on node 0, mlx5_1 on node
// 3, each on a root complex of its own: every pair crosses NUMA nodes, those
// of one socket too.
TEST_F(Views, SncMatrixCrossesNodesEvenWithinASocket) {
  const Printed p = printed(load("snc"));
  ASSERT_EQ(p.columns, (std::vector<std::string>{"GPU0", "GPU1", "NIC0", "NIC1"}));
  for (const std::string& a : p.columns) {
    for (const std::string& b : p.columns) {
      EXPECT_EQ(p.cell.at(a).at(b), a == b ? "X" : "SYS") << a << " to " << b;
    }
  }
  EXPECT_EQ(p.numa.at("GPU0"), "1");
  EXPECT_EQ(p.cpus.at("GPU0"), "4-7,20-23");
  EXPECT_EQ(p.numa.at("GPU1"), "2");
  EXPECT_EQ(p.cpus.at("GPU1"), "8-11,24-27");
  EXPECT_EQ(p.numa.at("NIC0"), "0");
  EXPECT_EQ(p.cpus.at("NIC0"), "0-3,16-19");
  EXPECT_EQ(p.legend.at("NIC0"), "mlx5_0 0000:31:00.0");
  EXPECT_EQ(p.numa.at("NIC1"), "3");
  EXPECT_EQ(p.cpus.at("NIC1"), "12-15,28-31");
}

// A tree written here, for the classes the fixtures lack. One socket, no
// NUMA nodes in sysfs (one node, 0). Root complex pci0000:40:
//   40:01.0 root port - 41:00.0 switch A up - 42:00.0 down - 43:00.0 switch B up
//       - 44:00.0 down - 45:00.0 GPU0;  44:01.0 down - 46:00.0 GPU1
//     switch A's 42:01.0 down - 47:00.0 mlx5_0
//   40:02.0 root port - 48:00.0 GPU2
//   40:03.0 root port - 49:00.0 mlx5_1, 49:00.1 mlx5_2 (one card, two functions)
// Root complex pci0000:60: 60:01.0 - 61:00.0 GPU3, numa_node -1 everywhere.
class HandMade : public ::testing::Test {
 protected:
  void SetUp() override {
    write("sys/devices/system/cpu/online", "0-3");
    for (int c = 0; c < 4; ++c) {
      const std::string t = cat("sys/devices/system/cpu/cpu", c, "/topology/");
      write(t + "physical_package_id", "0");
      write(t + "core_id", cat(c));
      write(t + "thread_siblings_list", cat(c));
    }
    const std::string a = "pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:00.0/0000:43:00.0";
    for (const std::string& b : std::vector<std::string>{
             "pci0000:40/0000:40:01.0", "pci0000:40/0000:40:01.0/0000:41:00.0",
             "pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:00.0",
             "pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:01.0", a, a + "/0000:44:00.0",
             a + "/0000:44:01.0", "pci0000:40/0000:40:02.0", "pci0000:40/0000:40:03.0"}) {
      pci(b, "0x060400", "0");
    }
    pci(a + "/0000:44:00.0/0000:45:00.0", "0x030200", "0");
    pci(a + "/0000:44:01.0/0000:46:00.0", "0x030200", "0");
    pci("pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:01.0/0000:47:00.0", "0x020700", "0");
    ib("pci0000:40/0000:40:01.0/0000:41:00.0/0000:42:01.0/0000:47:00.0", "mlx5_0");
    pci("pci0000:40/0000:40:02.0/0000:48:00.0", "0x030200", "0");
    pci("pci0000:40/0000:40:03.0/0000:49:00.0", "0x020700", "0");
    ib("pci0000:40/0000:40:03.0/0000:49:00.0", "mlx5_1");
    pci("pci0000:40/0000:40:03.0/0000:49:00.1", "0x020700", "0");
    ib("pci0000:40/0000:40:03.0/0000:49:00.1", "mlx5_2");
    pci("pci0000:60/0000:60:01.0", "0x060400", "-1");
    pci("pci0000:60/0000:60:01.0/0000:61:00.0", "0x030200", "-1");
  }
  void write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir_.file(path)).parent_path());
    std::ofstream(dir_.file(path)) << text << '\n';
  }
  void pci(const std::string& path, const std::string& cls, const std::string& numa) {
    const std::string d = "sys/devices/" + path;
    write(d + "/vendor", "0x10de");
    write(d + "/device", "0x2330");
    write(d + "/class", cls);
    write(d + "/numa_node", numa);
    std::filesystem::create_directories(dir_.file("sys/bus/pci/devices"));
    std::filesystem::create_symlink(
        "../../../devices/" + path,
        dir_.file("sys/bus/pci/devices/" + path.substr(path.rfind('/') + 1)));
  }
  void ib(const std::string& path, const std::string& name) {
    const std::string d = "sys/devices/" + path + "/infiniband/" + name;
    write(d + "/ports/1/state", "4: ACTIVE");
    std::filesystem::create_symlink("../..", dir_.file(d + "/device"));
    std::filesystem::create_directories(dir_.file("sys/class/infiniband"));
    std::filesystem::create_symlink("../../devices/" + path + "/infiniband/" + name,
                                    dir_.file("sys/class/infiniband/" + name));
  }
  TempDir dir_;
};

TEST_F(HandMade, SwitchesBridgesAndHostBridgesAreCountedAsNvidiaSmiCountsThem) {
  const topo::Snapshot s = topo::discover(topo::SysRoot(dir_.path()));
  ASSERT_EQ(s.gpus.size(), 4u);
  ASSERT_EQ(s.rdma.size(), 3u);
  const Printed p = readMatrix(topo::matrixText(topo::connectionMatrix(s)));
  ASSERT_EQ(p.columns,
            (std::vector<std::string>{"GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2"}));
  // GPU0 45:00.0, GPU1 46:00.0, GPU2 48:00.0, GPU3 61:00.0; NIC0 mlx5_0
  // 47:00.0, NIC1 mlx5_1 49:00.0, NIC2 mlx5_2 49:00.1.
  const std::map<std::string, std::vector<std::string>> expect = {
      // GPU0   GPU1    GPU2    GPU3    NIC0    NIC1    NIC2
      {"GPU0", {"X", "PIX", "PHB", "NODE", "PXB", "PHB", "PHB"}},
      {"GPU1", {"PIX", "X", "PHB", "NODE", "PXB", "PHB", "PHB"}},
      {"GPU2", {"PHB", "PHB", "X", "NODE", "PHB", "PHB", "PHB"}},
      {"GPU3", {"NODE", "NODE", "NODE", "X", "NODE", "NODE", "NODE"}},
      {"NIC0", {"PXB", "PXB", "PHB", "NODE", "X", "PHB", "PHB"}},
      {"NIC1", {"PHB", "PHB", "PHB", "NODE", "PHB", "X", "PIX"}},
      {"NIC2", {"PHB", "PHB", "PHB", "NODE", "PHB", "PIX", "X"}},
  };
  for (const auto& [row, cells] : expect) {
    for (size_t j = 0; j < cells.size(); ++j) {
      EXPECT_EQ(p.cell.at(row).at(p.columns[j]), cells[j]) << row << " to " << p.columns[j];
    }
  }
  // GPU3 says -1 and so does its root port, but the machine has one node.
  EXPECT_EQ(p.numa.at("GPU3"), "0*");
  EXPECT_EQ(p.cpus.at("GPU3"), "0-3");
  EXPECT_EQ(p.numa.at("GPU2"), "0");
}

TEST_F(Views, PodPictureSaysWhereDevicesAndCpusSitAndWhatIsFar) {
  const topo::Snapshot s = load("dgx");
  // A good allocation: two GPUs and the NIC of one switch, CPUs of its node.
  const std::string good = topo::podPicture(s,
                                            {{.type = "gpu", .minor = 0},
                                             {.type = "gpu", .minor = 1},
                                             {.type = "rdma", .name = "mlx5_0"}},
                                            "0-7", "  ");
  EXPECT_EQ(good,
            "  GPU0 (minor 0, 0000:1a:00.0): switch 0000:18:00.0, root complex pci0000:17, NUMA 0, "
            "socket 0\n"
            "  GPU1 (minor 1, 0000:1b:00.0): switch 0000:18:00.0, root complex pci0000:17, NUMA 0, "
            "socket 0\n"
            "  NIC0 mlx5_0 (0000:1c:00.0): switch 0000:18:00.0, root complex pci0000:17, NUMA 0, "
            "socket 0\n"
            "  cpus 0-7 on NUMA 0 (socket 0)\n"
            "  farthest link between its devices: PIX (GPU0 - GPU1)\n"
            "  cpus on its devices' NUMA node 0\n");
  // A wrong one: a GPU across the machine, a VF, CPUs on the other socket.
  const std::string bad = topo::podPicture(s,
                                           {{.type = "gpu", .pci = "0000:bb:00.0"},
                                            {.type = "rdma", .pci = "0000:1c:00.3"},
                                            {.type = "gpu", .minor = 42},
                                            {.type = "fpga", .minor = 1}},
                                           "16-19,0", "");
  EXPECT_THAT(bad, HasSubstr("GPU7 (minor 7, 0000:bb:00.0): switch 0000:b8:00.0, root complex "
                             "pci0000:b7, NUMA 1 (numa_node -1: of bridge 0000:b8:00.0), "
                             "socket 1\n"));
  EXPECT_THAT(bad, HasSubstr("NIC6 mlx5_6 (0000:1c:00.3, a VF): switch 0000:18:00.0"));
  EXPECT_THAT(bad, HasSubstr("GPU minor 42: not in this machine's topology\n"));
  EXPECT_THAT(bad, HasSubstr("fpga minor 1: not a GPU or RDMA device; not placed\n"));
  EXPECT_THAT(bad, HasSubstr("cpus 0 on NUMA 0 (socket 0)\ncpus 16-19 on NUMA 1 (socket 1)\n"));
  EXPECT_THAT(bad, HasSubstr("farthest link between its devices: SYS (GPU7 - NIC6)\n"));
  EXPECT_THAT(bad, HasSubstr("cpus on its devices' NUMA nodes 0,1\n"));
  const std::string off = topo::podPicture(
      s, {{.type = "gpu", .minor = 2}, {.type = "rdma", .uverbs = "uverbs1"}}, "16-23", "");
  EXPECT_THAT(off, HasSubstr("NIC1 mlx5_1 (0000:3c:00.0)"));
  EXPECT_THAT(off, HasSubstr("farthest link between its devices: PIX (GPU2 - NIC1)\n"));
  EXPECT_THAT(off, HasSubstr("cpus 16-23 off its devices' NUMA node 0\n"));
  EXPECT_THAT(topo::podPicture(s, {}, "", ""), HasSubstr("cpus: not pinned"));
  EXPECT_THAT(topo::podPicture(s, {}, "0-x", ""), HasSubstr("cpus \"0-x\": not a CPU list"));
  // CPUs not known (a device record has none): nothing said of them.
  EXPECT_EQ(topo::podPicture(s, {{.type = "gpu", .minor = 5}}, std::nullopt, ""),
            "GPU5 (minor 5, 0000:9b:00.0): switch 0000:98:00.0, root complex pci0000:97, NUMA 1, "
            "socket 1\n");
}

// A cpuset is anyone's text up to CPU 65535, and a machine's CPUs are looked
// up by id for each of its CPUs: once each, not a walk over every CPU of
// the machine for each (65536 x 65536 compares took the fuzzer past 10 s; its
// time limit, not this test, is what would catch that again).
TEST(OddMachine, PodPictureOfAWideCpusetOnAWideMachine) {
  topo::Snapshot s;
  s.nodes.push_back({.id = 0, .socket = 0});
  for (int c = 0; c < 65536; ++c) {
    s.cpus.push_back({.id = c, .socket = 0, .core = c, .node = c < 65535 ? 0 : -1});
    s.nodes[0].cpus.push_back(c);
  }
  const std::string p = topo::podPicture(s, {}, "0-65535", "");
  EXPECT_EQ(p, "cpus 0-65534 on NUMA 0 (socket 0)\ncpus 65535: not CPUs of this machine\n");
}

// The matrix points into its Snapshot: one made from a temporary would
// dangle as soon as the call returned, so that does not compile.
template <typename S>
concept MatrixFrom = requires(S&& s) {
  topo::connectionMatrix(std::forward<S>(s));
};
static_assert(MatrixFrom<const topo::Snapshot&>);
static_assert(!MatrixFrom<topo::Snapshot>);

// Each row of the matrix has as many cells as the header has columns, plus
// its label, CPU Affinity and NUMA Affinity: a column read by position (as
// people and scripts read nvidia-smi's) is never off by one.
TEST(OddMachine, EveryMatrixRowHasEveryCell) {
  const topo::Snapshot s = oddMachine();
  const topo::Matrix m = topo::connectionMatrix(s);
  const std::string text = topo::matrixText(m);
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  const size_t columns = m.devices.size();
  for (size_t i = 0; i < m.devices.size() && std::getline(in, line); ++i) {
    std::istringstream row(line);
    size_t words = 0;
    for (std::string w; row >> w;) ++words;
    EXPECT_EQ(words, columns + 3) << line;
  }
  // GPU1 is on node 1, which has no CPUs: said so, not a blank.
  EXPECT_THAT(text, HasSubstr("GPU1  SYS   X     SYS   none          1\n")) << text;
  EXPECT_THAT(text, HasSubstr("none = the device's NUMA node has no CPUs")) << text;
}

// A CPU list wider than its heading still leaves two spaces before the
// NUMA column, as nvidia-smi's does: a script splitting on two spaces, or a
// reader, never sees the two columns run together.
TEST(OddMachine, AWideCpuListKeepsTwoSpacesBeforeTheNumaColumn) {
  topo::Snapshot s = oddMachine();
  s.nodes[0].cpus.clear();
  for (int c = 0; c <= 30; c += 2) s.nodes[0].cpus.push_back(c);
  const std::string text = topo::matrixText(topo::connectionMatrix(s));
  EXPECT_THAT(text, HasSubstr("0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30  0\n")) << text;
}

// NICs are numbered by name with runs of digits read as numbers, as people
// and nvidia-smi list them: mlx5_2 before mlx5_10, ib9 before ib10.
TEST(OddMachine, NicsAreNumberedByNameWithNumbersComparedAsNumbers) {
  topo::Snapshot s = oddMachine();
  const topo::RdmaDevice x = s.rdma[0];
  s.rdma.clear();
  for (const char* name :
       {"mlx5_10", "mlx5_2", "ib10", "mlx5_1", "mlx5_11", "mlx5_0", "ib9", "mlx5_002"}) {
    s.rdma.push_back(x);
    s.rdma.back().name = name;
  }
  const topo::Matrix m = topo::connectionMatrix(s);
  std::vector<std::string> order;
  for (const topo::MatrixDevice& d : m.devices) {
    if (d.rdma) order.push_back(cat(d.label, " ", d.rdma->name));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"NIC0 ib9", "NIC1 ib10", "NIC2 mlx5_0", "NIC3 mlx5_1",
                                             "NIC4 mlx5_002", "NIC5 mlx5_2", "NIC6 mlx5_10",
                                             "NIC7 mlx5_11"}));
}

// A device right on the root complex's bus has no root port, a device that
// is under no root complex has neither: the picture says so instead of
// naming an empty bridge.
TEST(OddMachine, PodPictureOfDevicesWithoutABridgeChain) {
  const std::string p = topo::podPicture(
      oddMachine(), {{.type = "gpu", .pci = "0000:00:02.0"}, {.type = "rdma", .name = "rxe0"}},
      std::nullopt, "");
  EXPECT_THAT(p, HasSubstr("GPU0 (0000:00:02.0): on the root complex's bus (no bridge above it), "
                           "root complex pci0000:00, NUMA 0, socket 0\n"))
      << p;
  EXPECT_THAT(p, HasSubstr("NIC0 rxe0 (0000:99:00.0): under no root complex sysfs shows, NUMA 0, "
                           "socket 0\n"))
      << p;
  EXPECT_THAT(p, Not(HasSubstr("root port ,"))) << p;
  EXPECT_THAT(p, Not(HasSubstr("root complex ,"))) << p;
}

}  // namespace
}  // namespace crihook::testing
