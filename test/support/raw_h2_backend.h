#pragma once

// A runtime stand-in that speaks HTTP/2 directly (nghttp2), for the edge
// cases a gRPC server library will not produce on demand: RST_STREAM with a
// chosen code, a trailers-only reply, GOAWAY refusing a stream.
//
// Behaviour by request path (the last path segment):
//   .../ResetCancel     RST_STREAM(CANCEL) once the request is in
//   .../ResetInternal   RST_STREAM(INTERNAL_ERROR)
//   .../TrailersOnly    HEADERS+END_STREAM with grpc-status 7 "denied by raw backend"
//   .../Echo            the request message back, grpc-status 0
//   .../GoawayEcho      GOAWAY (last stream id = this one) then Echo
//   .../SlowEcho        Echo, 0.5 ms after the request came
//   .../HugeHeaders     trailers-only grpc-status 0 with 100 x 3000-byte x-pad
//                       fields (HPACK-amplified: ~300 KB decoded)
// and, for a client's view of a broken server (base/grpc_channel.h):
//   .../Http503         :status 503, no gRPC fields, END_STREAM
//   .../TextHtml        :status 200, content-type text/html, END_STREAM
//   .../Compressed      Echo with the message's compressed flag set
//   .../TwoMessages     the request message back twice, grpc-status 0
//   .../NoStatus        Echo with trailers that lack grpc-status
//   .../Silent          nothing, ever (the stream stays open)
//   .../Hangup          the connection closed, no reply
//   .../Chatty          response headers, then DATA frames of padding only as
//                       fast as the socket takes them for 3 s (never a reply)
//   .../BigOpen         response headers and 5000 bytes of DATA, the stream
//                       left open
//   .../HalfMessageThenClose response headers and DATA of a message cut
//                       short (10 of the 100 bytes its header announces),
//                       then the connection closed
//   .../BadFrame        a DATA frame on stream 0 (a connection error), the
//                       connection left open
//   .../CloseAfterReply a PING and Echo, then the connection closed at once
//   .../FloodAfterReply Echo's reply and, in the same write, 1100 SETTINGS
//                       (nghttp2 queues ACKs for 1000); the connection left
//                       open
//   .../GoawayBelow     GOAWAY naming the stream before this one as the last:
//                       this stream refused
//   .../DeafGoawayEcho  its reading side shut (the peer's writes fail, EPIPE),
//                       then SETTINGS (whose ACK the peer must write), GOAWAY
//                       (last stream id = this one) and the reply's headers;
//                       200 ms later the message and trailers, then close
//   .../DeafSilent      its reading side shut, then SETTINGS; nothing more,
//                       the connection left open
//   .../DeafEcho        its reading side shut, then SETTINGS and Echo; the
//                       connection left open
//   .../GatedEchoThenClose Echo's headers, its message and trailers once the
//                       gate is open (closeGate(), openGate()), then the
//                       connection closed
//   .../GatedHangup     nothing, and the connection closed once the gate is
//                       open
// answerAs() makes every stream answered as that verb, whatever its path
// (an intercepted method's reply shaped as a test needs); informationalFirst()
// puts a 1xx HEADERS (:status 100) before every reply.
// One connection at a time, served on its own thread.

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace crihook::testing {

class RawH2Backend {
 public:
  explicit RawH2Backend(std::string socket_path);
  ~RawH2Backend();

  int connections() const { return connections_.load(); }
  int streams() const { return streams_.load(); }
  // Connections whose serving ended, closed by either side.
  int closedConnections() const { return closed_connections_.load(); }
  // The gate GatedEchoThenClose's replies and GatedHangup's close wait at:
  // open until closed.
  void closeGate() { gate_open_ = false; }
  void openGate() { gate_open_ = true; }
  void answerAs(std::string verb) {
    std::lock_guard lock(mu_);
    answer_as_ = std::move(verb);
  }
  std::string answerAs() const {
    std::lock_guard lock(mu_);
    return answer_as_;
  }
  void informationalFirst(bool on) { informational_first_ = on; }
  bool informationalFirst() const { return informational_first_; }

 private:
  void serve();
  void serveConnection(int fd);

  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> streams_{0};
  std::atomic<int> closed_connections_{0};
  std::atomic<bool> gate_open_{true};
  std::atomic<bool> informational_first_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::string answer_as_;             // under mu_
  std::set<int> open_fds_;            // under mu_
  std::vector<std::thread> workers_;  // serve()'s thread only, then the destructor
};

// The other side: a raw HTTP/2 client sending exactly the bytes a test wants
// (for example several gRPC messages into a unary method) and reporting how
// the stream ended.
struct RawH2Reply {
  int grpc_status = -1;  // -1: none received
  std::string grpc_message;
  uint32_t reset_code = 0;  // RST_STREAM error code, if the stream was reset
  bool reset = false;
};
RawH2Reply rawH2Call(const std::string& socket_path, const std::string& path,
                     const std::string& body);

}  // namespace crihook::testing
