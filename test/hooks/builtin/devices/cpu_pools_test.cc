// The cpuset hook's pools (hooks/builtin/devices/cpu_pools.h) with a
// stand-in runtime: what is moved, when, what survives a restart, retries,
// and records that are refused.

#include "hooks/builtin/devices/cpu_pools.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/logging.h"
#include "base/mutex.h"
#include "test/support/child_process.h"
#include "test/support/eventually.h"
#include "test/support/fake_cri_server.h"
#include "topology/topology.h"

namespace crihook::testing {
namespace {

using ::testing::ElementsAre;

// The pools with a stand-in runtime: what is moved, when, and what survives.
class CpuPoolsTest : public ::testing::Test {
 protected:
  struct Move {
    std::string id, cpus, mems;
    bool operator==(const Move&) const = default;
  };
  std::unique_ptr<CpuPools> pools() {
    return std::make_unique<CpuPools>(
        dir_.file("cpuset/pools.json"),
        [this](const std::string& id, const std::string& cpus, const std::string& mems) {
          MutexLock lock(mu_);
          moves_.push_back({id, cpus, mems});
          if (failures_ > 0) {
            --failures_;
            return absl::UnavailableError("runtime busy");
          }
          return gone_.count(id) ? absl::NotFoundError("no such container") : absl::OkStatus();
        },
        logger("hook.cpuset"));
  }
  std::vector<Move> moves() {
    MutexLock lock(mu_);
    return std::exchange(moves_, {});
  }
  static std::vector<int> cpus(const std::string& list) {
    std::vector<int> out;
    topology::parseCpuList(list, out);
    return out;
  }

