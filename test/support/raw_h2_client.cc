#include "test/support/raw_h2_client.h"

#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace crihook::testing {

namespace {

nghttp2_session* session(void* p) { return static_cast<nghttp2_session*>(p); }

// NO_COPY: nghttp2 lower-cases the names it copies, and a test must be able
// to send an upper-case one; the caller keeps `headers` alive until sent.
std::vector<nghttp2_nv> toNv(const RawHeaders& headers) {
  std::vector<nghttp2_nv> nv;
  for (const auto& [name, value] : headers) {
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                  value.size(), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE});
  }
  return nv;
}

}  // namespace

struct RawH2ClientCallbacks {
  static int onHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    auto* c = static_cast<RawH2Client*>(user);
    auto it = c->streams_.find(f->hd.stream_id);
    if (it == c->streams_.end()) return 0;
    RawH2Result& r = it->second.result;
    const std::string n(reinterpret_cast<const char*>(name), namelen);
    const std::string v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":status") r.http_status = v;
    if (n == "grpc-status") r.grpc_status = std::atoi(v.c_str());
    if (n == "grpc-message") r.grpc_message = v;
    return 0;
  }
  static int onData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
                    void* user) {
    auto* c = static_cast<RawH2Client*>(user);
    auto it = c->streams_.find(id);
    if (it != c->streams_.end())
      it->second.result.body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int onClose(nghttp2_session*, int32_t id, uint32_t code, void* user) {
    auto* c = static_cast<RawH2Client*>(user);
    auto it = c->streams_.find(id);
    if (it == c->streams_.end()) return 0;
    it->second.result.closed = true;
    if (code != NGHTTP2_NO_ERROR) {
      it->second.result.reset = true;
      it->second.result.reset_code = code;
    }
    return 0;
  }
  // Flow control kept strictly, by what was granted and received (nghttp2
  // itself lets a peer run past a window it is about to replenish).
  static int onFrameSent(nghttp2_session*, const nghttp2_frame* f, void* user) {
    auto* c = static_cast<RawH2Client*>(user);
    if (f->hd.type == NGHTTP2_WINDOW_UPDATE) {
      c->granted_[f->hd.stream_id] += f->window_update.window_size_increment;
    }
    return 0;
  }
  static int onFrame(nghttp2_session*, const nghttp2_frame* f, void* user) {
    auto* c = static_cast<RawH2Client*>(user);
    if (f->hd.type == NGHTTP2_DATA) {
      for (int32_t id : {0, f->hd.stream_id}) {
        c->received_[id] += f->hd.length;
        if (c->received_[id] > 65535 + c->granted_[id]) c->window_overrun_ = true;
      }
    }
    if (f->hd.type == NGHTTP2_GOAWAY) c->goaway_ = true;
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) {
      uint64_t opaque = 0;
      std::memcpy(&opaque, f->ping.opaque_data, sizeof(opaque));
      c->ping_acks_.push_back({opaque, std::chrono::steady_clock::now(), c->reads_});
    }
    if (f->hd.type == NGHTTP2_HEADERS) {
      auto it = c->streams_.find(f->hd.stream_id);
      if (it != c->streams_.end() && it->second.result.headers_read == 0)
        it->second.result.headers_read = c->reads_;
    }
    if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK)) {
      for (size_t i = 0; i < f->settings.niv; ++i) {
        if (f->settings.iv[i].settings_id == NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE)
          c->peer_max_header_list_ = f->settings.iv[i].value;
      }
    }
    // A reset a server sends for a stream it already answered is still a
    // reset the test wants to see.
    if (f->hd.type == NGHTTP2_RST_STREAM) {
      auto it = c->streams_.find(f->hd.stream_id);
      if (it != c->streams_.end() && f->rst_stream.error_code != NGHTTP2_NO_ERROR) {
        it->second.result.reset = true;
        it->second.result.reset_code = f->rst_stream.error_code;
      }
    }
    return 0;
  }
  static ssize_t readBody(nghttp2_session* h2, int32_t id, uint8_t* buf, size_t len,
                          uint32_t* flags, nghttp2_data_source*, void* user) {
    auto* c = static_cast<RawH2Client*>(user);
    RawH2Client::Stream& s = c->streams_[id];
    const size_t n = std::min(len, s.body_out.size() - s.sent);
    std::memcpy(buf, s.body_out.data() + s.sent, n);
    s.sent += n;
    if (s.keep_open) return n > 0 ? static_cast<ssize_t>(n) : ssize_t{NGHTTP2_ERR_DEFERRED};
    if (s.sent == s.body_out.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (!s.trailers.empty()) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        std::vector<nghttp2_nv> nv = toNv(s.trailers);
        nghttp2_submit_trailer(h2, id, nv.data(), nv.size());
      }
    }
    return static_cast<ssize_t>(n);
  }
};

