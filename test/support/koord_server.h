#pragma once

// A Koordinator hook server (runtime.v1alpha1 RuntimeHookService), as
// koordlet is one, for tests: it answers, or misbehaves as told. Like
// koordlet it answers with what it was sent (labels, annotations, resources,
// cgroup parent, envs) and its changes made in that. By default, on
// PreRunPodSandbox it sets a label, an annotation and the cgroup parent; on
// PreCreateContainer an annotation ("seen-by" = the value given), a cpuset
// and CPU shares. A test may replace these changes (on_pod, on_container).

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cri-api/koordinator_runtime_v1alpha1.grpc.pb.h"

namespace crihook::testing {

namespace koord = ::runtime::v1alpha1;

class KoordServer final : public koord::RuntimeHookService::Service {
 public:
  // kHold: every call waits until release() (or its caller gives up),
  // counted in `held` meanwhile, then answers.
  enum class Mode { kAnswer, kError, kHang, kCrash, kHold };
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
    *resp->mutable_labels() = req->labels();
    *resp->mutable_annotations() = req->annotations();
    resp->set_cgroup_parent(req->cgroup_parent());
    if (req->has_resources()) *resp->mutable_resources() = req->resources();
    if (on_pod) {
      on_pod(*req, *resp);
    } else {
      (*resp->mutable_labels())["koordinator.sh/qos"] = "LS";
      (*resp->mutable_annotations())["seen-by"] = value_;
      resp->set_cgroup_parent("/kubepods/burstable/pod-x");
    }
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
    *resp->mutable_container_annotations() = req->container_annotations();
    if (req->has_container_resources())
      *resp->mutable_container_resources() = req->container_resources();
    resp->set_pod_cgroup_parent(req->pod_cgroup_parent());
    *resp->mutable_container_envs() = req->container_envs();
    if (on_container) {
      on_container(*req, *resp);
    } else {
      (*resp->mutable_container_annotations())["seen-by"] = value_;
      resp->mutable_container_resources()->set_cpuset_cpus("2-3");
      resp->mutable_container_resources()->set_cpu_shares(1024);
    }
    return grpc::Status::OK;
  }

  // Set before start(); called on gRPC threads with the echoed answer to edit.
  std::function<void(const koord::PodSandboxHookRequest&, koord::PodSandboxHookResponse&)> on_pod;
  std::function<void(const koord::ContainerResourceHookRequest&,
                     koord::ContainerResourceHookResponse&)>
      on_container;

  void release() {
    std::lock_guard lock(mu);
    released_ = true;
    freed_.notify_all();
  }
  void rearm() {  // kHold holds again
    std::lock_guard lock(mu);
    released_ = false;
  }

  std::atomic<Mode> mode{Mode::kAnswer};
  std::atomic<int> calls{0};
  std::atomic<int> held{0};  // kHold: calls waiting now
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
      case Mode::kHold: {
        held++;
        std::unique_lock lock(mu);
        while (!released_ && !ctx->IsCancelled())
          freed_.wait_for(lock, std::chrono::milliseconds(10));
        held--;
        return ctx->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK;
      }
      case Mode::kCrash:
        // The server goes away while the call is in flight.
        std::thread([this] { server_->Shutdown(std::chrono::system_clock::now()); }).detach();
        for (int i = 0; i < 300 && !ctx->IsCancelled(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
    }
    return grpc::Status::OK;
  }

  std::condition_variable freed_;
  bool released_ = false;  // guarded by mu
  std::string socket_, value_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace crihook::testing
