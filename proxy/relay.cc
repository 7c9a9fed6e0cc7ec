#include "proxy/relay.h"

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/quote.h"
#include "base/text.h"
#include "cri/lifecycle.h"
#include "proxy/grpc_wire.h"

namespace crihook {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// HTTP/2 windows. Per stream 1 MiB keeps a single 16 MiB message moving at
// memory speed while bounding what one stream can park in crihookd; the
// connection window lets 16 such streams run at once.
constexpr int32_t kStreamWindow = 1 << 20;
constexpr int32_t kConnectionWindow = 16 << 20;
constexpr uint32_t kMaxConcurrentStreams = 1024;
constexpr size_t kReadBufferBytes = 64 << 10;
constexpr size_t kWriteBatchBytes = 64 << 10;
// Decoded size of one request's header list, counted as HTTP/2 counts it
// (name + value + 32 per field) and advertised in SETTINGS_MAX_HEADER_LIST_SIZE.
// HPACK lets a 16 KiB HEADERS frame decode to ~48 MB, so the cap is what keeps
// one stream's headers small. kubelet's real request headers are well under
// 1 KiB; nghttp2's decoder ends the whole connection on any single field over
// 64 KiB (NGHTTP2_HD_MAX_NV) anyway. grpc-go's server defaults to 16 MiB.
constexpr size_t kMaxHeaderListBytes = 64 << 10;
constexpr size_t kHeaderFieldOverhead = 32;  // RFC 9113 6.5.2
// Decoded header fields held for the open streams of one connection, both
// directions (kubelet's requests and the runtime's replies). Without it the
// per-stream cap still lets one connection hold 1024 streams x 64 KiB = 64 MiB.
// 1024 streams of kubelet's headers (well under 1 KiB each) fit.
constexpr size_t kMaxConnectionHeaderBytes = 1 << 20;
// A header block is HEADERS + at most this many CONTINUATION frames, then
// nghttp2 ends the connection (its default since CVE-2024-28182, said
// here): a block of 9 x 16 KiB is far past the 64 KiB cap anyway.
constexpr size_t kMaxContinuations = 8;
// The timeouts are checked on a tick of a quarter of the shortest one, so
// each fires at most 25% late, within these bounds.
constexpr auto kMinTick = std::chrono::milliseconds(10);
constexpr auto kMaxTick = std::chrono::milliseconds(1000);

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

std::vector<nghttp2_nv> toNv(const Headers& headers) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const Header& h : headers) {
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(),
                  h.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

const std::string* findHeader(const Headers& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (h.name == name) return &h.value;
  }
  return nullptr;
}

Headers statusTrailers(const absl::Status& status) {
  Headers t;
  t.push_back({"grpc-status", std::to_string(grpcwire::statusNumber(status.code()))});
  if (!status.message().empty())
    t.push_back({"grpc-message", grpcwire::percentEncode(boundedMessage(sv(status.message())))});
  return t;
}

Headers trailersOnly(const absl::Status& status, int http_status = 200) {
  Headers h{{":status", std::to_string(http_status)}, {"content-type", "application/grpc"}};
  for (Header& t : statusTrailers(status)) h.push_back(std::move(t));
  return h;
}

// The status a reply's trailers (or trailers-only headers) carry.
absl::Status statusFrom(const Headers& trailers) {
  const std::string* code = findHeader(trailers, "grpc-status");
  if (code == nullptr) return absl::UnknownError("reply without grpc-status");
  int n = std::atoi(code->c_str());
  const std::string* message = findHeader(trailers, "grpc-message");
  return absl::Status(static_cast<absl::StatusCode>(n),
                      message ? grpcwire::percentDecode(*message) : "");
}

// How a gRPC client reads an RST_STREAM (gRPC's HTTP/2 error mapping).
absl::StatusCode codeOfReset(uint32_t error_code) {
  switch (error_code) {
    case NGHTTP2_REFUSED_STREAM:
      return absl::StatusCode::kUnavailable;
    case NGHTTP2_CANCEL:
      return absl::StatusCode::kCancelled;
    case NGHTTP2_ENHANCE_YOUR_CALM:
      return absl::StatusCode::kResourceExhausted;
    case NGHTTP2_INADEQUATE_SECURITY:
      return absl::StatusCode::kPermissionDenied;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Bytes waiting to go out on one side of a stream.
class ByteQueue {
 public:
  void append(const uint8_t* data, size_t len) {
    if (head_ > 0 && head_ == buf_.size()) {
      buf_.clear();
      head_ = 0;
    }
    buf_.append(reinterpret_cast<const char*>(data), len);
  }
  void assign(std::string bytes) {
    buf_ = std::move(bytes);
    head_ = 0;
  }
  size_t read(uint8_t* out, size_t max) {
    size_t n = std::min(max, buf_.size() - head_);
    std::memcpy(out, buf_.data() + head_, n);
    head_ += n;
    if (head_ == buf_.size()) {
      buf_.clear();
      head_ = 0;
    } else if (head_ > (1u << 20) && head_ > buf_.size() / 2) {
      buf_.erase(0, head_);
      head_ = 0;
    }
    return n;
  }
  std::string_view view() const { return std::string_view(buf_).substr(head_); }
  // Empties the queue, handing over what it held.
  std::string take() {
    buf_.erase(0, head_);
    head_ = 0;
    return std::move(buf_);
  }
  size_t size() const { return buf_.size() - head_; }
  bool empty() const { return size() == 0; }

 private:
  std::string buf_;
  size_t head_ = 0;
};

std::string shortId(const std::string& id) { return id.substr(0, 12); }

// ---------------------------------------------------------------------------
// Request header checks. nghttp2's HTTP messaging rules are off on the
// kubelet side (they refuse a Unix socket path as :authority, which kubelet
// <= 1.29 sends), so crihookd checks a request's header block itself, the way
// grpc-go's server does: golang.org/x/net/http2 Framer.readMetaFrame and
// MetaHeadersFrame.checkPseudos (RST_STREAM PROTOCOL_ERROR), then
// grpc-go internal/transport http2_server.go operateHeaders (RST_STREAM or an
// early trailers-only answer with an HTTP status), then server.go
// handleStream (UNIMPLEMENTED for a malformed method name).

enum PseudoBit : uint32_t {
  kMethod = 1,
  kScheme = 2,
  kPath = 4,
  kAuthority = 8,
  kStatus = 16,  // a response pseudo-header: alone it is not refused by the framer
};

// What the checks found while the header block was decoded, field by field.
struct RequestCheck {
  size_t list_bytes = 0;
  uint32_t pseudo = 0;
  bool saw_regular = false;
  bool truncated = false;        // over kMaxHeaderListBytes: later fields are not kept
  bool connection_full = false;  // over kMaxConnectionHeaderBytes: later fields are not kept
  std::string protocol_error;    // the first malformed field; later fields are not kept

  bool stopped() const { return truncated || connection_full || !protocol_error.empty(); }
};

// RFC 9110 token characters, as httpguts.IsTokenRune.
bool isTokenChar(unsigned char c) {
  if (c >= 'a' && c <= 'z') return true;
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= '0' && c <= '9') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// httpguts.ValidHeaderFieldValue: no control character but tab, no DEL.
bool validFieldValue(std::string_view v) {
  return std::none_of(v.begin(), v.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return (c < 0x20 && c != '\t') || c == 0x7f;
  });
}

// golang.org/x/net/http2 validWireHeaderFieldName: a token, lower case.
bool validFieldName(std::string_view n) {
  return !n.empty() && std::all_of(n.begin(), n.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return isTokenChar(c) && !(c >= 'A' && c <= 'Z');
  });
}

uint32_t pseudoBit(std::string_view name) {
  if (name == ":method") return kMethod;
  if (name == ":scheme") return kScheme;
  if (name == ":path") return kPath;
  if (name == ":authority") return kAuthority;
  if (name == ":status") return kStatus;
  return 0;
}

