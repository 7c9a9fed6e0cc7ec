#include "test/support/raw_h2_backend.h"

#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

namespace crihook::testing {
namespace {

struct Stream {
  std::string path;
  std::string body;
  size_t sent = 0;
  bool no_status = false;  // trailers without grpc-status
  bool held = false;       // the message waits (DeafGoawayEcho, GatedEchoThenClose)
};

struct Session {
  RawH2Backend* owner;
  std::atomic<int>* streams;
  std::map<int32_t, Stream> by_id;
  nghttp2_session* h2 = nullptr;
  bool hangup = false;
  bool gated_hangup = false;  // closes without a reply once the gate opens (GatedHangup)
  bool close_after_send = false;
  std::string raw;       // bytes written as they are after nghttp2's next output
  int32_t flood_id = 0;  // a stream to flood with empty DATA frames
  int fd = -1;
  int32_t held_id = 0;  // a stream whose message waits until release_at
  bool gated = false;   // ... or, instead, until the backend's gate opens
  bool deaf = false;    // reads nothing more (DeafGoawayEcho, DeafSilent, DeafEcho)
  std::chrono::steady_clock::time_point release_at;
};

std::string rawFrame(uint8_t type, uint8_t flags, int32_t stream, const std::string& payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>((stream >> 24) & 0x7f);
  f += static_cast<char>(stream >> 16);
  f += static_cast<char>(stream >> 8);
  f += static_cast<char>(stream);
  return f + payload;
}

nghttp2_nv nv(const char* name, const std::string& value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), std::strlen(name),
          value.size(), NGHTTP2_NV_FLAG_NONE};
}

ssize_t readBody(nghttp2_session* h2, int32_t id, uint8_t* buf, size_t len, uint32_t* flags,
                 nghttp2_data_source*, void* user) {
  auto* s = static_cast<Session*>(user);
  Stream& st = s->by_id[id];
  if (st.held) return NGHTTP2_ERR_DEFERRED;
  size_t n = std::min(len, st.body.size() - st.sent);
  std::memcpy(buf, st.body.data() + st.sent, n);
  st.sent += n;
  if (st.sent == st.body.size()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    static const std::string ok = "0", pad = "x";
    nghttp2_nv trailers[] = {st.no_status ? nv("x-pad", pad) : nv("grpc-status", ok)};
    nghttp2_submit_trailer(h2, id, trailers, 1);
  }
  return static_cast<ssize_t>(n);
}

// Echo's reply and, after it in the same write, more SETTINGS than nghttp2
// queues ACKs for (1000): written whole, past the session, so that the peer
// reads the reply's end and the flood in one read.
std::string replyThenSettingsFlood(int32_t id, const std::string& body) {
  auto literal = [](std::string_view name, std::string_view value) {
    // Without indexing, a new name (RFC 7541 6.2.2); both shorter than 127.
    return std::string(1, '\0') + static_cast<char>(name.size()) + std::string(name) +
           static_cast<char>(value.size()) + std::string(value);
  };
  // HEADERS (END_HEADERS), DATA, HEADERS (END_HEADERS, END_STREAM).
  const std::string headers =
      literal(":status", "200") + literal("content-type", "application/grpc");
  std::string out = rawFrame(1, 0x4, id, headers) + rawFrame(0, 0, id, body);
  out += rawFrame(1, 0x5, id, literal("grpc-status", "0"));
  for (int i = 0; i < 1100; ++i) out += rawFrame(4, 0, 0, "");
  return out;
}

// Shuts the connection's reading side (every later write of the peer's
// fails, EPIPE) and sends SETTINGS, whose ACK the peer must then write.
void goDeaf(Session& s) {
  ::shutdown(s.fd, SHUT_RD);
  s.deaf = true;
  nghttp2_settings_entry e{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100};
  nghttp2_submit_settings(s.h2, NGHTTP2_FLAG_NONE, &e, 1);
}

