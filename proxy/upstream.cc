#include "proxy/upstream.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/text.h"
#include "base/unix_listener.h"

namespace crihook::relay {

namespace {

// How often a backend whose listen backlog is full (EAGAIN) is tried again.
constexpr std::chrono::milliseconds kConnectRetry(10);

}  // namespace

Upstream::Upstream(EventLoop& loop, UpstreamOwner* owner) : H2Endpoint(loop, -1), owner_(owner) {}

void Upstream::connect(const std::string& path, std::chrono::milliseconds timeout,
                       std::function<void(const std::string&)> done) {
  connect_deadline_ = EventLoop::Clock::now() + timeout;
  sockaddr_un addr;
  if (!unixSocketAddress(path, addr)) {
    loop_.post([done] { done("the socket path is longer than a Unix socket path may be"); });
    return;
  }
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    loop_.post([done, why = std::string(std::strerror(errno))] { done(why); });
    return;
  }
  tryConnect(addr, timeout, std::move(done));
}

void Upstream::tryConnect(const sockaddr_un& addr, std::chrono::milliseconds timeout,
                          std::function<void(const std::string&)> done) {
  if (closed()) {
    loop_.post([done] { done("closed while connecting"); });
    return;
  }
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    setupSession();
    startReading();
    // Later, as any completion: the caller is still in forward().
    auto self = shared_from_this();
    loop_.post([self, done] { done(self->closed() ? "closed while connecting" : ""); });
    return;
  }
  const int e = errno;
  if ((e == EAGAIN || e == EINTR) && EventLoop::Clock::now() < connect_deadline_) {
    auto self = std::static_pointer_cast<Upstream>(shared_from_this());
    // A retry pending when the upstream closes reports that (above).
    loop_.runAfter(kConnectRetry,
                   [self, addr, timeout, done] { self->tryConnect(addr, timeout, done); });
    return;
  }
  const std::string why = e == EAGAIN || e == EINTR
                              ? cat("connect timed out after ", timeout.count(), "ms")
                              : std::string(std::strerror(e));
  loop_.post([done, why] { done(why); });
}

void Upstream::setupSession() {
  createSession(SessionTrampolines<Upstream>::callbacks(),
                {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderListBytes}});
}

bool Upstream::submit(Call& call) {
  std::vector<nghttp2_nv> nv = toNv(call.req_headers);
  nghttp2_data_provider body = SessionTrampolines<Upstream>::body();
  const bool has_body = !(call.req_end && call.req_body.empty());
  int32_t id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                      has_body ? &body : nullptr, nullptr);
  if (id < 0) return false;
  streams_[id] = call.down_id;
  call.up = std::static_pointer_cast<Upstream>(shared_from_this());
  call.up_id = id;
  call.window_up = call.up;
  call.window_up_id = id;
  scheduleFlush();
  return true;
}

std::vector<int32_t> Upstream::takeCalls() {
  std::vector<int32_t> ids;
  ids.reserve(streams_.size());
  for (const auto& [up_id, call_id] : streams_) ids.push_back(call_id);
  streams_.clear();
  return ids;
}

Call* Upstream::callFor(int32_t id) {
  if (owner_ == nullptr) return nullptr;
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : owner_->find(it->second);
}

void Upstream::afterInput() {
  // Window updates for the kubelet side may have been queued while the
  // runtime's frames were handled.
  if (owner_) owner_->scheduleFlush();
}

void Upstream::onClosed(const std::string& why) {
  if (owner_) owner_->onUpstreamLost(*this, why);
  streams_.clear();
}

int Upstream::onHeader(const nghttp2_frame& frame, std::string_view name, std::string_view value) {
  Call* call = callFor(frame.hd.stream_id);
  if (call == nullptr || frame.hd.type != NGHTTP2_HEADERS || call->resp_headers_over) return 0;
  // A runtime's reply is bounded as a request is: nothing past the caps is
  // kept, and the call fails once the block ends (onFrameRecv).
  if (!owner_->chargeReplyHeader(*call, name.size() + value.size() + kHeaderFieldOverhead)) {
    call->resp_headers_over = true;
    return 0;
  }
  Header h{std::string(name), std::string(value)};
  (call->resp_final ? call->resp_trailers : call->resp_headers).push_back(std::move(h));
  return 0;
}

int Upstream::onFrameRecv(const nghttp2_frame& frame) {
  if (frame.hd.type == NGHTTP2_GOAWAY) {
    draining_ = true;
    if (owner_) owner_->onUpstreamGoaway(*this);
    return 0;
  }
  Call* call = callFor(frame.hd.stream_id);
  if (call == nullptr) return 0;
  UpstreamOwner* owner = owner_;
  const bool end = frame.hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame.hd.type == NGHTTP2_HEADERS && call->resp_headers_over) {
    owner->answer(*call, absl::InternalError(cat("crihookd: ", call->path,
                                                 ": the runtime's reply headers pass ",
                                                 kMaxHeaderListBytes, " bytes")));
    return 0;
  }
  if (frame.hd.type == NGHTTP2_HEADERS) {
    if (!call->resp_final) {
      const std::string* status = findHeader(call->resp_headers, ":status");
      if (status && !status->empty() && (*status)[0] == '1') {  // informational: not the response
        call->resp_headers.clear();
        return 0;
      }
      call->resp_final = true;
      if (end) {
        // Trailers-only: the status is in these headers.
        call->resp_trailers_only = true;
        owner->onResponseEnd(*call);
      } else {
        owner->onResponseHeaders(*call);
      }
    } else {
      // Trailers: nghttp2 (HTTP messaging) resets a stream whose trailers
      // lack END_STREAM before this callback.
      owner->onResponseEnd(*call);
    }
  } else if (frame.hd.type == NGHTTP2_DATA && end) {
    owner->onResponseEnd(*call);
  }
  return 0;
}

int Upstream::onDataChunk(int32_t stream_id, const uint8_t* data, size_t len) {
  Call* call = callFor(stream_id);
  if (call == nullptr) {
    nghttp2_session_consume(session_, stream_id, len);
    return 0;
  }
  owner_->onResponseData(*call, data, len);
  return 0;
}

int Upstream::onStreamClose(int32_t stream_id, uint32_t error_code) {
  Call* call = callFor(stream_id);
  streams_.erase(stream_id);
  if (call != nullptr) {
    call->up.reset();
    call->up_id = 0;
    owner_->onUpstreamStreamClosed(*call, error_code);
  }
  if (draining_ && streams_.empty() && owner_) {
    // The last stream of a connection the backend is retiring.
    loop_.post([self = shared_from_this()] { self->fail("drained after GOAWAY"); });
  }
  return 0;
}

ssize_t Upstream::readBody(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags) {
  Call* call = callFor(stream_id);
  if (call == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  size_t n = call->req_body.read(buf, length);
  if (n > 0 && call->passThrough()) owner_->consumeRequestBytes(*call, n);
  if (call->req_body.empty() && call->req_end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  return n > 0 ? static_cast<ssize_t>(n) : static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED);
}

void cancelUpstreamStream(Call& call) {
  if (call.up && call.up_id != 0) {
    if (!call.up->closed()) {
      nghttp2_submit_rst_stream(call.up->session(), NGHTTP2_FLAG_NONE, call.up_id, NGHTTP2_CANCEL);
      call.up->scheduleFlush();
    }
    call.up->forget(call.up_id);
  }
  call.up.reset();
  call.up_id = 0;
}

}  // namespace crihook::relay