// One decoded field of a request's header block. Returns whether to keep it;
// `connection_room` is what the connection may still hold.
bool checkRequestField(RequestCheck& check, std::string_view name, std::string_view value,
                       size_t connection_room) {
  if (check.stopped()) return false;
  if (!validFieldValue(value)) {
    check.protocol_error = cat("header ", quote(name), ": value holds a control character");
    return false;
  }
  if (!name.empty() && name[0] == ':') {
    if (check.saw_regular) {
      check.protocol_error = cat("pseudo-header ", quote(name), " after a regular header");
      return false;
    }
    const uint32_t bit = pseudoBit(name);
    if (bit == 0) {
      check.protocol_error = cat("unknown pseudo-header ", quote(name));
      return false;
    }
    if (check.pseudo & bit) {
      check.protocol_error = cat("pseudo-header ", quote(name), " twice");
      return false;
    }
    check.pseudo |= bit;
    if ((check.pseudo & kStatus) && (check.pseudo & ~uint32_t{kStatus})) {
      check.protocol_error = "request and response pseudo-headers mixed";
      return false;
    }
  } else {
    check.saw_regular = true;
    if (!validFieldName(name)) {
      check.protocol_error = cat("header name ", quote(name), " is not a lower-case token");
      return false;
    }
  }
  // Checked after the field's form, as the Framer does.
  const size_t size = name.size() + value.size() + kHeaderFieldOverhead;
  if (size > kMaxHeaderListBytes - check.list_bytes) {
    check.truncated = true;
    return false;
  }
  if (size > connection_room) {
    check.connection_full = true;
    return false;
  }
  check.list_bytes += size;
  return true;
}

// grpc-go decodeBinHeader: standard base64, padded when the length is a
// multiple of 4, unpadded otherwise.
bool validBinaryValue(std::string_view v) {
  auto isB64 = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
  };
  std::string_view body = v;
  if (v.size() % 4 == 0) {
    size_t pad = 0;
    while (pad < 2 && !body.empty() && body.back() == '=') {
      body.remove_suffix(1);
      ++pad;
    }
    if (pad > 0 && body.size() % 4 < 2) return false;
  } else if (v.size() % 4 == 1) {
    return false;
  }
  return std::all_of(body.begin(), body.end(), isB64);
}

// How a request that passed the field checks is refused, if it is.
struct RequestRefusal {
  uint32_t reset_code = 0;  // RST_STREAM with this code, or else:
  int http_status = 200;    // a trailers-only answer
  absl::Status status;
  std::string why;  // for the log
};

// The checks over the whole header block, in grpc-go's order.
std::optional<RequestRefusal> refusalOf(const RequestCheck& check, const Headers& headers) {
  if (!check.protocol_error.empty())
    return RequestRefusal{NGHTTP2_PROTOCOL_ERROR, 0, {}, check.protocol_error};
  if (check.truncated) {
    std::string why = cat("header list larger than ", kMaxHeaderListBytes, " bytes");
    return RequestRefusal{NGHTTP2_FRAME_SIZE_ERROR, 0, {}, std::move(why)};
  }
  if (check.connection_full) {
    // No grpc-go counterpart (it has no such cap): a status a client can read.
    auto s = absl::ResourceExhaustedError(
        cat("crihookd: header lists of the open streams on this connection would pass ",
            kMaxConnectionHeaderBytes, " bytes"));
    return RequestRefusal{0, 200, s, std::string(s.message())};
  }
  bool grpc = false, connection = false;
  int hosts = 0;
  std::string content_type, method, header_error;
  for (const Header& h : headers) {
    if (h.name == "content-type") {
      // grpcutil.ContentSubtype: "application/grpc", optionally followed by
      // '+' or ';' and anything.
      constexpr std::string_view kGrpc = "application/grpc";
      const std::string_view v = h.value;
      if (v == kGrpc ||
          (v.starts_with(kGrpc) && (v[kGrpc.size()] == '+' || v[kGrpc.size()] == ';')))
        grpc = true;
      else
        content_type = h.value;
    } else if (h.name == ":method") {
      method = h.value;
    } else if (h.name == "host") {
      ++hosts;
    } else if (h.name == "connection") {
      connection = true;
    } else if (h.name == "grpc-timeout") {
      if (!grpcwire::parseTimeout(h.value))
        header_error = cat("malformed grpc-timeout ", quote(h.value));
    } else if (h.name.ends_with("-bin") && h.name != "grpc-status-details-bin") {
      if (!validBinaryValue(h.value))
        header_error = cat("malformed binary metadata in header ", quote(h.name));
    }
  }
  if (hosts > 1) {
    auto s = absl::InternalError(cat("crihookd: ", hosts, " host headers, HTTP/2 allows one"));
    return RequestRefusal{0, 400, s, std::string(s.message())};
  }
  if (connection)
    return RequestRefusal{NGHTTP2_PROTOCOL_ERROR, 0, {}, "connection header in an HTTP/2 request"};
  if (!grpc) {
    auto s = absl::InvalidArgumentError(
        cat("crihookd: invalid gRPC request content-type ", quote(content_type)));
    return RequestRefusal{0, 415, s, std::string(s.message())};
  }
  if (!header_error.empty()) {
    auto s = absl::InternalError(cat("crihookd: ", header_error));
    return RequestRefusal{0, 400, s, std::string(s.message())};
  }
  if (method != "POST") {
    auto s = absl::InternalError(cat("crihookd: :method ", quote(method), ", gRPC takes POST"));
    return RequestRefusal{0, 405, s, std::string(s.message())};
  }
  // server.go handleStream: one leading '/' is dropped, then the last '/'
  // splits service from method.
  const std::string* path = findHeader(headers, ":path");
  std::string_view p = path ? std::string_view(*path) : std::string_view();
  if (p.starts_with('/')) p.remove_prefix(1);
  if (p.find('/') == std::string_view::npos) {
    auto s = absl::UnimplementedError(
        cat("crihookd: malformed method name ", quote(path ? *path : std::string())));
    return RequestRefusal{0, 200, s, std::string(s.message())};
  }
  return std::nullopt;
}

// Connection-specific fields (RFC 9110 7.6.1) that grpc-go's server accepts
// and ignores: crihookd accepts them too, and an intermediary drops them
// rather than forwarding them (the runtime's HTTP/2 stack may refuse them).
bool hopByHop(const Header& h) {
  return h.name == "keep-alive" || h.name == "proxy-connection" || h.name == "transfer-encoding" ||
         h.name == "upgrade" || (h.name == "te" && h.value != "trailers");
}

}  // namespace

class Upstream;

// One relayed stream: a kubelet stream and, once forwarded, its runtime stream.
struct Call {
  int32_t down_id = 0;
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  std::string path;
  std::optional<InterceptedMethod> intercepted;

  // Request: kubelet -> runtime.
  Headers req_headers;
  RequestCheck check;
  bool headers_done = false;         // the request's header block has ended
  bool client_done = false;          // kubelet's END_STREAM has arrived (or is about to)
  bool reset_when_answered = false;  // RST_STREAM NO_ERROR once the answer is sent
  size_t buffered = 0;               // message bytes charged to the buffer budgets
  ByteQueue req_body;
  bool req_end = false;
  grpcwire::FrameTracker req_frames;

  // Upstream side. `up` is cleared when the upstream stream closes;
  // `window_up` stays until the call ends: reply bytes still buffered here
  // must be handed back to that connection's window as kubelet takes them.
  std::shared_ptr<Upstream> up;
  int32_t up_id = 0;
  std::shared_ptr<Upstream> window_up;
  int32_t window_up_id = 0;
  bool retried = false;  // refused once by a draining backend and resubmitted

  // Response: runtime -> kubelet.
  size_t resp_header_bytes = 0;  // decoded, as the request's are counted
  bool resp_headers_over = false;
  Headers resp_headers;
  Headers resp_trailers;
  ByteQueue resp_body;
  bool resp_end = false;
  bool resp_trailers_only = false;
  grpcwire::FrameTracker resp_frames;
  bool resp_submitted = false;  // response HEADERS handed to nghttp2
  bool answered = false;        // crihookd produced the final status itself
  absl::Status final_status;    // for the log line

  // Intercepted calls only: the stages' view, and the framed request as
  // forwarded (kept whole so a refused stream can be sent again).
  std::shared_ptr<InterceptedCall> ic;
  std::string forward_body;