  TempDir dir_;
  Mutex mu_;  // the stand-in runtime's, called on the pools' thread
  std::vector<Move> moves_ ABSL_GUARDED_BY(mu_);
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> gone_ ABSL_GUARDED_BY(mu_);
};

TEST_F(CpuPoolsTest, SharedContainersMoveOffAPinAndBackAcrossARestart) {
  auto p = pools();
  p->start();
  p->addShared("ls1", {"sb-ls", "ml/ls", "main"}, cpus("0-7"), "0", "0-7");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_TRUE(moves().empty());  // already where it belongs

  p->reserve("sb-lsr/main/0", cpus("2-3"));
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(moves(), ElementsAre(Move{"ls1", "0-1,4-7", "0"}));
  p->commit("sb-lsr/main/0", "lsr1", {"sb-lsr", "ml/lsr", "main"});
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_TRUE(moves().empty());

  // A shared container created with the pin's CPUs (its CPUs were chosen
  // before the pin was reserved) is moved off them.
  p->addShared("ls2", {"sb-ls2", "ml/ls2", "main"}, cpus("0-7"), "0", "0-7");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(moves(), ElementsAre(Move{"ls2", "0-1,4-7", "0"}));

  // crihookd restarts: the pin and the shared containers are read back.
  p.reset();
  p = pools();
  p->start();
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_TRUE(moves().empty());
  EXPECT_THAT(p->pinnedCpus(), ElementsAre(2, 3));
  EXPECT_EQ(p->sharedCpusOf("ls1"), "0-1,4-7");

  p->forget("lsr1");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(moves(),
              ::testing::UnorderedElementsAre(Move{"ls1", "0-7", "0"}, Move{"ls2", "0-7", "0"}));
}

// The pools' record is read as any file on disk: deep, a FIFO or a link is
// refused and the pools start empty, promptly.
TEST_F(CpuPoolsTest, ADeepOrNonRegularRecordIsRefusedAndThePoolsStartEmpty) {
  std::filesystem::create_directories(dir_.file("cpuset"));
  std::ofstream(dir_.file("cpuset/pools.json"))
      << R"({"pinned": {"c1": {"cpus": "2-3", "x": )" << std::string(60000, '[')
      << std::string(60000, ']') << "}}}";
  auto p = pools();
  p->start();
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_TRUE(p->pinnedCpus().empty());
  p.reset();

  std::filesystem::remove(dir_.file("cpuset/pools.json"));
  ASSERT_EQ(::mkfifo(dir_.file("cpuset/pools.json").c_str(), 0600), 0);
  p = pools();
  p->start();  // returns: the FIFO is not waited on
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_TRUE(p->pinnedCpus().empty());
}

// The pools' file carries a format version: none is version 1 (crihookd
// before versions), a newer one is left exactly as it is.
TEST_F(CpuPoolsTest, TheRecordsVersionIsWrittenAbsentIsOneANewerOneIsNeverOverwritten) {
  const std::string file = dir_.file("cpuset/pools.json");
  {
    auto p = pools();
    p->start();
    p->reserve("sb-a/main/0", cpus("2-3"));
    p->commit("sb-a/main/0", "pinned-a", {"sb-a", "ml/a", "main"});
    ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  }
  nlohmann::json record = nlohmann::json::parse(readFile(file));
  EXPECT_EQ(record.at("version"), 1);

  record.erase("version");
  std::ofstream(file, std::ios::trunc) << record.dump();
  {
    auto p = pools();
    p->start();
    ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
    EXPECT_THAT(p->pinnedCpus(), ElementsAre(2, 3));
  }

  record["version"] = 7;
  const std::string newer = record.dump();
  std::ofstream(file, std::ios::trunc) << newer;
  auto p = pools();
  p->start();
  EXPECT_TRUE(p->pinnedCpus().empty());  // not read
  p->reserve("sb-b/main/0", cpus("4-5"));
  p->commit("sb-b/main/0", "pinned-b", {"sb-b", "ml/b", "main"});
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(p->pinnedCpus(), ElementsAre(4, 5));  // kept in memory
  p.reset();
  EXPECT_EQ(readFile(file), newer);
}

TEST_F(CpuPoolsTest, AFailedMoveIsRetriedAndAContainerTheRuntimeLostIsForgotten) {
  auto p = pools();
  p->start();
  p->addShared("ls1", {"sb-ls", "ml/ls", "main"}, cpus("0-7"), "0", "0-7");
  p->addShared("gone", {"sb-gone", "ml/gone", "main"}, cpus("0-7"), "0", "0-7");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  {
    MutexLock lock(mu_);
    failures_ = 2;
    gone_.insert("gone");
  }
  const auto t0 = std::chrono::steady_clock::now();
  p->reserve("sb-lsr/main/0", cpus("0"));
  // Both refused once, retried after 0.5 s: "gone" is then NOT_FOUND, ls1 moved.
  std::vector<Move> m;
  EXPECT_TRUE(eventually(
      [&] {
        for (Move x : moves()) m.push_back(x);
        return m.size() >= 4;
      },
      std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_THAT(m, ElementsAre(Move{"gone", "1-7", "0"}, Move{"ls1", "1-7", "0"},
                             Move{"gone", "1-7", "0"}, Move{"ls1", "1-7", "0"}));
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_EQ(p->sharedCount(), 1u);  // "gone" forgotten
  // Nothing more to do once ls1 is where it belongs: no move is owed, not
  // even after a backoff, and a change that makes the thread look again
  // (a reservation made and dropped) moves nothing.
  EXPECT_EQ(p->owedMoves(), 0u);
  p->reserve("sb-other/main/0", cpus("0"));
  p->drop("sb-other/main/0");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_TRUE(moves().empty());
}

// A container recorded again (its record replaced) starts with no failures
// behind it: its move is tried at once, not after the back-off the record it
// replaces had reached.
TEST_F(CpuPoolsTest, AContainerRecordedAgainIsMovedAtOnceNotAfterTheOldBackoff) {
  auto p = pools();
  p->start();
  p->addShared("ls1", {"sb-ls", "ml/ls", "main"}, cpus("0-7"), "0", "0-7");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  {
    MutexLock lock(mu_);
    failures_ = 1;
  }
  p->reserve("sb-lsr/main/0", cpus("0"));  // ls1 to 1-7: refused, retried in 0.5 s
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(moves(), ElementsAre(Move{"ls1", "1-7", "0"}));
  p->addShared("ls1", {"sb-ls", "ml/ls", "main"}, cpus("0-7"), "0", "0-7");
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(moves(), ElementsAre(Move{"ls1", "1-7", "0"})) << "tried again at once";
  EXPECT_EQ(p->owedMoves(), 0u);
}

TEST_F(CpuPoolsTest, ContainersOfSandboxesTheRuntimeNoLongerRunsAreForgotten) {
  auto p = pools();
  p->start();
  p->reserve("sb-lsr/main/0", cpus("2-3"));
  p->commit("sb-lsr/main/0", "lsr1", {"sb-lsr", "ml/lsr", "main"});
  p->addShared("ls1", {"sb-ls", "ml/ls", "main"}, cpus("0-7"), "0", "0-1,4-7");
  const auto listed_at = std::chrono::system_clock::now() + std::chrono::seconds(1);
  // Listed before this one was recorded: left alone though its sandbox is not listed.
  p->keepOnly({"sb-ls"}, std::chrono::system_clock::now() - std::chrono::hours(1));
  EXPECT_THAT(p->pinnedCpus(), ElementsAre(2, 3));
  // The pinned pod's sandbox was removed while crihookd was down.
  p->keepOnly({"sb-ls"}, listed_at);
  EXPECT_TRUE(p->pinnedCpus().empty());
  ASSERT_TRUE(p->settle(std::chrono::seconds(5)));
  EXPECT_THAT(moves(), ElementsAre(Move{"ls1", "0-7", "0"}));
  p->keepOnly({}, listed_at);
  EXPECT_EQ(p->sharedCount(), 0u);
}

// Times on disk are whole seconds, cut down: a pin read back from the
// listing's own second may have been made after the list was taken, so it
// is kept; one from a second before is forgotten.
TEST_F(CpuPoolsTest, APinRecordedInTheListingsOwnSecondIsKept) {
  std::filesystem::create_directories(dir_.file("cpuset"));
  std::ofstream(dir_.file("cpuset/pools.json"))
      << R"({"pinned": {"lsr1": {"sandbox": "sb-lsr", "pod": "ml/lsr", "container": "main",)"
      << R"( "since": 1700000000, "cpus": "2-3"}}})";
  auto p = pools();
  p->start();
  ASSERT_THAT(p->pinnedCpus(), ElementsAre(2, 3));
  const std::chrono::system_clock::time_point second(std::chrono::seconds(1700000000));
  p->keepOnly({}, second);
  EXPECT_THAT(p->pinnedCpus(), ElementsAre(2, 3));
  p->keepOnly({}, second + std::chrono::seconds(1));
  EXPECT_TRUE(p->pinnedCpus().empty());
}

}  // namespace
}  // namespace crihook::testing