RawH2Client::RawH2Client(const std::string& socket_path) {
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd_);
    throw std::runtime_error("raw client: cannot connect to " + socket_path);
  }
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, RawH2ClientCallbacks::onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, RawH2ClientCallbacks::onData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, RawH2ClientCallbacks::onClose);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, RawH2ClientCallbacks::onFrame);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, RawH2ClientCallbacks::onFrameSent);
  // The client must be able to send and read what a strict library would
  // refuse, so nghttp2's HTTP rules are off here.
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_http_messaging(opt, 1);
  // Oversized header blocks are what some tests send on purpose.
  nghttp2_option_set_max_send_header_block_length(opt, 16 << 20);
  nghttp2_session* h2 = nullptr;
  nghttp2_session_client_new2(&h2, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  h2_ = h2;
  nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, nullptr, 0);
}

RawH2Client::~RawH2Client() {
  nghttp2_session_del(session(h2_));
  ::close(fd_);
}

RawHeaders RawH2Client::grpcHeaders(const std::string& path, const std::string& authority) {
  return {{":method", "POST"},
          {":scheme", "http"},
          {":path", path},
          {":authority", authority},
          {"content-type", "application/grpc"},
          {"user-agent", "grpc-go/1.33.3"},
          {"te", "trailers"}};
}

int32_t RawH2Client::send(const RawHeaders& headers, const std::string& body,
                          const RawHeaders& trailers) {
  std::vector<nghttp2_nv> nv = toNv(sent_headers_.emplace_back(headers));
  nghttp2_data_provider provider{};
  provider.read_callback = RawH2ClientCallbacks::readBody;
  const bool has_body = !body.empty() || !trailers.empty();
  const int32_t id = nghttp2_submit_request(session(h2_), nullptr, nv.data(), nv.size(),
                                            has_body ? &provider : nullptr, nullptr);
  if (id < 0) throw std::runtime_error(std::string("raw client: ") + nghttp2_strerror(id));
  Stream& s = streams_[id];
  s.body_out = body;
  s.trailers = trailers;
  return id;
}

int32_t RawH2Client::open(const RawHeaders& headers, const std::string& body) {
  std::vector<nghttp2_nv> nv = toNv(sent_headers_.emplace_back(headers));
  nghttp2_data_provider provider{};
  provider.read_callback = RawH2ClientCallbacks::readBody;
  const int32_t id =
      nghttp2_submit_request(session(h2_), nullptr, nv.data(), nv.size(), &provider, nullptr);
  if (id < 0) throw std::runtime_error(std::string("raw client: ") + nghttp2_strerror(id));
  Stream& s = streams_[id];
  s.body_out = body;
  s.keep_open = true;
  return id;
}

void RawH2Client::run(std::chrono::milliseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
    if (!pump(std::chrono::milliseconds(10))) break;
  }
}

bool RawH2Client::pump(std::chrono::milliseconds poll_for) {
  // What is queued goes out in one write, as grpc-go batches its frames
  // (a PING with the request that follows it).
  std::string batch;
  for (;;) {
    const uint8_t* out = nullptr;
    ssize_t n = nghttp2_session_mem_send(session(h2_), &out);
    if (n < 0) return false;
    if (n == 0) break;
    batch.append(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  }
  if (!sendAll(batch)) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(poll_for.count())) <= 0) return true;
  uint8_t buf[1 << 16];
  ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  ++reads_;
  return nghttp2_session_mem_recv(session(h2_), buf, static_cast<size_t>(n)) >= 0;
}

RawH2Result RawH2Client::wait(int32_t id, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!streams_[id].result.closed && std::chrono::steady_clock::now() < until) {
    if (!pump(std::chrono::milliseconds(20))) break;
  }
  // Frames right behind the close (a RST_STREAM after a trailers-only
  // answer) belong to the result too.
  for (int i = 0; i < 3 && !eof_; ++i) pump(std::chrono::milliseconds(10));
  return streams_[id].result;
}

RawH2Result RawH2Client::result(int32_t id) const {
  auto it = streams_.find(id);
  return it == streams_.end() ? RawH2Result{} : it->second.result;
}

std::chrono::steady_clock::time_point RawH2Client::ping(uint64_t opaque) {
  uint8_t data[8];
  std::memcpy(data, &opaque, sizeof(data));
  if (int rv = nghttp2_submit_ping(session(h2_), NGHTTP2_FLAG_NONE, data); rv != 0)
    throw std::runtime_error(std::string("raw client: ") + nghttp2_strerror(rv));
  return std::chrono::steady_clock::now();
}

bool RawH2Client::pingFlood(size_t count) {
  // Written by hand: nghttp2 would send them one frame at a time.
  std::string frames;
  for (size_t i = 0; i < count; ++i) {
    const char frame[17] = {0, 0, 8, 6, 0, 0, 0, 0, 0, static_cast<char>(i), 0, 0, 0, 0, 0, 0, 0};
    frames.append(frame, sizeof(frame));
  }
  return sendAll(frames);
}

bool RawH2Client::sendAll(const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

RawH2Result RawH2Client::call(const RawHeaders& headers, const std::string& body,
                              const RawHeaders& trailers) {
  return wait(send(headers, body, trailers));
}

std::string grpcFrame(const std::string& message) {
  const auto n = static_cast<uint32_t>(message.size());
  std::string out{'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + message;
}

}  // namespace crihook::testing
