// A hook server's (or the runtime's) reply into crihookd's gRPC client
// (base/grpc_channel.h): the bytes any process that can bind a socket named
// in hookserver.d may send. Each input is one connection: a server thread of
// this harness accepts the client's connection, writes the input as the
// server's whole side of it, and shuts its writing half, so every call ends
// (a reply, an error, or the server's EOF) without waiting for its deadline.
// The client keeps no idle connection, so no state passes between inputs.

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "base/grpc_channel.h"
#include "base/unix_listener.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_grpc_channel: %s\n", what);
    std::abort();
  }
}

// One listening socket and one thread serving each input's connection.
class Server {
 public:
  Server() {
    char dir[] = "/tmp/fuzz-grpc-channel-XXXXXX";
    check(::mkdtemp(dir) != nullptr, "mkdtemp");
    path_ = std::string(dir) + "/s.sock";
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    check(crihook::unixSocketAddress(path_, addr), "address");
    check(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "bind");
    check(::listen(fd_, 4) == 0, "listen");
    std::thread([this] { serve(); }).detach();
  }
  const std::string& path() const { return path_; }

  // Hands `input` to the thread for the next connection.
  void next(std::string input) {
    std::lock_guard lock(mu_);
    input_ = std::move(input);
    have_ = true;
    cv_.notify_one();
  }

 private:
  void serve() {
    for (;;) {
      std::string input;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return have_; });
        have_ = false;
        input.swap(input_);
      }
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      check(c >= 0, "accept");
      size_t off = 0;
      while (off < input.size()) {
        const ssize_t n = ::send(c, input.data() + off, input.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;  // the client hung up first
        off += static_cast<size_t>(n);
      }
      ::shutdown(c, SHUT_WR);
      // Read until the client closes, so closing here never resets what it
      // still reads.
      char buf[4096];
      for (;;) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 2000) <= 0) break;
        if (::recv(c, buf, sizeof buf, 0) <= 0) break;
      }
      ::close(c);
    }
  }

  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string input_;
  bool have_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server* const server = new Server();
  static const crihook::GrpcChannel channel(server->path(),
                                            {.max_reply_bytes = 64 << 10, .max_idle_connections = 0});
  server->next(std::string(reinterpret_cast<const char*>(data), size));
  auto reply = channel.call("/runtime.v1alpha1.RuntimeHookService/PreCreateContainerHook",
                            std::string("\x0a\x02hi", 4),
                            std::chrono::steady_clock::now() + std::chrono::seconds(2));
  (void)reply;
  return 0;
}
