#pragma once

// The data path: one kubelet-side HTTP/2 connection relayed to the runtime.
//
// Each accepted connection gets its own upstream HTTP/2 connection to the
// backend socket (opened on the first call, replaced after the backend sends
// GOAWAY or goes away). Both live on one EventLoop thread, so a call's two
// streams are never touched by two threads and need no lock. Streams of
// methods that are not intercepted are relayed frame by frame: headers,
// message bytes and trailers pass through undecoded, with HTTP/2 flow
// control carried end to end (the runtime's window opens only as kubelet
// reads, and the other way round). Intercepted methods are buffered whole,
// decoded, run through the Interceptor's stages, and answered.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cri/interceptor.h"
#include "metrics/call_metrics.h"
#include "proxy/event_loop.h"

namespace crihook {
namespace relay {
class Transparent;
}

// A warning a hostile peer can repeat at will (accept failing, connections
// cut at a limit): logged at most once per interval, with how many were held
// back since the last one. Thread-safe.
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::milliseconds interval = std::chrono::seconds(10))
      : interval_(interval) {}
  // True when this occurrence is to be logged; `held_back` is then how many
  // occurrences since the last logged one were not.
  bool allow(uint64_t& held_back);

 private:
  std::mutex mu_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
  uint64_t held_back_ = 0;
};

// Limits against a hostile client; the [server] keys of the same names
// (config.h says why each default is what it is).
struct RelayLimits {
  std::chrono::milliseconds preface_timeout{10000};
  std::chrono::milliseconds idle_timeout{300000};
  std::chrono::milliseconds request_timeout{30000};
  uint64_t max_connection_buffered_bytes = 64u << 20;
  uint64_t max_buffered_bytes = 256u << 20;
};

// What every connection of one server shares. Outlives all connections.
struct RelayContext {
  std::string backend_path;      // Unix socket of the CRI runtime
  std::string backend_endpoint;  // as configured, for messages
  uint64_t max_message_bytes = 16u << 20;
  // [server] relay = "transparent" (config.h's default): connections are
  // relayed by relay::Transparent (docs/transparent-relay.md) instead of
  // terminating HTTP/2 on both sides (relay::Downstream).
  bool transparent = false;
  std::chrono::milliseconds connect_timeout{2000};
  Interceptor* interceptor = nullptr;  // never null once serving
  std::shared_ptr<spdlog::logger> log;
  std::atomic<int64_t> active_calls{0};  // calls accepted and not yet answered
  RelayLimits limits;
  // Process-wide tallies, for the limits, the metrics endpoint and tests.
  std::atomic<int64_t> open_connections{0};         // Connections not yet destroyed
  std::atomic<int64_t> terminating_connections{0};  // of them, relay::Downstream's
  std::atomic<int64_t> buffered_bytes{0};           // intercepted calls' messages held
  std::atomic<int64_t> header_bytes{0};             // decoded header fields held, both directions
  LogLimiter timeout_log;                           // connections cut by a timeout
  LogLimiter refusal_log;                           // request header blocks refused
  metrics::CallMetrics* call_metrics = nullptr;     // every call, when it ends; null: none
};

class Connection {
 public:
  // `fd` is an accepted socket, non-blocking, now the connection's;
  // everything the connection does runs on `loop`, which outlives it.
  Connection(relay::EventLoop& loop, int fd, RelayContext& ctx);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends the server preface and starts reading, on the connection's
  // loop. Call once, from any thread.
  void start();

  // Graceful: GOAWAY to the client (no new streams), in-flight calls finish.
  // Thread-safe (posts to the connection's loop).
  void shutdown();

  // Abrupt: closes both sides now. Thread-safe.
  void close();

  // False once the connection has closed and released everything.
  // Thread-safe.
  bool alive() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> starting_;  // held only until start()
  std::weak_ptr<Impl> weak_;
  // With RelayContext::transparent (and the runtime reachable): the
  // transparent relay instead.
  std::shared_ptr<relay::Transparent> tstarting_;
  std::weak_ptr<relay::Transparent> tweak_;
};

}  // namespace crihook