  explicit Call(uint64_t max_bytes) : req_frames(max_bytes), resp_frames(max_bytes) {}
  bool passThrough() const { return !intercepted; }
};

// Makes the reply crihookd sends a trailers-only one carrying `status`, in
// place of whatever the runtime sent or would have sent. Reply bytes already
// buffered stay counted until the call ends (eraseCall hands them back).
void replyWithStatus(Call& call, const absl::Status& status, int http_status = 200) {
  call.resp_headers.clear();
  call.resp_trailers = trailersOnly(status, http_status);
  call.resp_trailers_only = true;
}

// Shared I/O of both sides: an nghttp2 session driven over a Unix socket.
class H2Endpoint : public std::enable_shared_from_this<H2Endpoint> {
 public:
  using Socket = asio::local::stream_protocol::socket;

  explicit H2Endpoint(Socket socket) : socket_(std::move(socket)) {}
  virtual ~H2Endpoint() {
    if (session_) nghttp2_session_del(session_);
  }

  nghttp2_session* session() const { return session_; }
  bool closed() const { return closed_; }
  asio::any_io_executor executor() { return socket_.get_executor(); }

  // Queues a flush of whatever nghttp2 has to send. Inside an input handler
  // of this connection group (a kubelet connection and its upstreams) the
  // flush runs when the handler ends, so a call's bytes go out in the same
  // turn of the event loop; elsewhere it is posted. Either way several
  // requests become one write.
  void scheduleFlush() {
    if (closed_) return;
    H2Endpoint* g = group_ ? group_ : this;
    if (g->batching_) {
      if (!queued_) {
        queued_ = true;
        g->dirty_.push_back(shared_from_this());
      }
      return;
    }
    if (flush_scheduled_) return;
    flush_scheduled_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->flush_scheduled_ = false;
      self->flush();
    });
  }

  // Writes what nghttp2 has to send. Writes go out at once while the socket
  // takes them (no completion to wait for: the common case costs one send);
  // only a full socket buffer defers the rest to an async write.
  void flush() {
    if (closed_ || writing_ || session_ == nullptr) return;
    for (;;) {
      out_.clear();
      for (;;) {
        const uint8_t* data = nullptr;
        ssize_t n = nghttp2_session_mem_send(session_, &data);
        if (n < 0) {
          fail(cat("HTTP/2 send failed: ", nghttp2_strerror(static_cast<int>(n))));
          return;
        }
        if (n == 0) break;
        out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
        if (out_.size() >= kWriteBatchBytes) break;
      }
      if (out_.empty()) {
        if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
          fail("HTTP/2 session finished");
        }
        return;
      }
      size_t off = 0;
      boost::system::error_code ec;
      while (off < out_.size()) {
        off += socket_.write_some(asio::buffer(out_.data() + off, out_.size() - off), ec);
        if (ec) break;
      }
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        fail(cat("write: ", ec.message()));
        return;
      }
      if (off < out_.size()) {
        out_.erase(0, off);
        writing_ = true;
        asio::async_write(socket_, asio::buffer(out_),
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                            self->writing_ = false;
                            if (ec) {
                              self->fail(cat("write: ", ec.message()));
                              return;
                            }
                            self->flush();
                          });
        return;
      }
    }
  }

  void startReading() {
    read_buf_.resize(kReadBufferBytes);
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    readAvailable();
  }

  // Closes the socket and reports why, once.
  void fail(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    onClosed(why);
  }

  struct SessionCallbacks {
    nghttp2_on_begin_headers_callback begin_headers = nullptr;
    nghttp2_on_header_callback header;
    nghttp2_on_frame_recv_callback frame_recv;
    nghttp2_on_data_chunk_recv_callback data_chunk;
    nghttp2_on_stream_close_callback stream_close;
    nghttp2_on_frame_send_callback frame_send = nullptr;
  };

 protected:
  virtual void onClosed(const std::string& why) = 0;
  virtual void afterInput() {}

  // Both sides take window updates into their own hands (no automatic
  // WINDOW_UPDATE): bytes count as consumed once the other side has taken
  // them, which carries flow control end to end. Sends the initial SETTINGS
  // and opens the connection window.
  void createSession(bool server, const SessionCallbacks& cb,
                     std::initializer_list<nghttp2_settings_entry> settings) {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    if (cb.begin_headers)
      nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, cb.begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, cb.header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cb.frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cb.data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cb.stream_close);
    if (cb.frame_send) nghttp2_session_callbacks_set_on_frame_send_callback(cbs, cb.frame_send);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_continuations(opt, kMaxContinuations);
    if (server) {
      // The kubelet side checks requests itself, as grpc-go does (see
      // refusalOf); nghttp2's rules refuse requests grpc-go accepts. The
      // runtime side keeps them: replies come from a gRPC server.
      nghttp2_option_set_no_http_messaging(opt, 1);
      nghttp2_session_server_new2(&session_, cbs, this, opt);
    } else {
      nghttp2_option_set_peer_max_concurrent_streams(opt, 1000);
      nghttp2_session_client_new2(&session_, cbs, this, opt);
    }
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.begin(), settings.size());
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
  }

  Socket socket_;
  nghttp2_session* session_ = nullptr;

 private:
  // Reads what the socket holds, then waits for more. A read that did not
  // fill the buffer drained the socket, so the next read waits for
  // readiness instead of trying (and failing) once more: one read per
  // wake-up. Safe because each io_context runs on one thread: data arriving
  // after the read is reported by the loop's next epoll_wait.
  void readAvailable() {
    for (int i = 0; i < 16; ++i) {
      boost::system::error_code ec;
      size_t n = socket_.read_some(asio::buffer(read_buf_), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        fail(ec == asio::error::eof ? "peer closed the connection" : cat("read: ", ec.message()));
        return;
      }
      handleInput(n);
      if (closed_) return;
      if (n < read_buf_.size()) break;
      if (i == 15) {
        // A peer that keeps the socket full: let other connections run.
        asio::post(socket_.get_executor(), [self = shared_from_this()] {
          if (!self->closed_) self->readAvailable();
        });
        return;
      }
    }
    socket_.async_wait(Socket::wait_read,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         if (self->closed_) return;
                         if (ec) {
                           self->fail(cat("wait: ", ec.message()));
                           return;
                         }
                         self->readAvailable();
                       });
  }

  void handleInput(size_t n) {
    H2Endpoint* g = group_ ? group_ : this;
    const bool outer = !g->batching_;
    g->batching_ = true;
    ssize_t rv = nghttp2_session_mem_recv(session_, read_buf_.data(), n);
    if (rv >= 0) afterInput();
    if (outer) {
      g->batching_ = false;
      std::vector<std::shared_ptr<H2Endpoint>> dirty;
      dirty.swap(g->dirty_);
      for (auto& e : dirty) {
        e->queued_ = false;
        e->flush();
      }
    }
    if (rv < 0) {
      fail(cat("HTTP/2 protocol error: ", nghttp2_strerror(static_cast<int>(rv))));
      return;
    }
    flush();
  }

  std::vector<uint8_t> read_buf_;
  std::string out_;
  bool writing_ = false;
  bool flush_scheduled_ = false;
  bool queued_ = false;  // in the group's dirty_ list
  bool closed_ = false;
  // Batching of flushes while a handler of the group runs; on the group's
  // leader (the kubelet-side connection) only.
  bool batching_ = false;
  std::vector<std::shared_ptr<H2Endpoint>> dirty_;

 protected:
  H2Endpoint* group_ = nullptr;  // the leader; null on the leader itself
};

class Downstream;

// The runtime side: an HTTP/2 client connection to the backend socket.
class Upstream final : public H2Endpoint {
 public:
  Upstream(Socket socket, Downstream* owner);

  // Connects (bounded by the context's connect timeout); `done` runs on the
  // executor with the outcome.
  void connect(const std::string& path, std::chrono::milliseconds timeout,
               std::function<void(const std::string& error)> done);

  // Forwards `call` (its headers and whatever body is queued). False when the
  // session cannot take another stream.
  bool submit(Call& call);

