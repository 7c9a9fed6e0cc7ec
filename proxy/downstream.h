#pragma once

// The kubelet side of a relayed connection: an HTTP/2 server connection, the
// owner of its calls and of the upstream connection(s) they are forwarded on
// (an UpstreamSet, upstream_set.h, whose Upstreams report here:
// UpstreamOwner, upstream_owner.h).
// Pass-through calls are relayed frame by frame; intercepted ones are
// buffered whole and run through the Interceptor's stages around the
// forward (intercept_stage.h). Runs on its EventLoop; not thread-safe
// (Connection, relay.h, posts to it from other threads).
//
// The member functions are defined by seam: downstream.cc (session, request
// path), downstream_response.cc (response path), downstream_limits.cc
// (timeouts and buffer budgets).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "proxy/call.h"
#include "proxy/call_budget.h"
#include "proxy/h2_session.h"
#include "proxy/relay.h"
#include "proxy/upstream.h"
#include "proxy/upstream_owner.h"
#include "proxy/upstream_set.h"

namespace crihook::relay {

class Downstream : public H2Endpoint, public UpstreamOwner {
 public:
  // `fd`: the accepted socket, non-blocking, now the connection's. `loop`
  // and `ctx` outlive the connection.
  Downstream(EventLoop& loop, int fd, RelayContext& ctx)
      : H2Endpoint(loop, fd), ctx_(ctx), upstreams_(*this, loop, ctx) {
    ctx_.open_connections.fetch_add(1);
    ctx_.terminating_connections.fetch_add(1);
  }
  ~Downstream() override {
    dropAllCalls();
    ctx_.terminating_connections.fetch_sub(1);
    ctx_.open_connections.fetch_sub(1);
  }

  // Sends the server preface, starts reading and the timeout tick.
  void start();
  // GOAWAY to the client (no new streams); in-flight calls finish.
  void shutdown();
  // Closes the connection and its upstreams now.
  void closeAll(const std::string& why);
  // Serving in the transparent relay's stead, because the runtime could not
  // be reached when the client connected (relay.cc): the first reply from
  // the runtime sends the client GOAWAY, so that its next connection is the
  // transparent relay's. Before start().
  void reconnectOnceRuntimeAnswers() { reconnect_when_answered_ = true; }

  // UpstreamOwner: the upstreams' events, delegated here because calls live
  // here (upstream_owner.h has the contracts). Final, so that the
  // connection's own calls of them are not virtual.
  Call* find(int32_t id) final {
    auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second.get();
  }
  void onResponseHeaders(Call& call) final;
  void onResponseData(Call& call, const uint8_t* data, size_t len) final;
  void onResponseEnd(Call& call) final;
  void onUpstreamStreamClosed(Call& call, uint32_t error_code) final;
  void onUpstreamLost(Upstream& up, const std::string& why) final { upstreams_.onLost(up, why); }
  void onUpstreamGoaway(Upstream& up) final { upstreams_.onGoaway(up); }
  void consumeRequestBytes(Call& call, size_t n) final;
  // The caps: the per-reply one and the connection's.
  bool chargeReplyHeader(Call& call, size_t bytes) final;
  void answer(Call& call, const absl::Status& status) final;
  void scheduleFlush() final { H2Endpoint::scheduleFlush(); }
  // This connection leads its upstreams' flush group.
  H2Endpoint* flushGroup() final { return this; }
  bool closed() const final { return H2Endpoint::closed(); }
  std::shared_ptr<UpstreamOwner> sharedOwner() final {
    return std::static_pointer_cast<Downstream>(shared_from_this());
  }

  // The runtime may send as many more bytes as kubelet has now taken; also
  // after the runtime's stream closed (the connection window still counts them).
  void returnWindow(Call& call, size_t n);

 private:
  friend struct SessionTrampolines<Downstream>;

  void onClosed(const std::string& why) override;
  // A call whose reply has not begun (a stream whose response has begun,
  // a watch that may stay quiet for long, does not count).
  bool replyExpected() const override;
  void setupSession();

  // nghttp2 callbacks (SessionTrampolines).
  int onBeginHeaders(const nghttp2_frame& frame);
  int onHeader(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int onFrameRecv(const nghttp2_frame& frame);
  int onDataChunk(int32_t stream_id, const uint8_t* data, size_t len);
  int onStreamClose(int32_t stream_id, uint32_t error_code);
  int onFrameSend(const nghttp2_frame& frame);
  // The response body of stream `stream_id`, then its trailers.
  ssize_t readBody(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags);

  // Request path.
  void onRequestHeaders(Call& call);
  void onRequestData(Call& call, const uint8_t* data, size_t len);
  void onRequestEnd(Call& call);

  // Intercepted path: the Interceptor's stages, their completions posted
  // back to this connection's executor.
  void startPreStage(Call& call);
  void onPreStageDone(int32_t id, absl::Status status);
  void startPostStage(Call& call);
  void onPostStageDone(int32_t id);

  // Refuses a request whose headers grpc-go's server would refuse, the way it
  // refuses it.
  void refuse(Call& call, const RequestRefusal& refusal);

  // Response path.
  void submitResponse(Call& call);
  // After crihookd answered a call whose request kubelet is still sending:
  // RST_STREAM NO_ERROR, as grpc-go's server ends such a stream.
  void endRequestEarly(Call& call);
  void resetBoth(Call& call, uint32_t down_error);
  void cancelUpstream(Call& call);
  // Metrics of a call that ends.
  void recordCall(Call& call);
  void eraseCall(int32_t id);
  void dropAllCalls();

  // Limits. The budgets count what is held now: charged as bytes arrive,
  // released with the call.
  absl::Status chargeBuffer(Call& call, size_t bytes, std::string_view what);
  void releaseLimits(Call& call);
  void armTick();
  void onTick();

  RelayContext& ctx_;
  std::unordered_map<int32_t, std::unique_ptr<Call>> calls_;
  UpstreamSet upstreams_;  // what calls_ are forwarded on
  bool shutting_down_ = false;

  CallBudget budget_;  // what calls_ hold against the limits
  Clock::time_point accepted_ = Clock::now();
  Clock::time_point idle_since_ = Clock::now();  // since calls_ last became empty
  bool settings_seen_ = false;                   // the client's preface and SETTINGS arrived
  bool idle_goaway_ = false;
  bool reconnect_when_answered_ = false;
  uint64_t tick_ = 0;  // the limits' timer (EventLoop::runAfter); 0: none
};

}  // namespace crihook::relay
