#pragma once

// An nghttp2 client session driven over a Unix socket: crihookd's own
// HTTP/2 connection to the runtime (Upstream, upstream.h, the side connection
// of the calls crihookd answers itself), whose nghttp2 callbacks are
// installed through SessionTrampolines.
//
// Threading: an endpoint and everything it calls run on the EventLoop its
// socket is watched by; nothing here is thread-safe.

#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/event_loop.h"
#include "proxy/linger.h"

namespace crihook::relay {

// HTTP/2 windows. Per stream 1 MiB keeps a single 16 MiB message moving at
// memory speed while bounding what one stream can park in crihookd; the
// connection window lets 16 such streams run at once.
inline constexpr int32_t kStreamWindow = 1 << 20;
inline constexpr int32_t kConnectionWindow = 16 << 20;
inline constexpr uint32_t kMaxConcurrentStreams = 1024;

// The nghttp2 callbacks of a session.
struct SessionCallbacks {
  nghttp2_on_header_callback header;
  nghttp2_on_frame_recv_callback frame_recv;
  nghttp2_on_data_chunk_recv_callback data_chunk;
  nghttp2_on_stream_close_callback stream_close;
};

class H2Endpoint : public IoHandler, public std::enable_shared_from_this<H2Endpoint> {
 public:
  // `fd`: a connected, non-blocking stream socket the endpoint owns, or -1
  // until one is set (Upstream::connect). `loop` outlives the endpoint.
  H2Endpoint(EventLoop& loop, int fd) : loop_(loop), fd_(fd), to_end_(loop) {}
  ~H2Endpoint() override;

  // Null until createSession.
  nghttp2_session* session() const { return session_; }
  bool closed() const { return closed_; }
  EventLoop& loop() { return loop_; }

  // Queues a flush of whatever nghttp2 has to send: inside the endpoint's
  // own input handling it runs when the input has been handled, so a
  // call's bytes go out in the same turn of the event loop; elsewhere it is
  // posted. Either way several requests become one write.
  void scheduleFlush() {
    if (closed_ || in_input_ || flush_scheduled_) return;
    flush_scheduled_ = true;
    loop_.post([self = shared_from_this()] {
      self->flush_scheduled_ = false;
      self->flush();
    });
  }

  // Writes what nghttp2 has to send, as one send while the socket takes it
  // (the common case costs one system call); only a full socket buffer
  // keeps the rest until the loop tells of room (onWritable). A send error,
  // or a session with nothing left to do, fails the endpoint (one that finds
  // the runtime gone reads what it sent before it closed first: readToEnd).
  void flush();

  // Has the loop watch the socket; each read is fed to the session. FAILs
  // the endpoint when the loop refuses the socket.
  void startReading();

  // Closes the socket and reports why (onClosed), once.
  void fail(const std::string& why);

 protected:
  // The endpoint has closed: called once, from fail.
  virtual void onClosed(const std::string& why) = 0;
  // After the session took a read without error.
  virtual void afterInput() {}

  // A client session that takes window updates into its own hands (no
  // automatic WINDOW_UPDATE): bytes count as consumed once the other side
  // has taken them, which carries flow control end to end. Sends the
  // initial SETTINGS and opens the connection window. The callbacks get
  // `this` (an H2Endpoint*) as their user data.
  void createSession(const SessionCallbacks& cb,
                     std::initializer_list<nghttp2_settings_entry> settings);

  EventLoop& loop_;
  int fd_;
  nghttp2_session* session_ = nullptr;

 private:
  void onReadable(bool hangup) override { readAvailable(hangup); }
  void onWritable() override;
  void readAvailable(bool hangup = false);
  void handleInput(size_t n);
  // Sends out_ from out_sent_ on; false when the socket is full (the rest
  // waits for onWritable) or the endpoint failed.
  bool sendPending();
  // A write found the runtime gone (EPIPE, ECONNRESET): a runtime may send
  // its last replies and close at once (a GOAWAY, the replies, close), and
  // a frame of ours, written before we read them, then fails. Nothing more
  // is written; what the socket holds is read and handled, so each reply
  // complete in it still reaches its caller, and the endpoint fails with
  // `write_error` at the end of it, or after kLingerAfterFinish if the peer
  // never ends it (Linger).
  void readToEnd(const std::string& write_error);

  std::vector<uint8_t> read_buf_;
  std::string out_;
  size_t out_sent_ = 0;
  bool writing_ = false;  // out_ waits for room in the socket
  bool flush_scheduled_ = false;
  bool in_input_ = false;  // handleInput runs: it flushes at its end
  bool closed_ = false;
  Linger to_end_;  // readToEnd's: nothing is written any more while it waits
};

// The nghttp2 callbacks of a side: each unpacks nghttp2's arguments and
// calls the Side member of the same meaning, on the endpoint the session was
// created with. Side derives from H2Endpoint and declares (befriending
// SessionTrampolines<Side> where they are private)
//   int onHeader(const nghttp2_frame&, std::string_view name, std::string_view value);
//   int onFrameRecv(const nghttp2_frame&);
//   int onDataChunk(int32_t stream_id, const uint8_t* data, size_t len);
//   int onStreamClose(int32_t stream_id, uint32_t error_code);
//   ssize_t readBody(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags);
// A template, so that each callback's body is inlined into its trampoline in
// the side's own translation unit.
template <class Side>
struct SessionTrampolines {
  static Side& side(void* user) { return static_cast<Side&>(*static_cast<H2Endpoint*>(user)); }

  static int header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                    size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    return side(user).onHeader(*frame,
                               std::string_view(reinterpret_cast<const char*>(name), namelen),
                               std::string_view(reinterpret_cast<const char*>(value), valuelen));
  }
  static int frameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    return side(user).onFrameRecv(*frame);
  }
  static int dataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                       size_t len, void* user) {
    return side(user).onDataChunk(stream_id, data, len);
  }
  static int streamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user) {
    return side(user).onStreamClose(stream_id, error_code);
  }
  static ssize_t readBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source*, void* user) {
    return side(user).readBody(stream_id, buf, length, flags);
  }

  // The table for createSession.
  static SessionCallbacks callbacks() { return {header, frameRecv, dataChunk, streamClose}; }

  // A data provider whose bytes come from Side::readBody.
  static nghttp2_data_provider body() {
    nghttp2_data_provider p{};
    p.read_callback = readBody;
    return p;
  }
};

}  // namespace crihook::relay
