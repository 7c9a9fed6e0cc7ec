// HTTP/2 from kubelet's side into crihookd's relay (proxy/relay.cc): the
// bytes any local process that can open crihookd's socket may send. Each
// input is one connection: the client preface, then the input's bytes, fed
// to a real Connection over a socketpair on an EventLoop this harness runs
// by hand (poll until nothing is left to do, bounded), with crihookd's
// answers drained as they come. Then the connection is closed and must have
// released everything.
//
// The runtime is absent (the backend socket does not exist), so crihookd
// stands in for it (relay::Transparent without a runtime connection: its
// own SETTINGS, every stream one of its own): a forwarded call ends
// UNAVAILABLE at once, which keeps an exec short and the harness on what
// kubelet sends (framing, request headers, flow control, the decoding of
// intercepted requests) rather than on a backend's replies.
// The input's first byte picks the interceptor: pass-through (the call is
// decoded, then forwarded) or one that refuses every intercepted call (the
// answer is made without the runtime).

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "cri/interceptor.h"
#include "fuzz/refusing_interceptor.h"
#include "proxy/event_loop.h"
#include "proxy/relay.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_relay: %s\n", what);
    std::abort();
  }
}

// Rounds of (write what the socket takes, run ready handlers, drain the
// answers). A round that runs nothing with the input all written ends the
// exec early; the bound keeps one that ping-pongs forever from hanging.
constexpr int kMaxRounds = 256;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

crihook::RelayContext& context(bool refuse) {
  static crihook::PassThroughInterceptor pass;
  static crihook::fuzz::RefusingInterceptor refusing("fuzz_relay");
  static crihook::RelayContext ctx;  // holds an atomic: set up in place, once
  static const bool ready = [] {
    ctx.backend_path =
        (std::filesystem::temp_directory_path() / "fuzz-relay-no-backend.sock").string();
    ctx.backend_endpoint = "unix://" + ctx.backend_path;
    ctx.max_message_bytes = 64u << 10;  // within reach of the input
    auto sink = std::make_shared<spdlog::sinks::null_sink_mt>();
    ctx.log = std::make_shared<spdlog::logger>("proxy", sink);
    ctx.log->set_level(spdlog::level::debug);  // the log lines' formatting runs too
    return true;
  }();
  (void)ready;
  ctx.interceptor = refuse ? static_cast<crihook::Interceptor*>(&refusing) : &pass;
  return ctx;
}

// Reads whatever crihookd has written so far.
void drain(int fd) {
  char buf[16384];
  while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  crihook::RelayContext& ctx = context(data[0] & 1);
  std::string bytes(kPreface);
  bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);

  auto made = crihook::relay::EventLoop::create();
  check(made.ok(), "no event loop");
  crihook::relay::EventLoop& loop = **made;
  int pair[2];
  check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0,
        "no socketpair");
  const int fd = pair[1];  // kubelet's end
  {
    crihook::Connection conn(loop, pair[0], ctx);
    size_t written = 0;
    bool timers_expired = false;
    for (int round = 0; round < kMaxRounds; ++round) {
      if (written < bytes.size()) {
        const ssize_t n =
            ::send(fd, bytes.data() + written, bytes.size() - written, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) written += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;  // crihookd hung up
      }
      size_t ran = loop.poll();
      // Nothing left but timers (an owed PING ACK's, the connection's
      // tick): run them now rather than sleep for them, once.
      if (ran == 0 && written == bytes.size() && !timers_expired) {
        timers_expired = true;
        ran = loop.expireTimers();
      }
      drain(fd);
      if (ran == 0 && written == bytes.size()) break;
    }
    conn.close();
    for (int round = 0; round < kMaxRounds && loop.poll() > 0; ++round) drain(fd);
    check(!conn.alive(), "the connection still holds its state after close()");
  }
  ::close(fd);
  check(ctx.active_calls.load() == 0, "calls left counted as active");
  return 0;
}
