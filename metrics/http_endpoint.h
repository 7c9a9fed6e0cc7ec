#pragma once

// A minimal HTTP/1.1 server for the metrics and health endpoints, on a Unix
// socket or a TCP address, with its own event-loop thread ("metrics-http";
// a handler's reply may come from any thread and is posted to it).
//
// The endpoint is hostile input like any socket: GET only (anything else
// 405), one request per connection (Connection: close), the request line and
// headers read up to kMaxRequestBytes (a longer request gets 431 and the
// connection is closed), a client that has not sent its whole request
// within the read timeout, or not read its whole answer within the write
// timeout, is cut off, and at most kMaxConnections at once. Past that a new
// connection takes the place of the oldest one that is not a probe's (a
// request for one of the priority paths, /healthz and /readyz in crihookd,
// answered from memory): clients that connect and never send, or ask for
// /metrics and never read, hold no slot a probe needs. No body is read.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace crihook::metrics {

// kubelet's and Prometheus' requests are a few hundred bytes; 8 KiB is what
// common HTTP servers allow for a request line and headers by default.
constexpr size_t kMaxRequestBytes = 8 << 10;
// A scraper, a probe and crihookctl: a handful at once. More is a flood.
constexpr size_t kMaxConnections = 16;
constexpr std::chrono::milliseconds kReadTimeout{5000};
// A scraper on the node reads a megabyte of metrics in milliseconds; one
// that has not read its answer in 5 s has stopped reading.
constexpr std::chrono::milliseconds kWriteTimeout{5000};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpEndpointOptions {
  // Exactly one: a Unix socket path, or a TCP host (an IP address) and port
  // (0: any free port, see port()).
  std::string unix_path;
  uint32_t unix_mode = 0660;
  std::string unix_group;  // empty: the process's own
  std::string tcp_host;
  uint16_t tcp_port = 0;
  // Bounds, overridable for tests.
  size_t max_request_bytes = kMaxRequestBytes;
  size_t max_connections = kMaxConnections;
  std::chrono::milliseconds read_timeout = kReadTimeout;
  std::chrono::milliseconds write_timeout = kWriteTimeout;
  // Paths whose connections are never closed to make room for another.
  std::vector<std::string> priority_paths;
};

class HttpEndpoint {
 public:
  // Answers one GET for `path` (without the query). `reply` may be called
  // later and from any thread, exactly once.
  using Handler =
      std::function<void(const std::string& path, std::function<void(HttpResponse)> reply)>;

  HttpEndpoint(HttpEndpointOptions options, Handler handler, std::shared_ptr<spdlog::logger> log);
  ~HttpEndpoint();  // stop()

  // Binds (a Unix socket: its directory made, a stale socket removed, a live
  // one refused with FAILED_PRECONDITION; mode and group set) and starts the
  // thread. Errors name the address.
  absl::Status start();

  // Closes the listener and every connection, joins the thread. Idempotent;
  // a reply that comes later is dropped.
  void stop();

  // The TCP port bound (after start); 0 for a Unix socket.
  uint16_t port() const { return port_; }
  // Connections open now (for tests).
  size_t connections() const;
  // How many times accept() failed (for tests). After a failure the next
  // try waits, 10 ms doubling up to 1 s, until one succeeds.
  uint64_t acceptFailures() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  std::thread thread_;
  uint16_t port_ = 0;
};

}  // namespace crihook::metrics
