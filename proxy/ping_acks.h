#pragma once

// kubelet's PINGs are crihookd's to answer, not the runtime's (docs/
// transparent-relay.md): grpc-go, kubelet's gRPC, sends one after most
// replies it reads (its bandwidth estimator), and a grpc-go runtime that saw
// PINGs after replies it did not send itself (crihookd's own answers) would
// end the connection (its "too_many_pings" strikes). The policy of when the
// ACKs go:
//
// - an ACK waits at most kPingAckDelay for other bytes to kubelet to go out
//   with, and only while such bytes are expected (a call on the connection
//   not yet answered): acked at once, each PING costs a write here and a
//   wake-up of its sender, while a call answered within the delay carries
//   the ACK in its reply's write, and a slower one lets it go alone when the
//   delay ends; with no reply expected it goes at once;
// - past kMaxOwedPingAcks owed (a peer that sends PINGs faster than replies
//   come) they go at once;
// - past kMaxUnreadPingAcks written while kubelet has not read what was sent
//   before them (it does not read, or the runtime stopped inside a frame and
//   holds crihookd's frames back), the connection ends rather than the ACKs
//   piling up, as nghttp2 (1,000 queued ACKs) and grpc-go do.
//
// Plain bookkeeping; the connection (Transparent) keeps the delay's timer.
// On the connection's loop thread; not thread-safe.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace crihook::relay {

inline constexpr std::chrono::milliseconds kPingAckDelay{2};
inline constexpr size_t kMaxOwedPingAcks = 16;
inline constexpr size_t kMaxUnreadPingAcks = 1000;

class PingAcks {
 public:
  // A PING came with these 8 bytes of opaque data: its ACK is owed.
  void owe(std::string_view opaque);
  bool owed() const { return !owed_.empty(); }
  // After a whole read of kubelet's (so that a request that came with the
  // PING counts): whether the owed ACKs go now rather than wait, at most
  // kPingAckDelay, for a reply to ride with.
  bool dueNow(bool reply_expected) const;
  // The owed ACKs as PING ACK frames, none owed after.
  // RESOURCE_EXHAUSTED (the connection is to end) when they would make more
  // than kMaxUnreadPingAcks since kubelet last read everything.
  absl::StatusOr<std::string> take();
  // kubelet has read everything written to it, the ACKs with it.
  void onKubeletRead() { unread_ = 0; }

 private:
  std::string owed_;   // 8 bytes of opaque data each
  size_t unread_ = 0;  // ACKs written since kubelet last read all
};

}  // namespace crihook::relay
