#include "base/grpc_channel.h"

#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/grpc_wire.h"
#include "base/mutex.h"
#include "base/quote.h"
#include "base/text.h"
#include "base/thread_name.h"
#include "base/unix_listener.h"

namespace crihook {
namespace {

using Clock = std::chrono::steady_clock;

// The window opened for one reply, so a reply of a few MiB (ListPodSandbox
// on a full node) is not held up by a WINDOW_UPDATE every 64 KiB.
constexpr int32_t kStreamWindowBytes = 1 << 20;
constexpr size_t kReadChunkBytes = 16 << 10;
// A connect that finds the server's backlog full is tried again after this.
constexpr auto kConnectRetry = std::chrono::milliseconds(10);

int msUntil(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// One HTTP/2 connection and the one call on it, on the caller's thread.
class Connection {
 public:
  explicit Connection(size_t max_reply_bytes) : max_reply_bytes_(max_reply_bytes) {}
  ~Connection() {
    if (session_ != nullptr) nghttp2_session_del(session_);
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  absl::Status connect(const std::string& path, Clock::time_point deadline);
  absl::StatusOr<std::string> call(std::string_view method, std::string_view request,
                                   Clock::time_point deadline);
  // True when the last call ended cleanly and nothing of the server's waits
  // unread: the connection may take the next call.
  bool reusable() const {
    return closed_ && reset_code_ == NGHTTP2_NO_ERROR && too_big_.ok() && !goaway_ && !broken_;
  }
  // True when the server sent nothing and did not hang up since the last call.
  bool quiet() const {
    char b;
    return ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
           (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  int fd() const { return fd_; }
  // True when the last call failed before any of it reached the server: not
  // a byte of it was written, or the server refused its stream (REFUSED_STREAM,
  // or a GOAWAY below it). Such a call may be made again on a new connection.
  bool neverReached() const {
    return delivered_ == 0 || (closed_ && reset_code_ == NGHTTP2_REFUSED_STREAM);
  }

 private:
  static absl::Status unavailable(std::string_view what, int error) {
    if (error == EPIPE || error == ECONNRESET) {
      return absl::UnavailableError(cat("the server closed the connection before its reply (", what,
                                        ": ", strerror(error), ")"));
    }
    return absl::UnavailableError(cat(what, ": ", strerror(error)));
  }
  absl::Status flush(Clock::time_point deadline);
  absl::Status readSome(Clock::time_point deadline);
  // Whether nghttp2 has ended the session (a protocol error by the server,
  // after the GOAWAY nghttp2 sends for it, or the server's own GOAWAY with
  // nothing left to read): nothing more will arrive on it.
  bool sessionOver() const {
    return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
  }
  absl::StatusOr<std::string> reply() const;

  static int onError(nghttp2_session*, int, const char* msg, size_t len, void* user) {
    auto* self = static_cast<Connection*>(user);
    if (self->session_error_.empty()) self->session_error_.assign(msg, len);
    return 0;
  }
  // nghttp2 ends a session the server broke with a GOAWAY of its own, whose
  // error code and debug text say why.
  static int onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<Connection*>(user);
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR &&
        self->session_error_.empty()) {
      self->session_error_ =
          cat(nghttp2_http2_strerror(frame->goaway.error_code), ": ",
              std::string_view(reinterpret_cast<const char*>(frame->goaway.opaque_data),
                               frame->goaway.opaque_data_len));
    }
    return 0;
  }

  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    auto* self = static_cast<Connection*>(user);
    if (frame->hd.stream_id != self->stream_id_) return 0;
    // A reply's headers and trailers together; a few hundred bytes from a
    // sound server.
    self->header_bytes_ += namelen + valuelen + grpcwire::kHeaderFieldOverhead;
    if (self->header_bytes_ > grpcwire::kMaxHeaderListBytes) {
      self->too_big_ = absl::ResourceExhaustedError(
          cat("reply header fields above ", grpcwire::kMaxHeaderListBytes, " bytes"));
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // resets the stream
    }
    // The reply's first block comes as RESPONSE, its trailers as HEADERS.
    auto& fields = frame->headers.cat == NGHTTP2_HCAT_HEADERS ? self->trailers_ : self->headers_;
    fields.emplace_back(std::string(reinterpret_cast<const char*>(name), namelen),
                        std::string(reinterpret_cast<const char*>(value), valuelen));
    return 0;
  }
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<Connection*>(user);
    if (frame->hd.type == NGHTTP2_GOAWAY) self->goaway_ = true;
    return 0;
  }
  static int onData(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                    size_t len, void* user) {
    auto* self = static_cast<Connection*>(user);
    if (stream_id != self->stream_id_) return 0;
    if (!self->too_big_.ok()) return 0;
    if (self->body_.size() + len > self->max_reply_bytes_ + grpcwire::kFrameHeaderBytes) {
      self->too_big_ =
          absl::ResourceExhaustedError(cat("reply larger than ", self->max_reply_bytes_, " bytes"));
      // A data callback's error codes other than fatal ones are ignored by
      // nghttp2: the stream is reset here, and the call ends at once.
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
      return 0;
    }
    self->body_.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user) {
    auto* self = static_cast<Connection*>(user);
    if (stream_id != self->stream_id_) return 0;
    self->closed_ = true;
    self->reset_code_ = error_code;
    return 0;
  }
  static ssize_t readRequest(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                             uint32_t* flags, nghttp2_data_source*, void* user) {
    auto* self = static_cast<Connection*>(user);
    const size_t n = std::min(length, self->request_.size() - self->sent_);
    std::memcpy(buf, self->request_.data() + self->sent_, n);
    self->sent_ += n;
    if (self->sent_ == self->request_.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  const size_t max_reply_bytes_;
  int fd_ = -1;
  nghttp2_session* session_ = nullptr;
  bool goaway_ = false;
  bool broken_ = false;        // a call failed on the connection: it is not used again
  bool peer_gone_ = false;     // a send found the server's end closed: only reading is left
  std::string session_error_;  // nghttp2's reason, when it ended the session
  size_t delivered_ = 0;       // bytes of this call written to the socket
  int32_t stream_id_ = -1;
  std::string request_;  // framed
  size_t sent_ = 0;
  std::vector<std::pair<std::string, std::string>> headers_, trailers_;
  size_t header_bytes_ = 0;
  std::string body_;
  bool closed_ = false;
  uint32_t reset_code_ = 0;
  absl::Status too_big_;
};

absl::Status Connection::connect(const std::string& path, Clock::time_point deadline) {
  sockaddr_un addr{};
  if (!unixSocketAddress(path, addr)) {
    return absl::InvalidArgumentError(cat("socket path ", quote(path), " is too long"));
  }
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return absl::ResourceExhaustedError(cat("socket: ", strerror(errno)));
  // A Unix socket connects at once or not at all; EAGAIN is a full backlog.
  while (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return unavailable("connect", errno);
    if (msUntil(deadline) == 0) {
      return absl::DeadlineExceededError(
          "connect: the server's backlog stayed full until the deadline");
    }
    std::this_thread::sleep_for(kConnectRetry);
  }

  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return absl::ResourceExhaustedError("nghttp2");
  nghttp2_session_callbacks_set_on_header_callback(cbs, &Connection::onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Connection::onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &Connection::onData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Connection::onStreamClose);
  nghttp2_session_callbacks_set_error_callback2(cbs, &Connection::onError);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &Connection::onFrameSend);
  const int rv = nghttp2_session_client_new(&session_, cbs, this);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) return absl::ResourceExhaustedError(cat("nghttp2: ", nghttp2_strerror(rv)));
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindowBytes},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, grpcwire::kMaxHeaderListBytes},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kStreamWindowBytes);
  return absl::OkStatus();
}

