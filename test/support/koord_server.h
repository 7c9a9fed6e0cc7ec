#pragma once

// A Koordinator hook server (runtime.v1alpha1 RuntimeHookService), as
// koordlet is one, for tests: it answers, or misbehaves as told. On
// PreRunPodSandbox it sets a label, an annotation and the cgroup parent; on
// PreCreateContainer an annotation ("seen-by" = the value given) and a cpuset.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "koordinator_runtime_v1alpha1.grpc.pb.h"

namespace crihook::testing {

namespace koord = ::runtime::v1alpha1;

class KoordServer final : public koord::RuntimeHookService::Service {
 public:
  enum class Mode { kAnswer, kError, kHang, kCrash };
  explicit KoordServer(std::string socket, std::string annotation_value = "koord")
      : socket_(std::move(socket)), value_(std::move(annotation_value)) {}
  ~KoordServer() override { stop(); }

  void start() {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }

  grpc::Status PreRunPodSandboxHook(grpc::ServerContext* ctx,
                                    const koord::PodSandboxHookRequest* req,
                                    koord::PodSandboxHookResponse* resp) override {
    if (auto s = misbehave(ctx); !s.ok()) return s;
    {
      std::lock_guard lock(mu);
      pod_requests.push_back(*req);
    }
    (*resp->mutable_labels())["koordinator.sh/qos"] = "LS";
    (*resp->mutable_annotations())["seen-by"] = value_;
    resp->set_cgroup_parent("/kubepods/burstable/pod-x");
    return grpc::Status::OK;
  }
  grpc::Status PreCreateContainerHook(grpc::ServerContext* ctx,
                                      const koord::ContainerResourceHookRequest* req,
                                      koord::ContainerResourceHookResponse* resp) override {
    if (auto s = misbehave(ctx); !s.ok()) return s;
    {
      std::lock_guard lock(mu);
      container_requests.push_back(*req);
    }
    (*resp->mutable_container_annotations())["seen-by"] = value_;
    resp->mutable_container_resources()->set_cpuset_cpus("2-3");
    resp->mutable_container_resources()->set_cpu_shares(1024);
    return grpc::Status::OK;
  }

  std::atomic<Mode> mode{Mode::kAnswer};
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<koord::PodSandboxHookRequest> pod_requests;
  std::vector<koord::ContainerResourceHookRequest> container_requests;

 private:
  grpc::Status misbehave(grpc::ServerContext* ctx) {
    calls++;
    switch (mode.load()) {
      case Mode::kAnswer:
        return grpc::Status::OK;
      case Mode::kError:
        return grpc::Status(grpc::StatusCode::INTERNAL, "koordlet: cannot read the pod's QoS");
      case Mode::kHang:
        for (int i = 0; i < 300 && !ctx->IsCancelled(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return grpc::Status::OK;
      case Mode::kCrash:
        // The server goes away while the call is in flight.
        std::thread([this] { server_->Shutdown(std::chrono::system_clock::now()); }).detach();
        for (int i = 0; i < 300 && !ctx->IsCancelled(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
    }
    return grpc::Status::OK;
  }

  std::string socket_, value_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace crihook::testing