  // The call relayed on upstream stream `id`, if it is still alive.
  Call* callFor(int32_t id);

  void detach() {
    owner_ = nullptr;
    group_ = nullptr;
  }
  bool draining() const { return draining_; }
  void forget(int32_t up_id) { streams_.erase(up_id); }

 private:
  void onClosed(const std::string& why) override;
  void afterInput() override;
  void setupSession();

  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user);
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user);
  static ssize_t readRequestBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                 uint32_t* flags, nghttp2_data_source*, void* user);

  Downstream* owner_;
  std::map<int32_t, int32_t> streams_;  // upstream stream id -> downstream stream id
  bool draining_ = false;
  std::unique_ptr<asio::steady_timer> connect_timer_;
  friend class Downstream;
};

// The kubelet side: an HTTP/2 server connection, owner of its calls.
class Downstream : public H2Endpoint {
 public:
  Downstream(Socket socket, RelayContext& ctx) : H2Endpoint(std::move(socket)), ctx_(ctx) {
    ctx_.open_connections.fetch_add(1);
  }
  ~Downstream() override {
    dropAllCalls();
    ctx_.open_connections.fetch_sub(1);
  }

  void start();
  void shutdown();
  void closeAll(const std::string& why);

  Call* find(int32_t id) {
    auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second.get();
  }

  // Upstream events, delegated here because calls live here.
  void onResponseHeaders(Call& call);
  void onResponseData(Call& call, const uint8_t* data, size_t len);
  void onResponseEnd(Call& call);
  void onUpstreamStreamClosed(Call& call, uint32_t error_code);
  void onUpstreamLost(Upstream& up, const std::string& why);
  void onUpstreamGoaway(Upstream& up);
  void consumeRequestBytes(Call& call, size_t n);
  // The runtime may send as many more bytes as kubelet has now taken; also
  // after the runtime's stream closed (the connection window still counts them).
  void returnWindow(Call& call, size_t n);
  // Counts one decoded field of the runtime's reply to `call`; false (nothing
  // counted) past the per-reply or the connection's cap.
  bool chargeReplyHeader(Call& call, size_t bytes);
  // Answers `call` with `status` in place of the runtime.
  void answer(Call& call, const absl::Status& status);

 private:
  void onClosed(const std::string& why) override;
  void setupSession();

  // Request path.
  void onRequestHeaders(Call& call);
  void onRequestData(Call& call, const uint8_t* data, size_t len);
  void onRequestEnd(Call& call);
  void forward(Call& call);
  std::shared_ptr<Upstream> currentUpstream();
  void onUpstreamConnected(const std::shared_ptr<Upstream>& up, const std::string& error);

  // Intercepted path.
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
  void logCall(const Call& call);
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

  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user);
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user);
  static int onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static ssize_t readResponseBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                  uint32_t* flags, nghttp2_data_source*, void* user);

  RelayContext& ctx_;
  std::unordered_map<int32_t, std::unique_ptr<Call>> calls_;
  std::shared_ptr<Upstream> upstream_;               // takes new streams
  std::vector<std::shared_ptr<Upstream>> draining_;  // finishing old streams
  std::vector<int32_t> waiting_;                     // calls waiting for the connect
  bool connecting_ = false;
  bool shutting_down_ = false;

  size_t header_bytes_ = 0;      // decoded fields held by calls_, both directions
  uint64_t buffered_bytes_ = 0;  // intercepted calls' message bytes held
  Clock::time_point accepted_ = Clock::now();
  Clock::time_point idle_since_ = Clock::now();  // since calls_ last became empty
  bool settings_seen_ = false;                   // the client's preface and SETTINGS arrived
  bool idle_goaway_ = false;
  std::unique_ptr<asio::steady_timer> tick_;
};

// What grpc-go's server accepts, some gRPC servers refuse (gRPC C++ wants
// :scheme, :authority and te: trailers). The runtime gets the request as a
// gRPC client library would have sent it.
void canonicalise(Headers& headers) {
  // grpc-go drops one leading '/' before routing, so it serves "S/M" as
  // "/S/M": forward (and match interception on) the canonical form.
  for (Header& h : headers) {
    if (h.name == ":path" && !h.value.starts_with('/')) h.value = cat("/", h.value);
  }
  std::erase_if(headers, hopByHop);
  if (findHeader(headers, ":scheme") == nullptr)
    headers.insert(headers.begin(), {":scheme", "http"});
  if (findHeader(headers, ":authority") == nullptr) {
    // grpc-go takes a lone host header as the authority.
    const std::string* host = findHeader(headers, "host");
    headers.insert(headers.begin(), {":authority", host ? *host : "localhost"});
  }
  if (findHeader(headers, "te") == nullptr) headers.push_back({"te", "trailers"});
}

// ---------------------------------------------------------------------------
// Upstream

Upstream::Upstream(Socket socket, Downstream* owner)
    : H2Endpoint(std::move(socket)), owner_(owner) {
  group_ = owner;
}

void Upstream::connect(const std::string& path, std::chrono::milliseconds timeout,
                       std::function<void(const std::string&)> done) {
  auto self = std::static_pointer_cast<Upstream>(shared_from_this());
  connect_timer_ = std::make_unique<asio::steady_timer>(socket_.get_executor(), timeout);
  auto finished = std::make_shared<bool>(false);
  connect_timer_->async_wait([self, finished, done, timeout](const boost::system::error_code& ec) {
    if (ec || *finished) return;
    *finished = true;
    boost::system::error_code ignored;
    self->socket_.close(ignored);
    done(cat("connect timed out after ", timeout.count(), "ms"));
  });
  socket_.async_connect(asio::local::stream_protocol::endpoint(path),
                        [self, finished, done](const boost::system::error_code& ec) {
                          if (*finished) return;
                          *finished = true;
                          self->connect_timer_->cancel();
                          if (ec) {
                            done(ec.message());
                            return;
                          }
                          self->setupSession();
                          self->startReading();
                          done("");
                        });
}

void Upstream::setupSession() {
  createSession(false, {nullptr, onHeader, onFrameRecv, onDataChunk, onStreamClose},
                {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderListBytes}});
}

bool Upstream::submit(Call& call) {
  std::vector<nghttp2_nv> nv = toNv(call.req_headers);
  nghttp2_data_provider body{};
  body.read_callback = readRequestBody;
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
  if (connect_timer_) connect_timer_->cancel();
  if (owner_) owner_->onUpstreamLost(*this, why);
  streams_.clear();
}

int Upstream::onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                       size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  auto* up = static_cast<Upstream*>(user);
  Call* call = up->callFor(frame->hd.stream_id);
  if (call == nullptr || frame->hd.type != NGHTTP2_HEADERS || call->resp_headers_over) return 0;
  // A runtime's reply is bounded as a request is: nothing past the caps is
  // kept, and the call fails once the block ends (onFrameRecv).
  if (!up->owner_->chargeReplyHeader(*call, namelen + valuelen + kHeaderFieldOverhead)) {
    call->resp_headers_over = true;
    return 0;
  }
  Header h{std::string(reinterpret_cast<const char*>(name), namelen),
           std::string(reinterpret_cast<const char*>(value), valuelen)};
  if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE) {
    call->resp_headers.push_back(std::move(h));
  } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS) {
    call->resp_trailers.push_back(std::move(h));
  }
  return 0;
}

int Upstream::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* up = static_cast<Upstream*>(user);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    up->draining_ = true;
    if (up->owner_) up->owner_->onUpstreamGoaway(*up);
    return 0;
  }
  Call* call = up->callFor(frame->hd.stream_id);
  if (call == nullptr) return 0;
  Downstream* owner = up->owner_;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS && call->resp_headers_over) {
    owner->answer(*call, absl::InternalError(cat("crihookd: ", call->path,
                                                 ": the runtime's reply headers pass ",
                                                 kMaxHeaderListBytes, " bytes")));
    return 0;
  }
  if (frame->hd.type == NGHTTP2_HEADERS) {
    if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE) {
      const std::string* status = findHeader(call->resp_headers, ":status");
      if (status && !status->empty() && (*status)[0] == '1') {  // informational: not the response
        call->resp_headers.clear();
        return 0;
      }
      if (end) {
        // Trailers-only: the status is in these headers.
        call->resp_trailers_only = true;
        owner->onResponseEnd(*call);
      } else {
        owner->onResponseHeaders(*call);
      }
    } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS && end) {
      owner->onResponseEnd(*call);
    }
  } else if (frame->hd.type == NGHTTP2_DATA && end) {
    owner->onResponseEnd(*call);
  }
  return 0;
}

