#pragma once

// The data path: one kubelet-side HTTP/2 connection relayed to the runtime
// (relay::Transparent, transparent.h; docs/transparent-relay.md).
//
// Each accepted connection gets its own connection to the runtime, opened at
// accept, and both live on one EventLoop thread, so a call's frames are
// never touched by two threads and need no lock. Frames pass through as
// they came, every one read, with HTTP/2 flow control carried end to end.
// The calls crihookd answers itself (refused requests, intercepted methods,
// every call while the runtime could not be reached at accept) go on a side
// connection of crihookd's own; intercepted methods are buffered whole,
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
  std::chrono::milliseconds connect_timeout{2000};
  Interceptor* interceptor = nullptr;  // never null once serving
  std::shared_ptr<spdlog::logger> log;
  std::atomic<int64_t> active_calls{0};  // calls accepted and not yet answered
  RelayLimits limits;
  // Process-wide tallies, for the limits, the metrics endpoint and tests.
  std::atomic<int64_t> open_connections{0};  // Connections not yet destroyed
  // Of them, those crihookd stands in for the runtime on (accepted while it
  // could not be reached).
  std::atomic<int64_t> stand_in_connections{0};
  std::atomic<int64_t> buffered_bytes{0};        // intercepted calls' messages held
  std::atomic<int64_t> header_bytes{0};          // decoded header fields held, both directions
  LogLimiter timeout_log;                        // connections cut by a timeout
  LogLimiter refusal_log;                        // request header blocks refused
  metrics::CallMetrics* call_metrics = nullptr;  // every call, when it ends; null: none
};

class Connection {
 public:
  // `fd` is an accepted socket, non-blocking, now the connection's;
  // everything the connection does runs on `loop`, which outlives it. Opens
  // the connection to the runtime (crihookd stands in for it when it cannot
  // be reached) and has the loop start reading both. From any thread.
  Connection(relay::EventLoop& loop, int fd, RelayContext& ctx);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Graceful: GOAWAY to the client (no new streams), in-flight calls finish.
  // Thread-safe (posts to the connection's loop).
  void shutdown();

  // Abrupt: closes both sides now. Thread-safe.
  void close();

  // False once the connection has closed and released everything.
  // Thread-safe.
  bool alive() const;

 private:
  // Held by its loop's handlers and tasks, never here: it ends when it
  // closes.
  std::weak_ptr<relay::Transparent> relay_;
};

}  // namespace crihook
