#include "test/support/fake_cri_server.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <thread>

namespace crihook::testing {

static std::string toString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

static grpc::ByteBuffer toBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class FakeCriServer::Reactor : public grpc::ServerGenericBidiReactor {
 public:
  Reactor(FakeCriServer* server, grpc::GenericCallbackServerContext* ctx)
      : server_(server), ctx_(ctx) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // cancelled before the request arrived: no handler thread to wait for
      done();
      Finish(grpc::Status(grpc::StatusCode::INTERNAL, "fake: no request message"));
      return;
    }
    std::thread([this] { run(); }).detach();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    write_done_ = true;
    write_ok_ = ok;
    cv_.notify_all();
  }

  void OnCancel() override {
    server_->cancellations.fetch_add(1);
    std::lock_guard lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

  void OnDone() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return finished_thread_; });
    lock.unlock();
    delete this;
  }

 private:
  void run() {
    FakeCall call;
    call.method = ctx_->method();
    for (const auto& [k, v] : ctx_->client_metadata()) {
      call.metadata.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    }
    call.deadline = ctx_->deadline();
    call.request = toString(request_);
    call.cancelled = [this] {
      std::lock_guard lock(mu_);
      return cancelled_;
    };
    UnaryHandler unary;
    StreamHandler stream;
    {
      std::lock_guard lock(server_->mu_);
      FakeCall recorded = call;
      recorded.cancelled = nullptr;
      server_->calls_.push_back(std::move(recorded));
      server_->recorded_.notify_all();
      if (auto it = server_->handlers_.unary.find(call.method);
          it != server_->handlers_.unary.end())
        unary = it->second;
      if (auto it = server_->handlers_.stream.find(call.method);
          it != server_->handlers_.stream.end())
        stream = it->second;
    }
    grpc::Status status;
    if (unary) {
      std::string response;
      status = unary(call, &response);
      addTrailing(call);
      if (status.ok()) {
        response_ = toBuffer(response);
        StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
        done();
        return;
      }
    } else if (stream) {
      status = stream(call, [this](const std::string& message) {
        std::unique_lock lock(mu_);
        if (cancelled_) return false;
        write_done_ = false;
        response_ = toBuffer(message);
        lock.unlock();
        StartWrite(&response_);
        lock.lock();
        cv_.wait(lock, [this] { return write_done_; });
        return write_done_ && write_ok_;
      });
      addTrailing(call);
    } else {
      status = grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "fake: no handler for " + call.method);
    }
    Finish(status);
    done();
  }

  void addTrailing(const FakeCall& call) {
    for (const auto& [k, v] : call.trailing) ctx_->AddTrailingMetadata(k, v);
  }

  void done() {
    std::lock_guard lock(mu_);
    finished_thread_ = true;
    cv_.notify_all();
  }

  FakeCriServer* server_;
  grpc::GenericCallbackServerContext* ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool write_done_ = false;
  bool write_ok_ = false;
  bool cancelled_ = false;
  bool finished_thread_ = false;
};

FakeCriServer::FakeCriServer(std::string socket_path) : path_(std::move(socket_path)) {}

FakeCriServer::~FakeCriServer() { stop(); }

void FakeCriServer::onUnary(const std::string& method, UnaryHandler handler) {
  std::lock_guard lock(mu_);
  handlers_.unary[method] = std::move(handler);
}

void FakeCriServer::onStream(const std::string& method, StreamHandler handler) {
  std::lock_guard lock(mu_);
  handlers_.stream[method] = std::move(handler);
}

void FakeCriServer::start() {
  class Service : public grpc::CallbackGenericService {
   public:
    explicit Service(FakeCriServer* s) : s_(s) {}
    grpc::ServerGenericBidiReactor* CreateReactor(
        grpc::GenericCallbackServerContext* ctx) override {
      return new Reactor(s_, ctx);
    }

   private:
    FakeCriServer* s_;
  };
  ::unlink(path_.c_str());
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path_, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(service_.get());
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  server_ = builder.BuildAndStart();
  if (!server_) throw std::runtime_error("fake CRI server: cannot listen on " + path_);
}

void FakeCriServer::stop(std::chrono::milliseconds grace) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  server_.reset();
  service_.reset();
  ::unlink(path_.c_str());
}

int FakeCriServer::dropConnections() {
  // gRPC binds "unix://" + path_ as "//" + path_: the same file.
  auto withoutLeadingSlashes = [](const std::string& p) {
    return p.substr(std::min(p.find_first_not_of('/'), p.size()));
  };
  // gRPC keeps its sockets to itself: find them among the process's fds. A
  // socket accepted on a Unix listener carries the listener's address, so
  // the server's connections are the non-listening sockets bound to path_
  // (crihookd's own connections to it, in this process too, are unbound).
  int cut = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_un addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        addr.sun_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path) ||
        withoutLeadingSlashes(
            std::string(addr.sun_path, ::strnlen(addr.sun_path, sizeof(addr.sun_path)))) !=
            withoutLeadingSlashes(path_))
      continue;
    int listening = 0;
    socklen_t optlen = sizeof(listening);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || listening)
      continue;
    if (::shutdown(fd, SHUT_RDWR) == 0) ++cut;
  }
  return cut;
}

std::vector<FakeCall> FakeCriServer::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

bool FakeCriServer::waitForCall(const std::string& method,
                                const std::function<bool(const FakeCall&)>& match,
                                std::chrono::milliseconds timeout, size_t from) const {
  std::unique_lock lock(mu_);
  size_t seen = from;
  return recorded_.wait_for(lock, timeout, [&] {
    for (; seen < calls_.size(); ++seen) {
      if (calls_[seen].method == method && match(calls_[seen])) return true;
    }
    return false;
  });
}

size_t FakeCriServer::callCount(const std::string& method) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& c : calls_) n += c.method == method;
  return n;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/crihook-test-XXXXXX";
  char* p = ::mkdtemp(tmpl);
  if (p == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::shared_ptr<grpc::Channel> unixChannel(const std::string& path, int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  // Each test channel is its own connection, as kubelet's would be.
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  return grpc::CreateCustomChannel("unix://" + path, grpc::InsecureChannelCredentials(), args);
}

}  // namespace crihook::testing

namespace crihook::testing {

grpc::Status genericUnary(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                          const std::string& method, const std::string& request,
                          std::string* response) {
  grpc::GenericStub stub(channel);
  grpc::ByteBuffer req = toBuffer(request);
  grpc::ByteBuffer resp;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(ctx, method, grpc::StubOptions(), &req, &resp, [&](grpc::Status s) {
    std::lock_guard lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  if (status.ok() && response) *response = toString(resp);
  return status;
}

}  // namespace crihook::testing