int Upstream::onDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                          size_t len, void* user) {
  auto* up = static_cast<Upstream*>(user);
  Call* call = up->callFor(stream_id);
  if (call == nullptr) {
    nghttp2_session_consume(session, stream_id, len);
    return 0;
  }
  up->owner_->onResponseData(*call, data, len);
  return 0;
}

int Upstream::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user) {
  auto* up = static_cast<Upstream*>(user);
  Call* call = up->callFor(stream_id);
  up->streams_.erase(stream_id);
  if (call != nullptr) {
    call->up.reset();
    call->up_id = 0;
    up->owner_->onUpstreamStreamClosed(*call, error_code);
  }
  if (up->draining_ && up->streams_.empty() && up->owner_) {
    // The last stream of a connection the backend is retiring.
    boost::asio::post(up->executor(),
                      [self = up->shared_from_this()] { self->fail("drained after GOAWAY"); });
  }
  return 0;
}

ssize_t Upstream::readRequestBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                  uint32_t* flags, nghttp2_data_source*, void* user) {
  auto* up = static_cast<Upstream*>(user);
  Call* call = up->callFor(stream_id);
  if (call == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  size_t n = call->req_body.read(buf, length);
  if (n > 0 && call->passThrough()) up->owner_->consumeRequestBytes(*call, n);
  if (call->req_body.empty() && call->req_end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  return n > 0 ? static_cast<ssize_t>(n) : static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED);
}

// ---------------------------------------------------------------------------
// Downstream: session and request path

void Downstream::setupSession() {
  createSession(true,
                {onBeginHeaders, onHeader, onFrameRecv, onDataChunk, onStreamClose, onFrameSend},
                {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderListBytes}});
}

void Downstream::start() {
  setupSession();
  startReading();
  flush();
  tick_ = std::make_unique<asio::steady_timer>(executor());
  armTick();
}

void Downstream::armTick() {
  const RelayLimits& l = ctx_.limits;
  const auto shortest = std::min({l.preface_timeout, l.idle_timeout, l.request_timeout});
  tick_->expires_after(std::clamp<std::chrono::milliseconds>(shortest / 4, kMinTick, kMaxTick));
  // A weak reference: a pending tick must not keep a closed connection.
  tick_->async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto self = weak.lock(); self && !self->closed())
      static_cast<Downstream*>(self.get())->onTick();
  });
}

void Downstream::onTick() {
  const auto now = Clock::now();
  const RelayLimits& l = ctx_.limits;
  uint64_t held_back = 0;
  if (!settings_seen_ && now - accepted_ >= l.preface_timeout) {
    if (ctx_.timeout_log.allow(held_back)) {
      ctx_.log->warn(
          "closed a connection that sent no HTTP/2 preface within server.preface_timeout ({}ms); "
          "{} more connections cut by a timeout since the last message",
          l.preface_timeout.count(), held_back);
    }
    fail("no HTTP/2 preface within server.preface_timeout");
    return;
  }
  if (idle_goaway_) {
    // GOAWAY was sent a tick ago and the peer does not take it: close.
    fail("idle, and the GOAWAY not taken");
    return;
  }
  if (calls_.empty() && settings_seen_ && now - idle_since_ >= l.idle_timeout) {
    // As grpc-go's MaxConnectionIdle: GOAWAY, then the connection closes
    // once it is sent (flush sees a finished session).
    ctx_.log->debug("closing a connection idle for server.idle_timeout ({}ms)",
                    l.idle_timeout.count());
    idle_goaway_ = true;
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
    flush();
    if (!closed()) armTick();
    return;
  }
  std::vector<int32_t> late;
  for (const auto& [id, call] : calls_) {
    if (now - call->start < l.request_timeout || call->answered) continue;
    if (!call->headers_done) {
      // HTTP/2 lets nothing else through while a header block is open: the
      // whole connection is stuck on it.
      if (ctx_.timeout_log.allow(held_back)) {
        ctx_.log->warn(
            "closed a connection whose header block of stream {} was not complete within "
            "server.request_timeout ({}ms); {} more connections cut by a timeout since the last "
            "message",
            id, l.request_timeout.count(), held_back);
      }
      fail("header block not complete within server.request_timeout");
      return;
    }
    if (!call->passThrough() && !call->req_end) late.push_back(id);
  }
  for (int32_t id : late) {
    if (Call* call = find(id)) {
      answer(*call, absl::DeadlineExceededError(
                        cat("crihookd: ", call->path,
                            ": request message not complete within server.request_timeout (",
                            l.request_timeout.count(), "ms)")));
      endRequestEarly(*call);
    }
  }
  armTick();
}

absl::Status Downstream::chargeBuffer(Call& call, size_t bytes, std::string_view what) {
  const RelayLimits& l = ctx_.limits;
  if (buffered_bytes_ + bytes > l.max_connection_buffered_bytes) {
    return absl::ResourceExhaustedError(
        cat("crihookd: ", call.path, ": ", what, " would take the calls buffered on this ",
            "connection past server.max_connection_buffered_bytes (",
            l.max_connection_buffered_bytes, " bytes)"));
  }
  const auto n = static_cast<int64_t>(bytes);
  if (static_cast<uint64_t>(ctx_.buffered_bytes.fetch_add(n) + n) > l.max_buffered_bytes) {
    ctx_.buffered_bytes.fetch_sub(n);
    return absl::ResourceExhaustedError(
        cat("crihookd: ", call.path, ": ", what,
            " would take the calls buffered by crihookd past server.max_buffered_bytes (",
            l.max_buffered_bytes, " bytes)"));
  }
  buffered_bytes_ += bytes;
  call.buffered += bytes;
  return absl::OkStatus();
}

bool Downstream::chargeReplyHeader(Call& call, size_t bytes) {
  if (bytes > kMaxHeaderListBytes - call.resp_header_bytes ||
      header_bytes_ + bytes > kMaxConnectionHeaderBytes)
    return false;
  call.resp_header_bytes += bytes;
  header_bytes_ += bytes;
  ctx_.header_bytes.fetch_add(static_cast<int64_t>(bytes));
  return true;
}

void Downstream::releaseLimits(Call& call) {
  const size_t headers = call.check.list_bytes + call.resp_header_bytes;
  header_bytes_ -= headers;
  ctx_.header_bytes.fetch_sub(static_cast<int64_t>(headers));
  call.check.list_bytes = 0;
  call.resp_header_bytes = 0;
  buffered_bytes_ -= call.buffered;
  ctx_.buffered_bytes.fetch_sub(static_cast<int64_t>(call.buffered));
  call.buffered = 0;
}

void Downstream::endRequestEarly(Call& call) {
  if (call.client_done || closed()) return;
  // A RST_STREAM submitted now would make nghttp2 drop the answer still
  // queued for the stream: it goes once the answer is sent (onFrameSend).
  if (nghttp2_session_get_stream_local_close(session_, call.down_id) == 1) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call.down_id, NGHTTP2_NO_ERROR);
    scheduleFlush();
  } else {
    call.reset_when_answered = true;
  }
}