// The request's message back, grpc-status 0, and what `verb` adds to that.
void echo(Session& s, int32_t id, const std::string& verb) {
  Stream& st = s.by_id[id];
  static const std::string status200 = "200", grpc = "application/grpc";
  if (verb == "DeafEcho") goDeaf(s);
  if (verb == "GatedEchoThenClose") {
    st.held = true;
    s.held_id = id;
    s.gated = true;
  }
  if (verb == "CloseAfterReply") {
    // A PING with the reply: crihookd owes its ack when the server is gone.
    nghttp2_submit_ping(s.h2, NGHTTP2_FLAG_NONE, nullptr);
    s.close_after_send = true;
  }
  // Late by less than crihookd's PING ACK delay (proxy/transparent.h).
  if (verb == "SlowEcho") std::this_thread::sleep_for(std::chrono::microseconds(500));
  if (verb == "Compressed" && !st.body.empty()) st.body[0] = 1;
  if (verb == "TwoMessages") st.body += st.body;
  if (verb == "NoStatus") st.no_status = true;
  if (verb == "GoawayEcho")
    nghttp2_submit_goaway(s.h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR, nullptr, 0);
  nghttp2_nv h[] = {nv(":status", status200), nv("content-type", grpc)};
  nghttp2_data_provider body{};
  body.read_callback = readBody;
  nghttp2_submit_response(s.h2, id, h, 2, &body);
}

void respond(Session& s, int32_t id) {
  Stream& st = s.by_id[id];
  const std::string answer_as = s.owner->answerAs();
  const std::string verb = answer_as.empty() ? st.path.substr(st.path.rfind('/') + 1) : answer_as;
  static const std::string status200 = "200", grpc = "application/grpc", denied = "7",
                           denied_msg = "denied by raw backend", status100 = "100";
  if (s.owner->informationalFirst()) {
    nghttp2_nv h[] = {nv(":status", status100)};
    nghttp2_submit_headers(s.h2, NGHTTP2_FLAG_NONE, id, nullptr, h, 1, nullptr);
  }
  if (verb == "ResetCancel") {
    nghttp2_submit_rst_stream(s.h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  } else if (verb == "ResetInternal") {
    nghttp2_submit_rst_stream(s.h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
  } else if (verb == "TrailersOnly") {
    nghttp2_nv h[] = {nv(":status", status200), nv("content-type", grpc), nv("grpc-status", denied),
                      nv("grpc-message", denied_msg)};
    nghttp2_submit_response(s.h2, id, h, 4, nullptr);
  } else if (verb == "HugeHeaders") {
    // HPACK amplification from the runtime's side: one 3000-byte field
    // indexed once, then referenced: a ~3 KiB block decoding to ~300 KB.
    static const std::string ok = "0", pad(3000, 'p');
    std::vector<nghttp2_nv> h = {nv(":status", status200), nv("content-type", grpc),
                                 nv("grpc-status", ok)};
    for (int i = 0; i < 100; ++i) h.push_back(nv("x-pad", pad));
    nghttp2_submit_response(s.h2, id, h.data(), h.size(), nullptr);
  } else if (verb == "Http503" || verb == "TextHtml") {
    static const std::string status503 = "503", html = "text/html";
    nghttp2_nv h[] = {nv(":status", verb == "Http503" ? status503 : status200),
                      nv("content-type", verb == "Http503" ? grpc : html)};
    nghttp2_submit_response(s.h2, id, h, verb == "Http503" ? 1 : 2, nullptr);
  } else if (verb == "Silent") {
  } else if (verb == "Hangup") {
    s.hangup = true;
  } else if (verb == "GatedHangup") {
    s.gated_hangup = true;
  } else if (verb == "Chatty" || verb == "BigOpen" || verb == "HalfMessageThenClose") {
    nghttp2_nv h[] = {nv(":status", status200), nv("content-type", grpc)};
    nghttp2_submit_headers(s.h2, NGHTTP2_FLAG_NONE, id, nullptr, h, 2, nullptr);
    if (verb == "Chatty") s.flood_id = id;
    if (verb == "BigOpen") s.raw = rawFrame(0, 0, id, std::string(5000, 'b'));
    if (verb == "HalfMessageThenClose") {
      s.raw = rawFrame(0, 0, id, std::string("\0\0\0\0\x64", 5) + std::string(10, 'h'));
      s.close_after_send = true;
    }
  } else if (verb == "BadFrame") {
    s.raw = rawFrame(0, 0, 0, "x");
  } else if (verb == "DeafSilent") {
    // Deaf, and then nothing: neither a reply nor the connection's end.
    goDeaf(s);
  } else if (verb == "DeafGoawayEcho") {
    // Deaf first: every later write of the peer's fails, its SETTINGS ACK
    // included, while the reply is still on its way.
    goDeaf(s);
    nghttp2_submit_goaway(s.h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR, nullptr, 0);
    st.held = true;
    s.held_id = id;
    s.release_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    nghttp2_nv h[] = {nv(":status", status200), nv("content-type", grpc)};
    nghttp2_data_provider body{};
    body.read_callback = readBody;
    nghttp2_submit_response(s.h2, id, h, 2, &body);
  } else if (verb == "FloodAfterReply") {
    s.raw = replyThenSettingsFlood(id, st.body);
  } else if (verb == "GoawayBelow") {
    nghttp2_submit_goaway(s.h2, NGHTTP2_FLAG_NONE, id - 2 > 0 ? id - 2 : 0, NGHTTP2_NO_ERROR,
                          nullptr, 0);
  } else {
    echo(s, id, verb);
  }
}

// Lets a held message (DeafGoawayEcho's once release_at comes,
// GatedEchoThenClose's once the gate is open) go, the connection to close
// after it. False while it waits, or when none is held.
bool releaseHeld(Session& s, bool gate_open) {
  if (s.held_id == 0) return false;
  if (s.gated ? !gate_open : std::chrono::steady_clock::now() < s.release_at) return false;
  s.by_id[s.held_id].held = false;
  nghttp2_session_resume_data(s.h2, s.held_id);
  s.held_id = 0;
  s.close_after_send = true;
  return true;
}

}  // namespace

RawH2Backend::RawH2Backend(std::string socket_path) : path_(std::move(socket_path)) {
  ::unlink(path_.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 8) != 0) {
    throw std::runtime_error("raw backend: cannot listen on " + path_);
  }
  thread_ = std::thread([this] { serve(); });
}

