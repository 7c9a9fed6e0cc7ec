// The transparent relay's flow-control corrections (proxy/flow_ledger.h),
// checked against a model of both peers: kubelet never receives more than
// the window it granted, the runtime's view of that window is never behind
// kubelet's real one and exceeds it by exactly the relay's unpaid debt, and
// nothing stalls while kubelet credits as grpc-go does.

#include "proxy/flow_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <numeric>
#include <random>

namespace crihook::relay {
namespace {

TEST(FlowLedgerTest, OwnRepliesAreTakenOutOfTheNextConnectionCredit) {
  FlowLedger ledger;
  ledger.openOwn(3);
  EXPECT_EQ(ledger.ownRoom(3), 65535);
  ledger.onOwnSent(3, 1000);
  EXPECT_EQ(ledger.debt(), 1000);
  EXPECT_EQ(ledger.kubeletWindow(), 64535);
  // kubelet credits 600 of the 1000: nothing reaches the runtime.
  EXPECT_EQ(ledger.forwardedIncrement(600), 0u);
  // Then 5000: 400 repay the rest of the debt, 4600 go on.
  EXPECT_EQ(ledger.forwardedIncrement(5000), 4600u);
  EXPECT_EQ(ledger.debt(), 0);
  EXPECT_EQ(ledger.kubeletWindow(), 65535 + 4600);
}

TEST(FlowLedgerTest, TheRuntimesDataWaitsWhileItWouldOverrunKubeletsRealWindow) {
  FlowLedger ledger;
  ledger.openOwn(3);
  ledger.onOwnSent(3, 60000);
  EXPECT_TRUE(ledger.mayForward(5535));
  EXPECT_FALSE(ledger.mayForward(5536));
}

TEST(FlowLedgerTest, KubeletsInitialWindowMovesItsOpenStreamsWindows) {
  FlowLedger ledger;
  ledger.openOwn(1);
  ledger.onOwnSent(1, 100);
  EXPECT_TRUE(ledger.onKubeletInitialWindow(1 << 20));
  EXPECT_EQ(ledger.ownRoom(1), 65535 - 100);  // the connection window is the smaller
  ledger.forwardedIncrement(1 << 20);
  EXPECT_EQ(ledger.ownRoom(1), (1 << 20) - 100);
  EXPECT_TRUE(ledger.onKubeletInitialWindow(0));
  EXPECT_EQ(ledger.ownRoom(1), 0);  // negative windows allow nothing
  ledger.onKubeletStreamUpdate(1, 150);
  EXPECT_EQ(ledger.ownRoom(1), 50);
  EXPECT_FALSE(ledger.onKubeletInitialWindow(0x80000000u));
  ledger.closeOwn(1);
  EXPECT_EQ(ledger.ownRoom(1), 0);
}

TEST(FlowLedgerTest, TakenRequestBytesAreCreditedToKubelet) {
  auto c = FlowLedger::creditForTaken(700, true);
  EXPECT_EQ(c.connection, 700u);
  EXPECT_EQ(c.stream, 700u);
  EXPECT_EQ(FlowLedger::creditForTaken(700, false).stream, 0u);
}

// Both peers as grpc-go behaves: the runtime sends DATA within the window
// it believes in; kubelet reads everything at once and sends a connection
// WINDOW_UPDATE once its unacknowledged bytes reach its threshold (grpc-go:
// a quarter of the window), or only as its application reads (a client with
// manual window updates). The relay forwards the runtime's frames
// in order, in bursts, holding them while mayForward says no, and sends
// replies of its own on streams it answers.
TEST(FlowLedgerTest, AModelOfBothPeersNeverOverrunsAndNeverStalls) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    FlowLedger ledger;
    // Half the seeds credit only when "the application reads" (action 3
    // below), as a client with manual window updates does: only then can the
    // runtime's frames overrun kubelet's window without the ledger.
    const int64_t threshold = seed % 2 ? pick(1, 65535 - 16384) : int64_t{1} << 40;
    int64_t kubelet_real = 65535;  // kubelet's own count of its window
    int64_t unacked = 0;
    int64_t runtime_view = 65535;
    std::deque<int64_t> held;  // the runtime's frames the relay has not forwarded
    int64_t runtime_to_send = pick(0, 400000), own_to_send = pick(0, 200000);
    uint32_t own_stream = 1;
    ledger.openOwn(own_stream);
    bool overrun = false;
    auto kubeletCredits = [&] {
      runtime_view += ledger.forwardedIncrement(static_cast<uint32_t>(unacked));
      kubelet_real += unacked;
      unacked = 0;
    };
    auto kubeletReceives = [&](int64_t n) {
      kubelet_real -= n;
      if (kubelet_real < 0) overrun = true;
      unacked += n;
      if (unacked >= threshold) kubeletCredits();
    };
    auto forwardHeld = [&] {
      while (!held.empty() && ledger.mayForward(static_cast<uint32_t>(held.front()))) {
        const int64_t n = held.front();
        held.pop_front();
        ledger.onForwarded(static_cast<uint32_t>(n));
        kubeletReceives(n);
      }
    };
    for (int step = 0; step < 100000 && !overrun; ++step) {
      ASSERT_EQ(ledger.kubeletWindow(), kubelet_real) << "seed " << seed;
      // The runtime's view exceeds kubelet's window by the debt plus what
      // is on its way (held by the relay).
      ASSERT_EQ(runtime_view + std::accumulate(held.begin(), held.end(), int64_t{0}),
                kubelet_real + ledger.debt())
          << "seed " << seed;
      const bool runtime_can = runtime_to_send > 0 && runtime_view > 0;
      const int64_t room = ledger.ownRoom(own_stream);
      const bool own_can = own_to_send > 0 && room > 0;
      const bool relay_can =
          !held.empty() && ledger.mayForward(static_cast<uint32_t>(held.front()));
      if (!runtime_can && !own_can && !relay_can && unacked == 0) break;
      const int64_t what = pick(0, 3);
      if (what == 0 && runtime_can) {
        const int64_t n = std::min({runtime_to_send, runtime_view, pick(1, 16384)});
        runtime_view -= n;
        runtime_to_send -= n;
        held.push_back(n);
      } else if (what == 1 && own_can) {
        const int64_t n = std::min({own_to_send, room, pick(1, 16384)});
        ledger.onOwnSent(own_stream, static_cast<uint32_t>(n));
        own_to_send -= n;
        kubeletReceives(n);
        if (pick(0, 3) == 0) {  // a new stream of the relay's own
          ledger.closeOwn(own_stream);
          own_stream += 2;
          ledger.openOwn(own_stream);
        } else {
          ledger.onKubeletStreamUpdate(own_stream, static_cast<uint32_t>(n));
        }
      } else if (what == 2) {
        forwardHeld();
      } else if (what == 3 && unacked > 0) {
        kubeletCredits();
      }
    }
    EXPECT_FALSE(overrun) << "kubelet's window overrun, seed " << seed;
    EXPECT_EQ(runtime_to_send, 0) << "the runtime stalled, seed " << seed;
    EXPECT_EQ(own_to_send, 0) << "the relay's own replies stalled, seed " << seed;
    EXPECT_TRUE(held.empty()) << "frames left held, seed " << seed;
  }
}

}  // namespace
}  // namespace crihook::relay
