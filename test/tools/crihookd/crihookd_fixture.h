#pragma once

// What crihookd's tests share: crihookd started as an operator starts it
// (the built binary, its flags, its log in a file) against a fake runtime.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cri-api/runtime_v1.grpc.pb.h"
#include "test/support/child_process.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {

using namespace std::chrono_literals;

inline std::vector<std::string> withStateDir(std::vector<std::string> args,
                                             const std::string& dir) {
  args.insert(args.begin(), {"--state-dir", dir});
  return args;
}

// crihookd with `args`, its output in `log`, its records next to it.
class Daemon : public ChildProcess {
 public:
  Daemon(const std::vector<std::string>& args, const std::string& log,
         const std::string& notify_socket = "")
      : ChildProcess(CRIHOOKD_BINARY, withStateDir(args, log + ".state"), log,
                     notify_socket.empty()
                         ? std::map<std::string, std::string>{}
                         : std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_socket}}) {}
};

inline std::string slurp(const std::string& path) { return readFile(path); }

// Whether the log at `path` holds `text` yet.
inline bool logHas(const std::string& path, const std::string& text) {
  return slurp(path).find(text) != std::string::npos;
}

inline bool waitForSocket(const std::string& path) { return waitForFile(path, 5000ms); }

// A fake runtime at backend.sock that answers Version, in a fresh directory.
class CrihookdTest : public ::testing::Test {
 protected:
  CrihookdTest() : backend_(dir_.file("backend.sock")) {
    backend_.onUnary("/runtime.v1.RuntimeService/Version", [](FakeCall&, std::string* out) {
      ::runtime::v1::VersionResponse r;
      r.set_runtime_name("fake");
      *out = r.SerializeAsString();
      return grpc::Status::OK;
    });
  }
  // Version through crihookd at `socket`.
  grpc::Status version(const std::string& socket) {
    auto stub = ::runtime::v1::RuntimeService::NewStub(unixChannel(socket));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ::runtime::v1::VersionResponse r;
    return stub->Version(&ctx, ::runtime::v1::VersionRequest(), &r);
  }
  // crihookd with the configuration c.toml in this directory, serving on
  // s.sock in front of backend.sock, its log in `log`; null (test failed)
  // when its socket does not appear.
  std::unique_ptr<Daemon> startWithConfig() {
    auto d = std::make_unique<Daemon>(
        std::vector<std::string>{"--config", dir_.file("c.toml"), "--listen", dir_.file("s.sock"),
                                 "--backend", "unix://" + dir_.file("backend.sock")},
        dir_.file("log"));
    if (!waitForSocket(dir_.file("s.sock"))) {
      ADD_FAILURE() << "crihookd did not listen: " << slurp(dir_.file("log"));
      return nullptr;
    }
    return d;
  }
  // startWithConfig(), reading Koordinator registrations from hookserver.d
  // (made empty) in this directory.
  std::unique_ptr<Daemon> startWithHookServerDir() {
    std::filesystem::create_directories(dir_.file("hookserver.d"));
    std::ofstream(dir_.file("c.toml"))
        << "[hooks]\nhookserver_dir = \"" << dir_.file("hookserver.d") << "\"\n";
    return startWithConfig();
  }

  TempDir dir_;
  FakeCriServer backend_;
};

}  // namespace crihook::testing
