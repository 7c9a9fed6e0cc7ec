#pragma once

// One end of a relayed connection: an nghttp2 session driven over a Unix
// socket. Both ends of the relay (Downstream, the kubelet side; Upstream, the
// runtime side) derive from H2Endpoint, and install their nghttp2 callbacks
// through SessionTrampolines, written once for both.
//
// Threading: an endpoint and everything it calls run on the EventLoop its
// socket is watched by; nothing here is thread-safe.

#include <nghttp2/nghttp2.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/event_loop.h"

namespace crihook::relay {

// A PING's ACK waits at most this long for other bytes to the same peer to
// go out with, and only while such bytes are expected (replyExpected: a call
// on the connection not yet answered); otherwise it goes out at once, as
// nghttp2 would send it. grpc-go, kubelet's and containerd's gRPC, sends a
// PING with nearly every message it receives (its bandwidth estimator):
// acked at once, each costs a write here and a wake-up of its sender. A call
// answered within the delay carries the ACK in its reply's write; a slower
// one lets it go alone when the delay ends. At most kMaxOwedPingAcks ACKs
// wait: past that (a peer that sends PINGs and does not read), they are
// handed to nghttp2 at once, whose bound on queued ACKs ends the connection.
inline constexpr std::chrono::milliseconds kPingAckDelay{2};
inline constexpr size_t kMaxOwedPingAcks = 16;

// A client connection with nothing left to do (after GOAWAY, every stream
// answered and written) is half-closed, and what the client still sends is
// read and dropped until it closes, for at most this long: a gRPC client
// whose write fails (the socket closed under it) drops what it had not read
// yet and reports "Broken pipe" for calls that were answered. Both relays.
inline constexpr std::chrono::milliseconds kLingerAfterFinish{1000};

// HTTP/2 windows. Per stream 1 MiB keeps a single 16 MiB message moving at
// memory speed while bounding what one stream can park in crihookd; the
// connection window lets 16 such streams run at once.
inline constexpr int32_t kStreamWindow = 1 << 20;
inline constexpr int32_t kConnectionWindow = 16 << 20;
inline constexpr uint32_t kMaxConcurrentStreams = 1024;

// The nghttp2 callbacks of one side; the optional ones may stay null.
struct SessionCallbacks {
  nghttp2_on_begin_headers_callback begin_headers = nullptr;
  nghttp2_on_header_callback header;
  nghttp2_on_frame_recv_callback frame_recv;
  nghttp2_on_data_chunk_recv_callback data_chunk;
  nghttp2_on_stream_close_callback stream_close;
  nghttp2_on_frame_send_callback frame_send = nullptr;
};

class H2Endpoint : public IoHandler, public std::enable_shared_from_this<H2Endpoint> {
 public:
  // `fd`: a connected, non-blocking stream socket the endpoint owns, or -1
  // until one is set (Upstream::connect). `loop` outlives the endpoint.
  H2Endpoint(EventLoop& loop, int fd) : loop_(loop), fd_(fd) {}
  ~H2Endpoint() override;

  // Null until createSession.
  nghttp2_session* session() const { return session_; }
  bool closed() const { return closed_; }
  EventLoop& loop() { return loop_; }

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
    loop_.post([self = shared_from_this()] {
      self->flush_scheduled_ = false;
      self->flush();
    });
  }

  // Writes what nghttp2 has to send, as one send while the socket takes it
  // (the common case costs one system call); only a full socket buffer
  // keeps the rest until the loop tells of room (onWritable). A send error,
  // or a session with nothing left to do, fails the endpoint (the client
  // side reads what the runtime sent before it closed first: readToEnd).
  void flush();

  // Has the loop watch the socket; each read is fed to the session. FAILs
  // the endpoint when the loop refuses the socket.
  void startReading();

  // Closes the socket and reports why (onClosed), once.
  void fail(const std::string& why);

  // A PING came (not an ACK): its ACK is owed, and goes out with the next
  // flush (the session is created with no automatic PING ACK; see
  // kPingAckDelay). From the frame callback; false when nghttp2 refused the
  // ACKs (a flood of PINGs), which ends the connection.
  bool owePingAck(const uint8_t* opaque_data);

 protected:
  // The endpoint has closed: called once, from fail.
  virtual void onClosed(const std::string& why) = 0;
  // After the session took a read without error.
  virtual void afterInput() {}
  // Whether bytes to this peer are expected soon (a call not yet answered):
  // an owed PING ACK waits up to kPingAckDelay for them.
  virtual bool replyExpected() const { return false; }

  // Both sides take window updates into their own hands (no automatic
  // WINDOW_UPDATE): bytes count as consumed once the other side has taken
  // them, which carries flow control end to end. Sends the initial SETTINGS
  // and opens the connection window. The callbacks get `this` (an
  // H2Endpoint*) as their user data.
  void createSession(bool server, const SessionCallbacks& cb,
                     std::initializer_list<nghttp2_settings_entry> settings);