int Downstream::onFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  auto* self = static_cast<Downstream*>(user);
  Call* call = self->find(frame->hd.stream_id);
  if (call != nullptr && call->reset_when_answered && !call->client_done) {
    call->reset_when_answered = false;
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, call->down_id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

void Downstream::shutdown() {
  if (closed() || shutting_down_) return;
  shutting_down_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

void Downstream::closeAll(const std::string& why) { fail(why); }

void Downstream::onClosed(const std::string& why) {
  ctx_.log->debug("client connection closed: {}", why);
  if (tick_) tick_->cancel();
  dropAllCalls();
}

void Downstream::dropAllCalls() {
  // The runtime cancels every stream of a connection that closes.
  for (auto& up : draining_) {
    up->detach();
    up->fail("client connection closed");
  }
  draining_.clear();
  if (upstream_) {
    upstream_->detach();
    upstream_->fail("client connection closed");
    upstream_.reset();
  }
  for (auto& [id, call] : calls_) {
    if (!call->answered) ctx_.active_calls.fetch_sub(1);
    if (call->final_status.ok() && !(call->resp_end && call->resp_submitted))
      call->final_status = absl::CancelledError("connection closed");
    recordCall(*call);
    releaseLimits(*call);
  }
  calls_.clear();
  waiting_.clear();
}

int Downstream::onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<Downstream*>(user);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    self->calls_.emplace(frame->hd.stream_id, std::make_unique<Call>(self->ctx_.max_message_bytes));
    self->calls_[frame->hd.stream_id]->down_id = frame->hd.stream_id;
    self->ctx_.active_calls.fetch_add(1);
  }
  return 0;
}

int Downstream::onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                         size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                         void* user) {
  auto* self = static_cast<Downstream*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  Call* call = self->find(frame->hd.stream_id);
  if (call == nullptr) return 0;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    // Trailers: grpc-go's server ends the whole connection on them; crihookd
    // refuses the stream once the block ends (onFrameRecv), and keeps
    // nothing of it.
    return 0;
  }
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  const size_t room =
      kMaxConnectionHeaderBytes - std::min(self->header_bytes_, kMaxConnectionHeaderBytes);
  const size_t before = call->check.list_bytes;
  if (checkRequestField(call->check, n, v, room)) {
    call->req_headers.push_back({std::string(n), std::string(v)});
    const size_t added = call->check.list_bytes - before;
    self->header_bytes_ += added;
    self->ctx_.header_bytes.fetch_add(static_cast<int64_t>(added));
  }
  return 0;
}

int Downstream::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<Downstream*>(user);
  if (frame->hd.type == NGHTTP2_SETTINGS) self->settings_seen_ = true;
  Call* call = self->find(frame->hd.stream_id);
  if (call == nullptr) return 0;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (end && (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA))
    call->client_done = true;
  if (frame->hd.type == NGHTTP2_HEADERS) call->headers_done = true;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    self->refuse(*call, RequestRefusal{NGHTTP2_PROTOCOL_ERROR, 0, {}, "trailers in a request"});
    return 0;
  }
  if (frame->hd.type == NGHTTP2_HEADERS) {
    if (auto refusal = refusalOf(call->check, call->req_headers)) {
      self->refuse(*call, *refusal);
      return 0;
    }
    self->onRequestHeaders(*call);
    // The call may have been answered (and erased) already.
    call = self->find(frame->hd.stream_id);
  }
  if (call != nullptr && end &&
      (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA)) {
    self->onRequestEnd(*call);
  }
  return 0;
}

int Downstream::onDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id,
                            const uint8_t* data, size_t len, void* user) {
  auto* self = static_cast<Downstream*>(user);
  Call* call = self->find(stream_id);
  if (call == nullptr || call->answered) {
    nghttp2_session_consume(session, stream_id, len);
    return 0;
  }
  self->onRequestData(*call, data, len);
  return 0;
}

int Downstream::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                              void* user) {
  auto* self = static_cast<Downstream*>(user);
  Call* call = self->find(stream_id);
  if (call == nullptr) return 0;
  if (!call->answered && !(call->resp_end && call->resp_submitted)) {
    // kubelet cancelled (RST_STREAM) or its deadline passed: cancel the
    // runtime's stream too, so the runtime stops working on it.
    if (call->final_status.ok()) {
      call->final_status = absl::CancelledError(
          error_code == NGHTTP2_NO_ERROR ? "closed by the client"
                                         : cat("reset by the client, HTTP/2 error ", error_code));
    }
  }
  self->cancelUpstream(*call);
  if (call->intercepted) self->logCall(*call);
  self->recordCall(*call);
  self->eraseCall(stream_id);
  return 0;
}

void Downstream::recordCall(Call& call) {
  if (ctx_.call_metrics)
    ctx_.call_metrics->record(call.path, call.final_status.code(), Clock::now() - call.start);
}

void Downstream::eraseCall(int32_t id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  Call& call = *it->second;
  if (!call.answered) ctx_.active_calls.fetch_sub(1);
  releaseLimits(call);
  // Bytes buffered but never relayed still count against both connections'
  // windows: hand them back, or a few abandoned calls stall the connection.
  if (call.passThrough()) {
    if (!call.resp_body.empty()) returnWindow(call, call.resp_body.size());
    if (!call.req_body.empty() && !closed())
      nghttp2_session_consume(session_, id, call.req_body.size());
  }
  calls_.erase(it);
  if (calls_.empty()) idle_since_ = Clock::now();
}