absl::Status Connection::flush(Clock::time_point deadline) {
  // A server that closed its end may still have sent the whole reply: what
  // crihookd owes it (a SETTINGS ack, a WINDOW_UPDATE) is dropped, and the
  // reply is read to its end.
  if (peer_gone_) return absl::OkStatus();
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) return absl::InternalError(cat("nghttp2: ", nghttp2_strerror(static_cast<int>(n))));
    if (n == 0) return absl::OkStatus();
    // mem_send's bytes stay valid only until its next call: all of them go now.
    size_t off = 0;
    while (off < static_cast<size_t>(n)) {
      const ssize_t w = ::send(fd_, data + off, static_cast<size_t>(n) - off, MSG_NOSIGNAL);
      if (w > 0) {
        off += static_cast<size_t>(w);
        delivered_ += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        const int r = ::poll(&p, 1, msUntil(deadline));
        if (r == 0) return absl::DeadlineExceededError("the request was not sent by the deadline");
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        peer_gone_ = true;
        return absl::OkStatus();
      }
      return unavailable("send", errno);
    }
  }
}

absl::Status Connection::readSome(Clock::time_point deadline) {
  // Checked before every read, not only when the socket is silent: a server
  // that keeps sending (empty frames, junk) never lets poll time out.
  if (msUntil(deadline) == 0) return absl::DeadlineExceededError("no reply by the deadline");
  pollfd p{fd_, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, msUntil(deadline));
  } while (r < 0 && errno == EINTR);
  if (r == 0) return absl::DeadlineExceededError("no reply by the deadline");
  uint8_t buf[kReadChunkBytes];
  ssize_t n;
  do {
    n = ::recv(fd_, buf, sizeof buf, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return absl::OkStatus();
  if (n < 0) return unavailable("receive", errno);
  if (n == 0) return absl::UnavailableError("the server closed the connection before its reply");
  const ssize_t used = nghttp2_session_mem_recv(session_, buf, static_cast<size_t>(n));
  if (used < 0) {
    return absl::InternalError(
        cat("the server broke HTTP/2 (", nghttp2_strerror(static_cast<int>(used)), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Connection::call(std::string_view method, std::string_view request,
                                             Clock::time_point deadline) {
  broken_ = true;  // until the call ends cleanly
  request_ = grpcwire::frame(request);
  sent_ = 0;
  headers_.clear();
  trailers_.clear();
  header_bytes_ = 0;
  body_.clear();
  closed_ = false;
  reset_code_ = NGHTTP2_NO_ERROR;
  too_big_ = absl::OkStatus();
  delivered_ = 0;
  std::string timeout;
  if (deadline != Clock::time_point::max()) {
    timeout = grpcwire::formatTimeout(std::max(deadline - Clock::now(), Clock::duration(1)));
  }
  auto nv = [](std::string_view name, std::string_view value) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                      value.size(), NGHTTP2_NV_FLAG_NONE};
  };
  std::vector<nghttp2_nv> fields = {
      nv(":method", "POST"),
      nv(":scheme", "http"),
      nv(":path", method),            // nghttp2 copies the fields it is given
      nv(":authority", "localhost"),  // what gRPC clients send for a Unix socket
      nv("content-type", "application/grpc"),
      nv("te", "trailers"),
      nv("user-agent", "crihook"),
  };
  if (!timeout.empty()) fields.push_back(nv("grpc-timeout", timeout));
  nghttp2_data_provider body{};
  body.read_callback = &Connection::readRequest;
  stream_id_ =
      nghttp2_submit_request(session_, nullptr, fields.data(), fields.size(), &body, nullptr);
  if (stream_id_ < 0) {
    return absl::InternalError(cat("nghttp2: ", nghttp2_strerror(stream_id_)));
  }
  while (!closed_) {
    if (absl::Status s = flush(deadline); !s.ok()) return s;
    if (closed_) break;
    if (!too_big_.ok()) return too_big_;  // the stream is reset; nothing more is wanted
    if (sessionOver()) {
      if (!session_error_.empty()) {
        return absl::InternalError(cat("the server broke HTTP/2: ", quote(session_error_, 200)));
      }
      return absl::UnavailableError("the server went away (GOAWAY) before its reply");
    }
    if (absl::Status s = readSome(deadline); !s.ok()) return s;
  }
  // What closing the stream queued (a WINDOW_UPDATE, a SETTINGS ack) goes
  // now, so an idle connection owes the server nothing. The reply is whole
  // whatever becomes of this: a connection that cannot take it is closed.
  broken_ = !flush(deadline).ok() || peer_gone_;
  return reply();
}

absl::StatusOr<std::string> Connection::reply() const {
  auto find = [](const auto& fields, std::string_view name) -> const std::string* {
    for (const auto& [n, v] : fields) {
      if (n == name) return &v;
    }
    return nullptr;
  };
  if (!too_big_.ok()) return too_big_;
  const std::string* grpc_status = find(trailers_, "grpc-status");
  const std::string* grpc_message = find(trailers_, "grpc-message");
  if (grpc_status == nullptr && trailers_.empty()) {  // trailers-only
    grpc_status = find(headers_, "grpc-status");
    grpc_message = find(headers_, "grpc-message");
  }
  if (grpc_status == nullptr && reset_code_ != NGHTTP2_NO_ERROR) {
    return absl::Status(
        grpcwire::codeOfReset(reset_code_),
        cat("the server reset the stream (", nghttp2_http2_strerror(reset_code_), ")"));
  }
  const std::string* http_status = find(headers_, ":status");
  if (http_status == nullptr || *http_status != "200") {
    const int code = http_status ? std::atoi(http_status->c_str()) : 0;
    return absl::Status(grpcwire::codeOfHttpStatus(code),
                        cat("HTTP status ", http_status ? quote(*http_status) : "missing"));
  }
  const std::string* type = find(headers_, "content-type");
  if (type == nullptr || !type->starts_with("application/grpc")) {
    return absl::UnknownError(
        cat("content-type ", type ? quote(*type) : "missing", " is not gRPC"));
  }
  absl::Status status = grpcwire::statusOfFields(grpc_status, grpc_message);
  if (!status.ok()) return status;
  if (!body_.empty() && body_[0] != 0) {
    // No grpc-accept-encoding was sent: a conforming server never compresses.
    return absl::InternalError("the reply is compressed, which crihook did not offer");
  }
  auto message = grpcwire::singleMessage(body_);
  if (!message.ok()) {
    return absl::InternalError(cat("reply: ", sv(message.status().message())));
  }
  return std::string(*message);
}

// The idle connections of every GrpcChannel of the process, watched by one
// thread, started with the first connection parked: a connection whose server
// sends anything (GOAWAY, a PING) or hangs up is closed at once, and one idle
// past its timeout is closed then. Never destroyed: its thread may still run
// during static destruction. One mutex guards the parked connections and the
// watcher's descriptors; a connection is closed (destroyed) outside it.
class IdleConnections {
 public:
  static IdleConnections& instance() {
    static IdleConnections* const it = new IdleConnections();
    return *it;
  }

  void park(const void* owner, std::unique_ptr<Connection> c, size_t max_per_owner,
            Clock::duration idle_timeout) {
    int wake_fd = -1;
    {
      MutexLock lock(mu_);
      size_t mine = 0;
      for (const auto& [fd, p] : parked_) mine += p.owner == owner;
      if (mine >= max_per_owner || !start()) return;  // `c` is closed
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = c->fd();
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd(), &ev) != 0) return;
      const int fd = c->fd();
      parked_[fd] = Parked{owner, std::move(c), Clock::now() + idle_timeout};
      wake_fd = wake_fd_;
    }
    wake(wake_fd);  // the thread's wait may have to end sooner
  }

  // One of `owner`'s idle connections that the server has not spoken on, or null.
  std::unique_ptr<Connection> take(const void* owner) {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        MutexLock lock(mu_);
        auto it = std::find_if(parked_.begin(), parked_.end(),
                               [owner](const auto& e) { return e.second.owner == owner; });
        if (it == parked_.end()) return nullptr;
        c = unpark(it);
      }
      if (c->quiet()) return c;
    }
  }

  // Closes all of `owner`'s idle connections.
  void drop(const void* owner) {
    std::vector<std::unique_ptr<Connection>> gone;  // closed outside the lock
    MutexLock lock(mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto next = std::next(it);
      if (it->second.owner == owner) gone.push_back(unpark(it));
      it = next;
    }
  }

 private:
  struct Parked {
    const void* owner;
    std::unique_ptr<Connection> connection;
    Clock::time_point expires;
  };

  IdleConnections() = default;

  std::unique_ptr<Connection> unpark(std::unordered_map<int, Parked>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, it->first, nullptr);
    std::unique_ptr<Connection> c = std::move(it->second.connection);
    parked_.erase(it);
    return c;
  }

  // The epoll set, the wake-up and the thread, all or none (no connection is
  // parked while any is missing: it would never be watched).
  bool start() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (started_) return true;
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake;
    bool ok = ep >= 0 && wake >= 0 && ::epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev) == 0;
    if (ok) {
      epfd_ = ep;
      wake_fd_ = wake;
      try {
        namedThread("grpc-idle", [this, ep, wake] { loop(ep, wake); }).detach();
      } catch (const std::system_error&) {
        ok = false;
      }
    }
    if (!ok) {
      if (ep >= 0) ::close(ep);
      if (wake >= 0) ::close(wake);
      epfd_ = wake_fd_ = -1;
      return false;
    }
    started_ = true;
    return true;
  }

  static void wake(int wake_fd) {
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof one);
  }

  // The watcher thread: `ep` and `wake` are epfd_ and wake_fd_, which never
  // change once it runs.
  void loop(int ep, int wake) {
    epoll_event events[16];
    for (;;) {
      int timeout = -1;
      {
        MutexLock lock(mu_);
        for (const auto& [fd, p] : parked_) {
          const int ms = msUntil(p.expires);
          if (timeout < 0 || ms < timeout) timeout = ms;
        }
      }
      const int n = ::epoll_wait(ep, events, std::size(events), timeout);
      std::vector<std::unique_ptr<Connection>> gone;  // closed outside the lock
      MutexLock lock(mu_);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == wake) {
          uint64_t count;
          (void)!::read(wake, &count, sizeof count);
          continue;
        }
        auto it = parked_.find(events[i].data.fd);
        if (it != parked_.end()) gone.push_back(unpark(it));
      }
      const auto now = Clock::now();
      for (auto it = parked_.begin(); it != parked_.end();) {
        auto next = std::next(it);
        if (it->second.expires <= now) gone.push_back(unpark(it));
        it = next;
      }
    }
  }

  Mutex mu_;
  std::unordered_map<int, Parked> parked_ ABSL_GUARDED_BY(mu_);  // by descriptor
  int epfd_ ABSL_GUARDED_BY(mu_) = -1;
  int wake_fd_ ABSL_GUARDED_BY(mu_) = -1;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

