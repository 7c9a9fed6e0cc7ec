#include "proxy/h2_session.h"

#include <boost/asio/write.hpp>

#include "base/text.h"

namespace crihook::relay {

namespace asio = boost::asio;

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
}

void H2Endpoint::flush() {
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

void H2Endpoint::startReading() {
  read_buf_.resize(kReadBufferBytes);
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  readAvailable();
}

void H2Endpoint::fail(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  onClosed(why);
}

void H2Endpoint::createSession(bool server, const SessionCallbacks& cb,
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

// Reads what the socket holds, then waits for more. A read that did not
// fill the buffer drained the socket, so the next read waits for
// readiness instead of trying (and failing) once more: one read per
// wake-up. Safe because each io_context runs on one thread: data arriving
// after the read is reported by the loop's next epoll_wait.
void H2Endpoint::readAvailable() {
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

void H2Endpoint::handleInput(size_t n) {
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

}  // namespace crihook::relay