  EventLoop& loop_;
  int fd_;
  nghttp2_session* session_ = nullptr;
  H2Endpoint* group_ = nullptr;  // the leader; null on the leader itself

 private:
  void onReadable(bool hangup) override { readAvailable(hangup); }
  void onWritable() override;
  void readAvailable(bool hangup = false);
  void handleInput(size_t n);
  // Sends out_ from out_sent_ on; false when the socket is full (the rest
  // waits for onWritable) or the endpoint failed.
  bool sendPending();
  // Hands the owed PING ACKs to nghttp2 (to go out first in the next
  // write). Its error when it refuses them (NGHTTP2_ERR_FLOODED: more ACKs
  // queued than it allows), else 0.
  int submitOwedPingAcks();
  // The same outside nghttp2's callbacks: fails the endpoint on a refusal
  // (false).
  bool sendOwedPingAcks();
  // The server side's end once the session is finished (kLingerAfterFinish).
  void linger();
  // The client side's end when a write finds the runtime gone (EPIPE,
  // ECONNRESET): a runtime may send its last replies and close at once (a
  // GOAWAY, the replies, close), and a frame of ours, written before we read
  // them, then fails. Nothing more is written; what the socket holds is read
  // and handled, so each reply complete in it still reaches its caller, and
  // the endpoint fails with `write_error` at the end of it, or after
  // kLingerAfterFinish if the peer never ends it.
  void readToEnd(const std::string& write_error);

  std::vector<std::array<uint8_t, 8>> owed_ping_acks_;
  uint64_t ping_ack_timer_ = 0;  // 0: none armed
  std::string input_error_;      // why a frame callback stopped the input

  std::vector<uint8_t> read_buf_;
  std::string out_;
  size_t out_sent_ = 0;
  bool writing_ = false;  // out_ waits for room in the socket
  bool flush_scheduled_ = false;
  bool queued_ = false;  // in the group's dirty_ list
  bool closed_ = false;
  bool server_ = false;        // kubelet's side (createSession)
  bool lingering_ = false;     // half-closed, reading to the client's end
  uint64_t linger_timer_ = 0;  // linger's or readToEnd's bound
  std::string write_error_;    // set by readToEnd: nothing is written any more
  // Batching of flushes while a handler of the group runs; on the group's
  // leader (the kubelet-side connection) only.
  bool batching_ = false;
  std::vector<std::shared_ptr<H2Endpoint>> dirty_;
};

// The nghttp2 callbacks of a side, written once for both: each unpacks
// nghttp2's arguments and calls the Side member of the same meaning, on the
// endpoint the session was created with. Side derives from H2Endpoint and
// declares (befriending SessionTrampolines<Side> where they are private)
//   int onHeader(const nghttp2_frame&, std::string_view name, std::string_view value);
//   int onFrameRecv(const nghttp2_frame&);
//   int onDataChunk(int32_t stream_id, const uint8_t* data, size_t len);
//   int onStreamClose(int32_t stream_id, uint32_t error_code);
//   ssize_t readBody(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags);
// and, if it wants them, onBeginHeaders(const nghttp2_frame&) and
// onFrameSend(const nghttp2_frame&). Templates, so that each callback's body
// is inlined into its trampoline in the side's own translation unit.
template <class Side>
struct SessionTrampolines {
  static Side& side(void* user) { return static_cast<Side&>(*static_cast<H2Endpoint*>(user)); }

  static int beginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    return side(user).onBeginHeaders(*frame);
  }
  static int header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                    size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    return side(user).onHeader(*frame,
                               std::string_view(reinterpret_cast<const char*>(name), namelen),
                               std::string_view(reinterpret_cast<const char*>(value), valuelen));
  }
  static int frameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_PING && !(frame->hd.flags & NGHTTP2_FLAG_ACK) &&
        !static_cast<H2Endpoint*>(user)->owePingAck(frame->ping.opaque_data))
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    return side(user).onFrameRecv(*frame);
  }
  static int dataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                       size_t len, void* user) {
    return side(user).onDataChunk(stream_id, data, len);
  }
  static int streamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user) {
    return side(user).onStreamClose(stream_id, error_code);
  }
  static int frameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    return side(user).onFrameSend(*frame);
  }
  static ssize_t readBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source*, void* user) {
    return side(user).readBody(stream_id, buf, length, flags);
  }

  // The table for createSession.
  static SessionCallbacks callbacks() {
    SessionCallbacks cb{nullptr, header, frameRecv, dataChunk, streamClose, nullptr};
    if constexpr (requires(Side & s, const nghttp2_frame& f) { s.onBeginHeaders(f); })
      cb.begin_headers = beginHeaders;
    if constexpr (requires(Side & s, const nghttp2_frame& f) { s.onFrameSend(f); })
      cb.frame_send = frameSend;
    return cb;
  }

  // A data provider whose bytes come from Side::readBody.
  static nghttp2_data_provider body() {
    nghttp2_data_provider p{};
    p.read_callback = readBody;
    return p;
  }
};

}  // namespace crihook::relay