void Downstream::cancelUpstream(Call& call) {
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

void Downstream::refuse(Call& call, const RequestRefusal& refusal) {
  const std::string* path = findHeader(call.req_headers, ":path");
  // A client can have any number of its requests refused: one line per 10 s.
  if (uint64_t held_back = 0; ctx_.refusal_log.allow(held_back)) {
    ctx_.log->warn("refused request stream {} path={}: {}; {} more refused since the last message",
                   call.down_id, path ? quote(*path) : std::string("-"), refusal.why, held_back);
  }
  if (refusal.reset_code != 0) {
    call.final_status = absl::InternalError(cat("crihookd: ", refusal.why));
    resetBoth(call, refusal.reset_code);
    return;
  }
  if (call.answered) return;
  cancelUpstream(call);
  call.final_status = refusal.status;
  replyWithStatus(call, refusal.status, refusal.http_status);
  call.resp_end = true;
  submitResponse(call);
  // Nothing of a refused request is used any more.
  releaseLimits(call);
  call.req_headers = Headers();
  endRequestEarly(call);
}

void Downstream::onRequestHeaders(Call& call) {
  canonicalise(call.req_headers);
  if (const std::string* path = findHeader(call.req_headers, ":path")) call.path = *path;
  if (const std::string* t = findHeader(call.req_headers, "grpc-timeout")) {
    if (auto d = grpcwire::parseTimeout(*t)) {
      // Up to 8 digits of hours: past what the clock holds from now is no
      // deadline, not one wrapped into the past.
      const auto left = std::chrono::duration_cast<Clock::duration>(*d);
      call.deadline = left < Clock::time_point::max() - call.start ? call.start + left
                                                                   : Clock::time_point::max();
    }
  }
  call.intercepted = findInterceptedMethod(call.path);
  if (call.passThrough()) forward(call);
}

void Downstream::onRequestData(Call& call, const uint8_t* data, size_t len) {
  size_t ok = call.req_frames.feed(data, len);
  if (call.req_frames.tooLarge()) {
    nghttp2_session_consume(session_, call.down_id, len);
    answer(call, absl::ResourceExhaustedError(
                     cat("crihookd: request message of ", call.req_frames.announcedBytes(),
                         " bytes is larger than the limit of ", ctx_.max_message_bytes, " bytes")));
    cancelUpstream(call);
    return;
  }
  if (!call.passThrough()) {
    // Intercepted calls are decoded whole: take the bytes now, but never
    // more than one message's worth (a client streaming many small
    // messages into a unary method must not grow the buffer forever), nor
    // past the budgets of buffered calls.
    nghttp2_session_consume(session_, call.down_id, len);
    if (auto budget = chargeBuffer(call, ok, "its request"); !budget.ok()) {
      answer(call, budget);
      endRequestEarly(call);
      return;
    }
    call.req_body.append(data, ok);
    if (call.req_body.size() > ctx_.max_message_bytes + grpcwire::kFrameHeaderBytes) {
      answer(call, absl::ResourceExhaustedError(
                       cat("crihookd: ", call.path, ": request of more than ",
                           ctx_.max_message_bytes, " bytes for a unary method")));
    }
    return;
  }
  call.req_body.append(data, ok);
  if (call.up && call.up_id != 0) {
    nghttp2_session_resume_data(call.up->session(), call.up_id);
    call.up->scheduleFlush();
  }
}

void Downstream::returnWindow(Call& call, size_t n) {
  if (call.window_up && !call.window_up->closed()) {
    nghttp2_session_consume(call.window_up->session(), call.window_up_id, n);
    call.window_up->scheduleFlush();
  }
}

void Downstream::consumeRequestBytes(Call& call, size_t n) {
  nghttp2_session_consume(session_, call.down_id, n);
  scheduleFlush();
}

void Downstream::onRequestEnd(Call& call) {
  call.req_end = true;
  if (!call.passThrough()) {
    startPreStage(call);
    return;
  }
  if (call.up && call.up_id != 0) {
    nghttp2_session_resume_data(call.up->session(), call.up_id);
    call.up->scheduleFlush();
  }
}

std::shared_ptr<Upstream> Downstream::currentUpstream() {
  if (upstream_ && (upstream_->closed() || upstream_->draining())) {
    if (!upstream_->closed()) draining_.push_back(upstream_);
    upstream_.reset();
  }
  return upstream_;
}

void Downstream::forward(Call& call) {
  if (!call.passThrough()) call.req_body.assign(call.forward_body);
  if (std::shared_ptr<Upstream> up = currentUpstream(); up && !connecting_) {
    if (up->submit(call)) return;
    // The session has no stream ids left: retire it, open another.
    draining_.push_back(up);
    upstream_.reset();
  }
  waiting_.push_back(call.down_id);
  if (connecting_) return;
  connecting_ = true;
  auto up = std::make_shared<Upstream>(Socket(executor()), this);
  upstream_ = up;
  auto self = std::static_pointer_cast<Downstream>(shared_from_this());
  up->connect(ctx_.backend_path, ctx_.connect_timeout,
              [self, up](const std::string& error) { self->onUpstreamConnected(up, error); });
}

void Downstream::onUpstreamConnected(const std::shared_ptr<Upstream>& up,
                                     const std::string& error) {
  connecting_ = false;
  if (closed() || up != upstream_) {
    up->detach();
    up->fail("no longer needed");
    return;
  }
  std::vector<int32_t> waiting;
  waiting.swap(waiting_);
  if (!error.empty()) {
    // Fail fast: kubelet retries, and the next call tries to connect again.
    upstream_.reset();
    up->detach();
    ctx_.log->warn("backend {} unavailable: {}", ctx_.backend_endpoint, error);
    for (int32_t id : waiting) {
      if (Call* call = find(id)) {
        answer(*call, absl::UnavailableError(cat("crihookd: backend ", ctx_.backend_endpoint,
                                                 " unavailable: ", error)));
      }
    }
    scheduleFlush();
    return;
  }
  for (int32_t id : waiting) {
    if (Call* call = find(id); call && !call->answered) forward(*call);
  }
}

void Downstream::onUpstreamGoaway(Upstream& up) {
  if (upstream_.get() == &up) {
    draining_.push_back(upstream_);
    upstream_.reset();
  }
}

void Downstream::onUpstreamLost(Upstream& up, const std::string& why) {
  ctx_.log->debug("backend connection closed: {}", why);
  std::vector<int32_t> affected;
  for (const auto& [up_id, down_id] : up.streams_) affected.push_back(down_id);
  up.streams_.clear();
  const absl::Status lost = absl::UnavailableError(cat("crihookd: backend connection lost: ", why));
  for (int32_t id : affected) {
    Call* call = find(id);
    if (call == nullptr) continue;
    call->up.reset();
    call->up_id = 0;
    if (call->resp_end) continue;
    if (!call->passThrough() && !call->resp_submitted) {
      replyWithStatus(*call, lost);
      onResponseEnd(*call);
    } else {
      answer(*call, lost);
    }
  }
  std::erase_if(draining_, [&](const auto& p) { return p.get() == &up; });
  if (upstream_.get() == &up) upstream_.reset();
  scheduleFlush();
}

// ---------------------------------------------------------------------------
// Intercepted calls

void Downstream::startPreStage(Call& call) {
  auto message = grpcwire::singleMessage(call.req_body.view());
  if (!message.ok()) {
    answer(call, absl::Status(message.status().code(),
                              cat("crihookd: ", call.path, ": ", sv(message.status().message()))));
    return;
  }
  auto ic = std::make_shared<InterceptedCall>();
  ic->method = call.intercepted->spec->method;
  ic->api = call.intercepted->api;
  ic->deadline = call.deadline;
  ic->request = call.intercepted->spec->newRequest();
  if (!ic->request->ParseFromArray(message->data(), static_cast<int>(message->size()))) {
    answer(call, absl::InvalidArgumentError(
                     cat("crihookd: ", call.path, ": cannot decode ", ic->request->GetTypeName())));
    return;
  }
  ic->identity = identityFromRequest(*call.intercepted->spec, *ic->request);
  call.ic = ic;
  auto self = std::static_pointer_cast<Downstream>(shared_from_this());
  const int32_t id = call.down_id;
  ctx_.interceptor->pre(ic, [self, id](absl::Status status) {
    asio::dispatch(self->executor(), [self, id, status = std::move(status)]() mutable {
      self->onPreStageDone(id, std::move(status));
      self->scheduleFlush();
    });
  });
}

void Downstream::onPreStageDone(int32_t id, absl::Status status) {
  Call* call = find(id);
  if (call == nullptr || closed()) return;  // kubelet gave up meanwhile
  if (!status.ok()) {
    answer(*call, status);
    return;
  }
  InterceptedCall& ic = *call->ic;
  if (ic.request_changed) {
    std::string bytes;
    ic.request->SerializeToString(&bytes);
    if (bytes.size() > ctx_.max_message_bytes) {
      answer(*call, absl::ResourceExhaustedError(cat("crihookd: adjusted request of ", bytes.size(),
                                                     " bytes is larger than the message limit")));
      return;
    }
    call->forward_body = grpcwire::frame(bytes);
  } else {
    call->forward_body = call->req_body.take();
  }
  if (call->deadline != Clock::time_point::max()) {
    auto left = call->deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      answer(*call,
             absl::DeadlineExceededError("crihookd: deadline exceeded in the pre-stage hooks"));
      return;
    }
    // The runtime gets what is left of the caller's deadline.
    for (Header& h : call->req_headers) {
      if (h.name == "grpc-timeout") h.value = grpcwire::formatTimeout(left);
    }
  }
  forward(*call);
}

void Downstream::startPostStage(Call& call) {
  InterceptedCall& ic = *call.ic;
  ic.backend_status = statusFrom(
      call.resp_trailers_only ? call.resp_headers.empty() ? call.resp_trailers : call.resp_headers
                              : call.resp_trailers);
  if (ic.backend_status.ok()) {
    auto message = grpcwire::singleMessage(call.resp_body.view());
    if (message.ok()) {
      ic.response = call.intercepted->spec->newResponse();
      if (!ic.response->ParseFromArray(message->data(), static_cast<int>(message->size())))
        ic.response.reset();
    }
    if (ic.response) noteCreatedId(*call.intercepted->spec, *ic.response, ic.identity);
  }
  auto self = std::static_pointer_cast<Downstream>(shared_from_this());
  const int32_t id = call.down_id;
  ctx_.interceptor->post(call.ic, [self, id] {
    asio::dispatch(self->executor(), [self, id] {
      self->onPostStageDone(id);
      self->scheduleFlush();
    });
  });
}

void Downstream::onPostStageDone(int32_t id) {
  Call* call = find(id);
  if (call == nullptr || closed()) return;
  call->final_status = call->ic->backend_status;
  submitResponse(*call);
}

// ---------------------------------------------------------------------------
// Response path

void Downstream::onResponseHeaders(Call& call) {
  if (call.passThrough()) submitResponse(call);
}