GrpcChannel::GrpcChannel(std::string socket_path, GrpcChannelOptions options)
    : path_(std::move(socket_path)), options_(options) {}

GrpcChannel::~GrpcChannel() { IdleConnections::instance().drop(this); }

absl::StatusOr<std::string> GrpcChannel::call(std::string_view method, std::string_view request,
                                              Clock::time_point deadline) const {
  std::unique_ptr<Connection> c = IdleConnections::instance().take(this);
  const bool reused = c != nullptr;
  auto fresh = [&]() -> absl::Status {
    c = std::make_unique<Connection>(options_.max_reply_bytes);
    return c->connect(path_, deadline);
  };
  if (!reused) {
    if (absl::Status s = fresh(); !s.ok()) return s;
  }
  auto reply = c->call(method, request, deadline);
  // An idle connection the server was closing as the call went out: the call
  // never reached it, and goes once more on a connection of its own (as the
  // gRPC library retries a refused stream).
  if (reused && reply.status().code() == absl::StatusCode::kUnavailable && c->neverReached()) {
    c.reset();  // closed first: a server may serve one connection at a time
    if (absl::Status s = fresh(); !s.ok()) return s;
    reply = c->call(method, request, deadline);
  }
  if (c->reusable() && options_.max_idle_connections > 0) {
    IdleConnections::instance().park(this, std::move(c), options_.max_idle_connections,
                                     options_.idle_timeout);
  }
  return reply;
}

}  // namespace crihook
