#pragma once

// The corrections the transparent relay makes to end-to-end HTTP/2 flow
// control (docs/transparent-relay.md, "Flow control, kept exact"). kubelet
// and the runtime grant each other windows through the relay; the relay
// only accounts for the bytes it takes out of kubelet's requests and the
// bytes it adds towards kubelet (its own answers):
//
// - Request bytes the relay takes never reach the runtime, which therefore
//   never credits them: the relay credits kubelet for them itself
//   (creditForTaken).
// - Reply bytes the relay sends kubelet use kubelet's connection window, and
//   kubelet's later connection-level WINDOW_UPDATEs would credit the runtime
//   for them: the relay keeps that as debt and takes it out of the
//   increments it forwards (forwardedIncrement).
// - Until the debt is repaid the runtime may believe it has more window
//   than kubelet grants; the relay tracks kubelet's real window and holds
//   the runtime's DATA that would overrun it (mayForward).
//
// Plain arithmetic, no I/O; one per relayed connection, on its loop thread.

#include <cstdint>
#include <optional>
#include <unordered_map>

namespace crihook::relay {

class FlowLedger {
 public:
  // --- kubelet's receive windows (what may be sent to kubelet) ---

  // kubelet's SETTINGS_INITIAL_WINDOW_SIZE: the window of every stream the
  // relay answers, now and (by the difference) those already open. False
  // when it is over 2^31-1 (kubelet's FLOW_CONTROL_ERROR to report).
  bool onKubeletInitialWindow(uint32_t size);

  // kubelet's WINDOW_UPDATE on the connection (stream 0): the increment to
  // forward to the runtime, 0 when none is (the frame is then dropped; an
  // increment of 0 is not allowed on the wire).
  uint32_t forwardedIncrement(uint32_t increment);

  // kubelet's WINDOW_UPDATE on a stream the relay answers.
  void onKubeletStreamUpdate(uint32_t stream, uint32_t increment);

  // Whether a DATA frame of `length` bytes (padding included) from the
  // runtime fits kubelet's real connection window now; if not, it and what
  // follows it wait for kubelet's next connection WINDOW_UPDATE.
  bool mayForward(uint32_t length) const { return length <= kubelet_window_; }
  // The runtime's DATA frame of `length` bytes was forwarded to kubelet.
  void onForwarded(uint32_t length) { kubelet_window_ -= length; }
  // `length` bytes counted by onForwarded did not go to kubelet after all
  // (dropped; the relay credits the runtime for them itself).
  void onNotForwarded(uint32_t length) { kubelet_window_ += length; }

  // How many bytes of its own DATA the relay may send kubelet on `stream`
  // now (the smaller of the connection's and the stream's windows, never
  // negative).
  int64_t ownRoom(uint32_t stream) const;
  // The relay sent kubelet `length` bytes of its own DATA on `stream`.
  void onOwnSent(uint32_t stream, uint32_t length);
  // A stream the relay answers opened (before it sends on it) and ended.
  void openOwn(uint32_t stream);
  void closeOwn(uint32_t stream) { own_.erase(stream); }

  // --- the runtime's receive windows ---

  // kubelet sent `length` bytes (padding included) on a stream the relay
  // takes (intercepted, refused): the WINDOW_UPDATE increment to send
  // kubelet for the connection, and for the stream too while it is still
  // sending (`stream_open`).
  struct Credit {
    uint32_t connection = 0;
    uint32_t stream = 0;  // 0: none
  };
  static Credit creditForTaken(uint32_t length, bool stream_open) {
    return {length, stream_open ? length : 0};
  }

  // For tests and the metrics: kubelet's real connection window and what
  // the runtime is still owed to be told less.
  int64_t kubeletWindow() const { return kubelet_window_; }
  int64_t debt() const { return debt_; }

 private:
  int64_t kubelet_window_ = 65535;
  int64_t kubelet_initial_ = 65535;
  int64_t debt_ = 0;
  std::unordered_map<uint32_t, int64_t> own_;  // stream -> kubelet's window for it
};

}  // namespace crihook::relay