void Downstream::onResponseData(Call& call, const uint8_t* data, size_t len) {
  size_t ok = call.resp_frames.feed(data, len);
  if (call.resp_frames.tooLarge()) {
    // The bytes past the cut are dropped here; those before it are handed
    // back as kubelet reads them.
    if (call.up)
      nghttp2_session_consume(call.up->session(), call.up_id,
                              len - (call.resp_frames.cleanCut() ? ok : 0));
    cancelUpstream(call);
    auto status = absl::ResourceExhaustedError(
        cat("crihookd: response message of ", call.resp_frames.announcedBytes(),
            " bytes is larger than the limit of ", ctx_.max_message_bytes, " bytes"));
    if (call.resp_frames.cleanCut()) {
      call.resp_body.append(data, ok);
      answer(call, status);
    } else {
      call.final_status = status;
      resetBoth(call, NGHTTP2_INTERNAL_ERROR);
    }
    return;
  }
  if (!call.passThrough()) {
    nghttp2_session_consume(call.up->session(), call.up_id, len);
    if (auto budget = chargeBuffer(call, ok, "the runtime's reply"); !budget.ok()) {
      answer(call, budget);
      return;
    }
    call.resp_body.append(data, ok);
    if (call.resp_body.size() > ctx_.max_message_bytes + grpcwire::kFrameHeaderBytes) {
      answer(call, absl::ResourceExhaustedError(cat("crihookd: ", call.path,
                                                    ": reply of more than ", ctx_.max_message_bytes,
                                                    " bytes for a unary method")));
    }
    return;
  }
  call.resp_body.append(data, ok);
  if (call.resp_submitted) {
    nghttp2_session_resume_data(session_, call.down_id);
    scheduleFlush();
  }
}

void Downstream::onResponseEnd(Call& call) {
  call.resp_end = true;
  if (!call.passThrough()) {
    startPostStage(call);
    return;
  }
  if (call.resp_trailers_only || !call.resp_submitted) {
    call.final_status = statusFrom(call.resp_headers);
    submitResponse(call);
  } else {
    call.final_status = statusFrom(call.resp_trailers);
    nghttp2_session_resume_data(session_, call.down_id);
    scheduleFlush();
  }
}

void Downstream::onUpstreamStreamClosed(Call& call, uint32_t error_code) {
  if (call.resp_end || call.answered) return;
  if (error_code == NGHTTP2_REFUSED_STREAM && !call.retried && !call.passThrough()) {
    // A backend that is going away refused the stream before processing it;
    // the whole request is still buffered, so send it to a fresh connection.
    call.retried = true;
    call.resp_headers.clear();
    forward(call);
    return;
  }
  auto status = absl::Status(codeOfReset(error_code),
                             cat("crihookd: backend reset the stream, HTTP/2 error ", error_code));
  if (!call.passThrough()) {
    replyWithStatus(call, status);
    onResponseEnd(call);
    return;
  }
  // Pass the reset on: the client maps its code to a status exactly as it
  // would had it talked to the runtime directly.
  call.final_status = status;
  resetBoth(call, error_code == NGHTTP2_NO_ERROR ? uint32_t{NGHTTP2_INTERNAL_ERROR} : error_code);
}

void Downstream::submitResponse(Call& call) {
  if (call.resp_submitted || closed()) return;
  call.resp_submitted = true;
  if (call.resp_trailers_only) {
    // Headers with END_STREAM carry the status; the runtime may have put it
    // in resp_trailers when crihookd synthesised it.
    const Headers& h = call.resp_headers.empty() ? call.resp_trailers : call.resp_headers;
    std::vector<nghttp2_nv> nv = toNv(h);
    nghttp2_submit_response(session_, call.down_id, nv.data(), nv.size(), nullptr);
  } else {
    std::vector<nghttp2_nv> nv = toNv(call.resp_headers);
    nghttp2_data_provider body{};
    body.read_callback = readResponseBody;
    nghttp2_submit_response(session_, call.down_id, nv.data(), nv.size(), &body);
  }
  if (!call.answered && call.resp_end) {
    call.answered = true;
    ctx_.active_calls.fetch_sub(1);
  }
  scheduleFlush();
}

ssize_t Downstream::readResponseBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                                     size_t length, uint32_t* flags, nghttp2_data_source*,
                                     void* user) {
  auto* self = static_cast<Downstream*>(user);
  Call* call = self->find(stream_id);
  if (call == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  size_t n = call->resp_body.read(buf, length);
  if (n > 0 && call->passThrough()) self->returnWindow(*call, n);
  if (!call->resp_body.empty() || !call->resp_end) {
    return n > 0 ? static_cast<ssize_t>(n) : static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED);
  }
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  if (!call->resp_trailers.empty()) {
    *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    std::vector<nghttp2_nv> nv = toNv(call->resp_trailers);
    nghttp2_submit_trailer(session, stream_id, nv.data(), nv.size());
  }
  if (!call->answered) {
    call->answered = true;
    self->ctx_.active_calls.fetch_sub(1);
  }
  return static_cast<ssize_t>(n);
}

void Downstream::answer(Call& call, const absl::Status& status) {
  if (call.answered) return;
  call.final_status = status;
  cancelUpstream(call);
  if (!call.resp_submitted) {
    replyWithStatus(call, status);
    call.resp_end = true;
    submitResponse(call);
  } else if (call.resp_frames.atBoundary() || call.resp_frames.cleanCut()) {
    call.resp_trailers = statusTrailers(status);
    call.resp_end = true;
    nghttp2_session_resume_data(session_, call.down_id);
  } else {
    resetBoth(call, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  scheduleFlush();
}

void Downstream::resetBoth(Call& call, uint32_t down_error) {
  cancelUpstream(call);
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call.down_id, down_error);
  if (!call.answered) {
    call.answered = true;
    ctx_.active_calls.fetch_sub(1);
  }
  scheduleFlush();
}

void Downstream::logCall(const Call& call) {
  if (!call.intercepted) return;
  const absl::Status& s = call.final_status;
  const auto level = s.ok() ? spdlog::level::info : spdlog::level::warn;
  if (!ctx_.log->should_log(level)) return;
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - call.start).count();
  static const CallIdentity kNobody;  // a call refused before it was decoded
  const CallIdentity& id = call.ic ? call.ic->identity : kNobody;
  // An id crihookd has not seen created (before a restart) has no pod name.
  // Names and ids come from the request: shown as they are when they are
  // what Kubernetes and the runtimes make (DNS names, hex ids), else quoted,
  // so a newline in a pod name cannot forge a log line.
  auto shown = [](std::string_view text) {
    const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '/' ||
             c == '_';
    });
    return plain ? std::string(text) : quote(text);
  };
  const std::string pod =
      id.pod_name.empty() ? "-" : shown(cat(id.pod_namespace, "/", id.pod_name));
  ctx_.log->log(level, "{} api={} pod={} sandbox={} container={} duration={}.{:03}ms status={}{}{}",
                call.intercepted->spec->name, apiName(call.intercepted->api), pod,
                id.sandbox_id.empty() ? "-" : shown(shortId(id.sandbox_id)),
                id.container_id.empty() ? "-" : shown(shortId(id.container_id)), micros / 1000,
                micros % 1000, absl::StatusCodeToString(s.code()),
                s.ok() ? "" : " message=", s.ok() ? "" : boundedMessage(sv(s.message())));
}

// ---------------------------------------------------------------------------
// Connection

bool LogLimiter::allow(uint64_t& held_back) {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) {
    ++held_back_;
    return false;
  }
  next_ = now + interval_;
  held_back = held_back_;
  held_back_ = 0;
  return true;
}

struct Connection::Impl final : public Downstream {
  using Downstream::Downstream;
};

Connection::Connection(Socket socket, RelayContext& ctx)
    : starting_(std::make_shared<Impl>(std::move(socket), ctx)), weak_(starting_) {}

Connection::~Connection() = default;

void Connection::start() {
  // Runs on the connection's own loop; from then on its I/O handlers keep it
  // alive.
  std::shared_ptr<Impl> impl = std::move(starting_);
  asio::post(impl->executor(), [impl] { impl->start(); });
}

void Connection::shutdown() {
  if (auto impl = weak_.lock()) asio::post(impl->executor(), [impl] { impl->shutdown(); });
}

void Connection::close() {
  if (auto impl = weak_.lock())
    asio::post(impl->executor(), [impl] { impl->closeAll("closed by crihookd"); });
}

bool Connection::alive() const { return !weak_.expired(); }

}  // namespace crihook
