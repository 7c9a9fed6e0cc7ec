#pragma once

// crihookd's own HTTP/2 client connection to the runtime (the side
// connection), carrying the calls one kubelet connection answers itself
// (its owner, an UpstreamOwner: upstream_owner.h). Runs on the owner's
// EventLoop; not thread-safe.

#include <sys/un.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/call.h"
#include "proxy/h2_session.h"
#include "proxy/upstream_owner.h"

namespace crihook::relay {

class Upstream final : public H2Endpoint {
 public:
  // `owner` outlives the upstream or detaches it first.
  Upstream(EventLoop& loop, UpstreamOwner* owner);

  // Connects to the Unix socket `path` and starts the session; `done` runs
  // later on the loop with the outcome ("" on success, else why not). A
  // backend whose backlog is full is tried again every 10 ms until
  // `timeout`.
  void connect(const std::string& path, std::chrono::milliseconds timeout,
               std::function<void(const std::string& error)> done);

  // Forwards `call` (its headers and whatever body is queued). False when the
  // session cannot take another stream.
  bool submit(Call& call);

  // The call relayed on upstream stream `id`, if it is still alive.
  Call* callFor(int32_t id);

  // The owner lets go: no more events reach it.
  void detach() { owner_ = nullptr; }
  // The backend sent GOAWAY: no new streams.
  bool draining() const { return draining_; }
  void forget(int32_t up_id) { streams_.erase(up_id); }
  // The ids (UpstreamOwner::find) of the calls still relayed here, in the
  // order of their runtime streams; forgets them all. For the owner of an
  // upstream that was lost.
  std::vector<int32_t> takeCalls();

 private:
  friend struct SessionTrampolines<Upstream>;

  void onClosed(const std::string& why) override;
  void afterInput() override;
  void setupSession();
  void tryConnect(const sockaddr_un& addr, std::chrono::milliseconds timeout,
                  std::function<void(const std::string& error)> done);

  // nghttp2 callbacks (SessionTrampolines).
  int onHeader(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int onFrameRecv(const nghttp2_frame& frame);
  int onDataChunk(int32_t stream_id, const uint8_t* data, size_t len);
  int onStreamClose(int32_t stream_id, uint32_t error_code);
  // The request body of stream `stream_id`.
  ssize_t readBody(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags);

  UpstreamOwner* owner_;
  std::map<int32_t, int32_t> streams_;  // upstream stream id -> the owner's call id
  bool draining_ = false;
  EventLoop::Clock::time_point connect_deadline_{};
};

// Cancels `call`'s runtime stream, if it has one (RST_STREAM CANCEL: the
// runtime stops working on it), and forgets it on both sides.
void cancelUpstreamStream(Call& call);

}  // namespace crihook::relay
