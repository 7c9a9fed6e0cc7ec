#include "proxy/h2_session.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/text.h"

namespace crihook::relay {

namespace {

constexpr size_t kReadBufferBytes = 64 << 10;
constexpr size_t kWriteBatchBytes = 64 << 10;
// A header block is HEADERS + at most this many CONTINUATION frames, then
// nghttp2 ends the connection (its default since CVE-2024-28182, said
// here): a block of 9 x 16 KiB is far past the 64 KiB cap anyway.
constexpr size_t kMaxContinuations = 8;

}  // namespace

H2Endpoint::~H2Endpoint() {
  if (session_) nghttp2_session_del(session_);
  if (fd_ >= 0) ::close(fd_);
}

void H2Endpoint::flush() {
  if (closed_ || writing_ || session_ == nullptr || to_end_.active()) return;
  for (;;) {
    out_.clear();
    out_sent_ = 0;
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
      if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_))
        fail("HTTP/2 session finished");
      return;
    }
    if (!sendPending()) return;
  }
}

bool H2Endpoint::sendPending() {
  while (out_sent_ < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      out_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      // Full: the rest goes when the peer has read (onWritable).
      writing_ = true;
      loop_.wantWritable(fd_, true);
      return false;
    }
    const int e = errno;
    const std::string why = cat("write: ", std::strerror(e));
    if (e == EPIPE || e == ECONNRESET) {
      readToEnd(why);
    } else {
      fail(why);
    }
    return false;
  }
  return true;
}

void H2Endpoint::readToEnd(const std::string& write_error) {
  out_.clear();
  out_sent_ = 0;
  if (writing_) loop_.wantWritable(fd_, false);
  writing_ = false;
  std::weak_ptr<H2Endpoint> weak = weak_from_this();
  to_end_.start(
      write_error,
      // Posted: the write may have failed inside this connection's own input.
      [self = shared_from_this()] {
        if (!self->closed_) self->readAvailable(true);
      },
      [weak](const std::string& why) {
        if (auto self = weak.lock()) self->fail(why);
      });
}

void H2Endpoint::onWritable() {
  if (closed_ || !writing_) return;
  if (!sendPending()) return;
  writing_ = false;
  loop_.wantWritable(fd_, false);
  flush();
}

void H2Endpoint::startReading() {
  read_buf_.resize(kReadBufferBytes);
  if (absl::Status s = loop_.watch(fd_, shared_from_this()); !s.ok())
    fail(cat("watch: ", s.message()));
}

void H2Endpoint::fail(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  to_end_.stop();
  if (fd_ >= 0) {
    loop_.unwatch(fd_);
    ::close(fd_);
    fd_ = -1;
  }
  onClosed(why);
}

void H2Endpoint::createSession(const SessionCallbacks& cb,
                               std::initializer_list<nghttp2_settings_entry> settings) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, cb.header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cb.frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cb.data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cb.stream_close);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_continuations(opt, kMaxContinuations);
  nghttp2_option_set_peer_max_concurrent_streams(opt, 1000);
  nghttp2_session_client_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.begin(), settings.size());
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

// Reads what the socket holds. The socket is watched edge-triggered, so it
// must be drained before the next edge can come; a read that did not fill
// the buffer drained it, so no read is spent on learning so (EAGAIN): one
// read per wake-up. Data arriving after that read is a new edge; a peer
// that closed after sending (`hangup`) is read to its end.
void H2Endpoint::readAvailable(bool hangup) {
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::recv(fd_, read_buf_.data(), read_buf_.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      // After a failed write, the end of what the peer sent (or the reset
      // its close left) is the write's failure coming due.
      fail(to_end_.active() ? to_end_.why()
           : n == 0         ? "peer closed the connection"
                            : cat("read: ", std::strerror(errno)));
      return;
    }
    handleInput(static_cast<size_t>(n));
    if (closed_) return;
    if (static_cast<size_t>(n) < read_buf_.size() && !hangup) return;
  }
  // A peer that keeps the socket full: let other connections run, and come
  // back (no new edge would tell).
  loop_.post([self = shared_from_this(), hangup] {
    if (!self->closed_) self->readAvailable(hangup);
  });
}

void H2Endpoint::handleInput(size_t n) {
  in_input_ = true;
  const ssize_t rv = nghttp2_session_mem_recv(session_, read_buf_.data(), n);
  in_input_ = false;
  if (rv < 0) {
    fail(cat("HTTP/2 protocol error: ", nghttp2_strerror(static_cast<int>(rv))));
    return;
  }
  afterInput();
  flush();
}

}  // namespace crihook::relay