RawH2Backend::~RawH2Backend() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  thread_.join();
  {
    // A connection blocked in a send to a peer that stopped reading.
    std::lock_guard lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : workers_) t.join();
  ::close(listen_fd_);
  ::unlink(path_.c_str());
}

void RawH2Backend::serve() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    connections_++;
    // Each connection on a thread of its own: a relay may hold one
    // connection open while it opens another (the transparent relay's side
    // connection for intercepted calls).
    std::lock_guard lock(mu_);
    open_fds_.insert(fd);
    workers_.emplace_back([this, fd] {
      serveConnection(fd);
      std::lock_guard lock(mu_);
      open_fds_.erase(fd);
      ::close(fd);
      closed_connections_++;
    });
  }
}

void RawH2Backend::serveConnection(int fd) {
  Session s{this, &streams_, {}, nullptr};
  s.fd = fd;
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(
      cbs,
      [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t namelen,
         const uint8_t* value, size_t valuelen, uint8_t, void* user) -> int {
        auto* s = static_cast<Session*>(user);
        if (std::string(reinterpret_cast<const char*>(name), namelen) == ":path") {
          s->by_id[f->hd.stream_id].path.assign(reinterpret_cast<const char*>(value), valuelen);
        }
        return 0;
      });
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      cbs,
      [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
         void* user) -> int {
        static_cast<Session*>(user)->by_id[id].body.append(reinterpret_cast<const char*>(data),
                                                           len);
        return 0;
      });
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* f, void* user) -> int {
        auto* s = static_cast<Session*>(user);
        if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
            (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
          (*s->streams)++;
          respond(*s, f->hd.stream_id);
        }
        return 0;
      });
  // HugeHeaders sends a block nghttp2 would refuse to send by default (it
  // bounds the block by its decoded size, 64 KiB).
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_max_send_header_block_length(opt, 16 << 20);
  nghttp2_session_server_new2(&s.h2, cbs, &s, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(s.h2, NGHTTP2_FLAG_NONE, nullptr, 0);

  std::vector<uint8_t> buf(1 << 16);
  while (!stopping_) {
    for (;;) {
      const uint8_t* out = nullptr;
      ssize_t n = nghttp2_session_mem_send(s.h2, &out);
      if (n <= 0) break;
      if (::send(fd, out, static_cast<size_t>(n), MSG_NOSIGNAL) != n) goto done;
    }
    if (!s.raw.empty()) {
      if (::send(fd, s.raw.data(), s.raw.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(s.raw.size()))
        break;
      s.raw.clear();
    }
    if (s.flood_id != 0) {
      // Padded DATA frames with no data: flow-controlled bytes that are
      // never a reply, so many that the client's socket is never empty.
      std::string batch;
      const std::string padded = std::string(1, '\xff') + std::string(255, '\0');
      for (int i = 0; i < 64; ++i) batch += rawFrame(0, 0x8, s.flood_id, padded);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (std::chrono::steady_clock::now() < until &&
             ::send(fd, batch.data(), batch.size(), MSG_NOSIGNAL) > 0) {
      }
      break;
    }
    if (s.hangup || s.close_after_send || (s.gated_hangup && gate_open_)) break;
    if (releaseHeld(s, gate_open_)) continue;
    if (s.deaf) {
      // Nothing to read; a held message goes when its time comes (above).
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    if (!nghttp2_session_want_read(s.h2) && !nghttp2_session_want_write(s.h2)) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    if (nghttp2_session_mem_recv(s.h2, buf.data(), static_cast<size_t>(n)) < 0) break;
  }
done:
  nghttp2_session_del(s.h2);
}

namespace {

struct ClientState {
  const std::string* body;
  size_t sent = 0;
  RawH2Reply reply;
  bool closed = false;
};

}  // namespace

RawH2Reply rawH2Call(const std::string& socket_path, const std::string& path,
                     const std::string& body) {
  ClientState st{&body};
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw std::runtime_error("raw client: cannot connect to " + socket_path);
  }
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(
      cbs,
      [](nghttp2_session*, const nghttp2_frame*, const uint8_t* name, size_t namelen,
         const uint8_t* value, size_t valuelen, uint8_t, void* user) -> int {
        auto* st = static_cast<ClientState*>(user);
        std::string n(reinterpret_cast<const char*>(name), namelen);
        std::string v(reinterpret_cast<const char*>(value), valuelen);
        if (n == "grpc-status") st->reply.grpc_status = std::stoi(v);
        if (n == "grpc-message") st->reply.grpc_message = v;
        return 0;
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      cbs, [](nghttp2_session*, int32_t, uint32_t code, void* user) -> int {
        auto* st = static_cast<ClientState*>(user);
        st->closed = true;
        if (code != NGHTTP2_NO_ERROR) {
          st->reply.reset = true;
          st->reply.reset_code = code;
        }
        return 0;
      });
  nghttp2_session* h2 = nullptr;
  nghttp2_session_client_new(&h2, cbs, &st);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, nullptr, 0);
  static const std::string post = "POST", http = "http", host = "localhost",
                           grpc = "application/grpc", te = "trailers";
  nghttp2_nv h[] = {nv(":method", post),    nv(":scheme", http),      nv(":path", path),
                    nv(":authority", host), nv("content-type", grpc), nv("te", te)};
  nghttp2_data_provider provider{};
  provider.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                              nghttp2_data_source*, void* user) -> ssize_t {
    auto* st = static_cast<ClientState*>(user);
    size_t n = std::min(len, st->body->size() - st->sent);
    std::memcpy(buf, st->body->data() + st->sent, n);
    st->sent += n;
    if (st->sent == st->body->size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  };
  nghttp2_submit_request(h2, nullptr, h, 6, &provider, nullptr);
  std::vector<uint8_t> buf(1 << 16);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!st.closed && std::chrono::steady_clock::now() < until) {
    for (;;) {
      const uint8_t* out = nullptr;
      ssize_t n = nghttp2_session_mem_send(h2, &out);
      if (n <= 0) break;
      if (::send(fd, out, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
        st.closed = true;
        break;
      }
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    if (nghttp2_session_mem_recv(h2, buf.data(), static_cast<size_t>(n)) < 0) break;
  }
  nghttp2_session_del(h2);
  ::close(fd);
  return st.reply;
}

}  // namespace crihook::testing
