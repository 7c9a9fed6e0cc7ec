#pragma once

// A raw HTTP/2 client connection for tests that must send what a gRPC client
// library never sends: header names, values, orders and pseudo-headers of the
// test's choosing, trailers after a request. Header fields go out exactly as
// given (nghttp2 does not check what it sends). Single-threaded: every call
// runs the connection on the calling thread.

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace crihook::testing {

using RawHeaders = std::vector<std::pair<std::string, std::string>>;

// How one stream ended, as the client saw it.
struct RawH2Result {
  bool closed = false;      // false: timed out, or the connection went away first
  bool reset = false;       // ended by RST_STREAM
  uint32_t reset_code = 0;  // its HTTP/2 error code
  std::string http_status;  // :status of the response, if one came
  int grpc_status = -1;     // -1: none received
  std::string grpc_message;
  std::string body;  // DATA bytes, gRPC framing included
  // Which of the connection's reads (recv calls, from 1) completed the
  // response HEADERS; 0: none came.
  uint64_t headers_read = 0;
};

// A PING ACK the client received.
struct RawPingAck {
  uint64_t opaque = 0;  // the PING's data, as sent
  std::chrono::steady_clock::time_point at;
  uint64_t read = 0;  // the read that completed it (as RawH2Result::headers_read)
};

class RawH2Client {
 public:
  // Connects to `socket_path` and sends the preface and empty SETTINGS.
  // Throws std::runtime_error when the socket does not accept.
  explicit RawH2Client(const std::string& socket_path);
  ~RawH2Client();
  RawH2Client(const RawH2Client&) = delete;
  RawH2Client& operator=(const RawH2Client&) = delete;

  // The usual headers of a gRPC call to `path`, as grpc-go sends them.
  static RawHeaders grpcHeaders(const std::string& path,
                                const std::string& authority = "localhost");

  // Opens a stream sending `headers` in this order, then `body` as DATA;
  // `trailers`, if any, follow the body as a second header block. The stream
  // ends with the last frame. Returns the stream id.
  int32_t send(const RawHeaders& headers, const std::string& body, const RawHeaders& trailers = {});

  // Opens a stream sending `headers`, then `body` as DATA, and leaves it
  // open: no END_STREAM ever follows (a client that never finishes its
  // request). Returns the stream id.
  int32_t open(const RawHeaders& headers, const std::string& body = "");

  // Runs the connection for `duration` (sends what is queued, reads what
  // comes), or until it closes.
  void run(std::chrono::milliseconds duration);

  // Runs the connection until stream `id` has closed, or `timeout` passed.
  RawH2Result wait(int32_t id, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // What stream `id` has received so far, without running the connection.
  RawH2Result result(int32_t id) const;

  // Queues a PING (sent with the next run or wait) carrying `opaque`;
  // returns when it was queued.
  std::chrono::steady_clock::time_point ping(uint64_t opaque);
  // The PING ACKs received so far, in order.
  const std::vector<RawPingAck>& pingAcks() const { return ping_acks_; }
  // Sends `count` PINGs in one write, now; false when the write failed (the
  // server had closed the connection).
  bool pingFlood(size_t count);

  // send() then wait().
  RawH2Result call(const RawHeaders& headers, const std::string& body,
                   const RawHeaders& trailers = {});

  // The server's SETTINGS_MAX_HEADER_LIST_SIZE (0: not announced), once its
  // SETTINGS have arrived (after the first wait()).
  uint32_t peerMaxHeaderListSize() const { return peer_max_header_list_; }
  // False once the server sent GOAWAY or closed the connection.
  bool usable() const { return !goaway_ && !eof_; }
  bool goawayReceived() const { return goaway_; }
  // True once the server sent more DATA than this client's windows allowed
  // (connection or a stream; its windows start at HTTP/2's 65,535 bytes).
  bool windowOverrun() const { return window_overrun_; }

  struct Stream {
    RawH2Result result;
    std::string body_out;
    size_t sent = 0;
    RawHeaders trailers;
    bool keep_open = false;  // open(): no END_STREAM after the body
  };

 private:
  bool pump(std::chrono::milliseconds poll);
  // Writes all of `bytes`; false (and the connection counted gone) when the
  // socket refuses.
  bool sendAll(const std::string& bytes);

  int fd_ = -1;
  void* h2_ = nullptr;  // nghttp2_session
  std::map<int32_t, Stream> streams_;
  std::list<RawHeaders> sent_headers_;  // nghttp2 reads them when it sends
  uint32_t peer_max_header_list_ = 0;
  std::vector<RawPingAck> ping_acks_;
  uint64_t reads_ = 0;
  bool goaway_ = false;
  bool eof_ = false;
  std::map<int32_t, uint64_t>
      granted_;  // WINDOW_UPDATE increments sent, by stream (0: the connection)
  std::map<int32_t, uint64_t> received_;  // DATA bytes received, by stream
  bool window_overrun_ = false;
  friend struct RawH2ClientCallbacks;
};

// A gRPC message frame: the 5-byte prefix, then `message`.
std::string grpcFrame(const std::string& message);

}  // namespace crihook::testing
