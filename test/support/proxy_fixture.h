#pragma once

// crihookd's Server in-process, in front of a FakeCriServer, on temporary
// sockets: the integration-test rig for the data path.

#include <gtest/gtest.h>

#include <memory>

#include "base/logging.h"
#include "config/config.h"
#include "cri/interceptor.h"
#include "proxy/server.h"
#include "test/support/fake_cri_server.h"

namespace crihook::testing {

class ProxyFixture : public ::testing::Test {
 protected:
  ProxyFixture() : backend_(dir_.file("backend.sock")) {}
  ~ProxyFixture() override { stopProxy(); }

  Config proxyConfig() const {
    Config c;
    c.listen_path = dir_.file("crihook.sock");
    c.backend_endpoint = "unix://" + dir_.file("backend.sock");
    c.backend_connect_timeout = std::chrono::milliseconds(1000);
    return c;
  }

  void startProxy(Interceptor* interceptor = nullptr, Config config = {}) {
    if (config.listen_path == Config{}.listen_path) config = proxyConfig();
    proxy_ = std::make_unique<Server>(config, interceptor ? *interceptor : pass_, logger("proxy"));
    ASSERT_TRUE(proxy_->start().ok());
  }

  int64_t stopProxy(std::chrono::milliseconds grace = std::chrono::milliseconds(0)) {
    int64_t cut = proxy_ ? proxy_->shutdown(grace) : 0;
    proxy_.reset();
    return cut;
  }

  std::shared_ptr<grpc::Channel> proxyChannel(int max_bytes = 64 << 20) {
    return unixChannel(dir_.file("crihook.sock"), max_bytes);
  }
  std::shared_ptr<grpc::Channel> directChannel(int max_bytes = 64 << 20) {
    return unixChannel(dir_.file("backend.sock"), max_bytes);
  }

  TempDir dir_;
  FakeCriServer backend_;
  PassThroughInterceptor pass_;
  std::unique_ptr<Server> proxy_;
};

}  // namespace crihook::testing
