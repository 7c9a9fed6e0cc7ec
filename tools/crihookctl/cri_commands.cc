#include "tools/crihookctl/cri_commands.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "base/read_file.h"
#include "base/text.h"
#include "cri-api/runtime_v1.grpc.pb.h"

namespace crihook::ctl {
namespace {

namespace v1 = ::runtime::v1;
using google::protobuf::Message;

// A request as crictl takes it: a JSON file of the CRI message (CRI field
// names, snake_case or lowerCamelCase). A usage error naming the file.
absl::Status fromJsonFile(const std::string& path, Message& m) {
  // A request is a config-sized file; `-` or a FIFO are not read (a reader
  // never blocks on one).
  auto text = readRegularFile(path, kMaxConfigBytes, FileLinks::kFollow);
  if (!text.ok()) return usageError(cat("cannot read ", path, ": ", sv(text.status().message())));
  google::protobuf::util::JsonParseOptions opts;
  auto s = google::protobuf::util::JsonStringToMessage(*text, &m, opts);
  if (!s.ok())
    return usageError(cat(path, ": not a valid ", m.GetTypeName(), ": ", s.message().ToString()));
  return absl::OkStatus();
}

std::string age(int64_t created_ns) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  int64_t s = std::max<int64_t>(0, (now - created_ns) / 1000000000);
  if (s < 60) return cat(s, " seconds ago");
  if (s < 3600) return cat(s / 60, " minutes ago");
  if (s < 86400) return cat(s / 3600, " hours ago");
  return cat(s / 86400, " days ago");
}

std::string trunc(const std::string& id) { return id.substr(0, 13); }

std::string grpcCodeName(grpc::StatusCode c) {
  static const char* names[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  int i = static_cast<int>(c);
  return i >= 0 && i < 17 ? names[i] : cat("code ", i);
}

// The runtime at -r, each call bounded by -t.
class Client {
 public:
  explicit Client(const Options& o) : timeout_s_(o.timeout_s) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    args.SetMaxSendMessageSize(16 << 20);
    std::string target = o.endpoint;
    if (target.rfind("unix://", 0) != 0) target = "unix://" + target;
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    runtime_ = v1::RuntimeService::NewStub(channel_);
    images_ = v1::ImageService::NewStub(channel_);
  }

  // The answer, or the runtime's error as "<name>: <gRPC code>: <message>"
  // with its code.
  template <typename Stub, typename Req, typename Resp>
  absl::StatusOr<Resp> call(Stub& stub,
                            grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                            const Req& req, const char* name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s_));
    Resp resp;
    grpc::Status s = (stub.*method)(&ctx, req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          cat(name, ": ", grpcCodeName(s.error_code()), ": ", s.error_message()));
    }
    return resp;
  }

  v1::RuntimeService::Stub& runtime() { return *runtime_; }
  v1::ImageService::Stub& images() { return *images_; }

 private:
  int timeout_s_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RuntimeService::Stub> runtime_;
  std::unique_ptr<v1::ImageService::Stub> images_;
};

// One call per ID, each ID printed once its call succeeded; the first
// refusal ends it.
template <typename Req, typename Resp>
absl::StatusOr<int> forEachId(const Invocation& in, const std::vector<std::string>& ids,
                              grpc::Status (v1::RuntimeService::Stub::*method)(grpc::ClientContext*,
                                                                               const Req&, Resp*),
                              const char* name,
                              const std::function<void(Req&, const std::string&)>& fill) {
  if (ids.empty()) return usageError("expected at least one ID");
  Client c(in.options);
  for (const std::string& id : ids) {
    Req req;
    fill(req, id);
    auto r = c.call(c.runtime(), method, req, name);
    if (!r.ok()) return r.status();
    in.out << id << '\n';
  }
  return 0;
}

void printPods(const v1::ListPodSandboxResponse& r, std::ostream& out) {
  std::vector<std::vector<std::string>> rows{
      {"POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"}};
  for (const auto& s : r.items()) {
    rows.push_back({trunc(s.id()), age(s.created_at()),
                    s.state() == v1::SANDBOX_READY ? "Ready" : "NotReady", s.metadata().name(),
                    s.metadata().namespace_(), std::to_string(s.metadata().attempt()),
                    s.runtime_handler().empty() ? "(default)" : s.runtime_handler()});
  }
  printTable(out, rows);
}

void printContainers(const v1::ListContainersResponse& r, std::ostream& out) {
  static const char* states[] = {"Created", "Running", "Exited", "Unknown"};
  std::vector<std::vector<std::string>> rows{
      {"CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID"}};
  for (const auto& ct : r.containers()) {
    rows.push_back({trunc(ct.id()), ct.image().image(), age(ct.created_at()),
                    states[std::clamp(static_cast<int>(ct.state()), 0, 3)], ct.metadata().name(),
                    std::to_string(ct.metadata().attempt()), trunc(ct.pod_sandbox_id())});
  }
  printTable(out, rows);
}

void printImages(const v1::ListImagesResponse& r, std::ostream& out) {
  std::vector<std::vector<std::string>> rows{{"IMAGE", "TAG", "IMAGE ID", "SIZE"}};
  for (const auto& i : r.images()) {
    std::string repo = "<none>", tag = "<none>";
    if (!i.repo_tags().empty()) {
      const std::string& t = i.repo_tags(0);
      auto colon = t.rfind(':');
      repo = t.substr(0, colon);
      tag = colon == std::string::npos ? "" : t.substr(colon + 1);
    }
    std::string id = i.id();
    if (id.rfind("sha256:", 0) == 0) id = id.substr(7);
    rows.push_back({repo, tag, id.substr(0, 13), cat(i.size() / 1024, "kB")});
  }
  printTable(out, rows);
}

// A verbose status as JSON: inspect, inspectp, inspecti.
template <typename Stub, typename Req, typename Resp>
absl::StatusOr<int> inspect(const Invocation& in, std::string_view what, Stub& (Client::*stub)(),
                            grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                            const char* name,
                            const std::function<void(Req&, const std::string&)>& fill) {
  if (in.args.empty()) return usageError(cat("expected ", what));
  Client c(in.options);
  Req req;
  fill(req, in.args[0]);
  auto r = c.call((c.*stub)(), method, req, name);
  if (!r.ok()) return r.status();
  in.out << messageJson(*r);
  return 0;
}

}  // namespace

absl::StatusOr<int> cmdVersion(const Invocation& in) {
  Client c(in.options);
  v1::VersionRequest req;
  req.set_version("v1");
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::Version, req, "Version");
  if (!r.ok()) return r.status();
  if (in.options.json) {
    in.out << messageJson(*r);
  } else {
    in.out << "Version:  " << r->version() << "\nRuntimeName:  " << r->runtime_name()
           << "\nRuntimeVersion:  " << r->runtime_version()
           << "\nRuntimeApiVersion:  " << r->runtime_api_version() << "\n";
  }
  return 0;
}

absl::StatusOr<int> cmdInfo(const Invocation& in) {
  Client c(in.options);
  v1::StatusRequest req;
  req.set_verbose(true);  // the runtime's configuration too, as crictl info shows it
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::Status, req, "Status");
  if (!r.ok()) return r.status();
  in.out << messageJson(*r);
  return 0;
}

absl::StatusOr<int> cmdPods(const Invocation& in) {
  auto p = parseArgs(in.args, {{"-q", false}});
  if (!p.ok()) return p.status();
  Client c(in.options);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::ListPodSandbox,
                  v1::ListPodSandboxRequest(), "ListPodSandbox");
  if (!r.ok()) return r.status();
  if (in.options.json) {
    in.out << messageJson(*r);
  } else if (p->has("-q")) {
    for (const auto& s : r->items()) in.out << s.id() << '\n';
  } else {
    printPods(*r, in.out);
  }
  return 0;
}

absl::StatusOr<int> cmdPs(const Invocation& in) {
  auto p = parseArgs(in.args, {{"-a", false}, {"-q", false}, {"-p", true}});
  if (!p.ok()) return p.status();
  v1::ListContainersRequest req;
  if (!p->has("-a")) req.mutable_filter()->mutable_state()->set_state(v1::CONTAINER_RUNNING);
  if (p->has("-p")) req.mutable_filter()->set_pod_sandbox_id(p->get("-p"));
  Client c(in.options);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::ListContainers, req, "ListContainers");
  if (!r.ok()) return r.status();
  if (in.options.json) {
    in.out << messageJson(*r);
  } else if (p->has("-q")) {
    for (const auto& ct : r->containers()) in.out << ct.id() << '\n';
  } else {
    printContainers(*r, in.out);
  }
  return 0;
}

absl::StatusOr<int> cmdImages(const Invocation& in) {
  auto p = parseArgs(in.args, {{"-q", false}});
  if (!p.ok()) return p.status();
  Client c(in.options);
  auto r = c.call(c.images(), &v1::ImageService::Stub::ListImages, v1::ListImagesRequest(),
                  "ListImages");
  if (!r.ok()) return r.status();
  if (in.options.json) {
    in.out << messageJson(*r);
  } else if (p->has("-q")) {
    for (const auto& i : r->images()) in.out << i.id() << '\n';
  } else {
    printImages(*r, in.out);
  }
  return 0;
}

absl::StatusOr<int> cmdRunp(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--runtime", true}});
  if (!p.ok()) return p.status();
  if (auto s = needArgs(*p, 1, "a pod config file"); !s.ok()) return s;
  v1::RunPodSandboxRequest req;
  if (auto s = fromJsonFile(p->positional[0], *req.mutable_config()); !s.ok()) return s;
  if (p->has("--runtime")) req.set_runtime_handler(p->get("--runtime"));
  Client c(in.options);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::RunPodSandbox, req, "RunPodSandbox");
  if (!r.ok()) return r.status();
  in.out << r->pod_sandbox_id() << '\n';
  return 0;
}

absl::StatusOr<int> cmdCreate(const Invocation& in) {
  auto p = parseArgs(in.args, {});
  if (!p.ok()) return p.status();
  if (auto s = needArgs(*p, 3, "POD-ID CONTAINER-CONFIG POD-CONFIG"); !s.ok()) return s;
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(p->positional[0]);
  if (auto s = fromJsonFile(p->positional[1], *req.mutable_config()); !s.ok()) return s;
  if (auto s = fromJsonFile(p->positional[2], *req.mutable_sandbox_config()); !s.ok()) return s;
  Client c(in.options);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::CreateContainer, req, "CreateContainer");
  if (!r.ok()) return r.status();
  in.out << r->container_id() << '\n';
  return 0;
}

absl::StatusOr<int> cmdStart(const Invocation& in) {
  return forEachId<v1::StartContainerRequest, v1::StartContainerResponse>(
      in, in.args, &v1::RuntimeService::Stub::StartContainer, "StartContainer",
      [](auto& r, const std::string& id) { r.set_container_id(id); });
}

absl::StatusOr<int> cmdStop(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--timeout", true}, {"-t", true}});
  if (!p.ok()) return p.status();
  int64_t grace = 0;
  for (const char* flag : {"--timeout", "-t"}) {
    if (!p->has(flag)) continue;
    auto n = integerFlag(flag, p->get(flag));
    if (!n.ok()) return n.status();
    grace = *n;
    break;
  }
  return forEachId<v1::StopContainerRequest, v1::StopContainerResponse>(
      in, p->positional, &v1::RuntimeService::Stub::StopContainer, "StopContainer",
      [grace](auto& r, const std::string& id) {
        r.set_container_id(id);
        r.set_timeout(grace);
      });
}

absl::StatusOr<int> cmdRm(const Invocation& in) {
  return forEachId<v1::RemoveContainerRequest, v1::RemoveContainerResponse>(
      in, in.args, &v1::RuntimeService::Stub::RemoveContainer, "RemoveContainer",
      [](auto& r, const std::string& id) { r.set_container_id(id); });
}

absl::StatusOr<int> cmdStopp(const Invocation& in) {
  return forEachId<v1::StopPodSandboxRequest, v1::StopPodSandboxResponse>(
      in, in.args, &v1::RuntimeService::Stub::StopPodSandbox, "StopPodSandbox",
      [](auto& r, const std::string& id) { r.set_pod_sandbox_id(id); });
}

absl::StatusOr<int> cmdRmp(const Invocation& in) {
  return forEachId<v1::RemovePodSandboxRequest, v1::RemovePodSandboxResponse>(
      in, in.args, &v1::RuntimeService::Stub::RemovePodSandbox, "RemovePodSandbox",
      [](auto& r, const std::string& id) { r.set_pod_sandbox_id(id); });
}

absl::StatusOr<int> cmdExec(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--sync", false}, {"-s", false}, {"--timeout", true}});
  if (!p.ok()) return p.status();
  if (auto s = needArgs(*p, 2, "CONTAINER-ID CMD [ARG...]"); !s.ok()) return s;
  v1::ExecSyncRequest req;
  req.set_container_id(p->positional[0]);
  for (size_t i = 1; i < p->positional.size(); ++i) req.add_cmd(p->positional[i]);
  if (p->has("--timeout")) {
    auto n = integerFlag("--timeout", p->get("--timeout"));
    if (!n.ok()) return n.status();
    req.set_timeout(*n);
  }
  Client c(in.options);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::ExecSync, req, "ExecSync");
  if (!r.ok()) return r.status();
  in.out << r->stdout();
  in.err << r->stderr();
  return r->exit_code();
}

absl::StatusOr<int> cmdInspect(const Invocation& in) {
  return inspect<v1::RuntimeService::Stub, v1::ContainerStatusRequest, v1::ContainerStatusResponse>(
      in, "a container ID", &Client::runtime, &v1::RuntimeService::Stub::ContainerStatus,
      "ContainerStatus", [](auto& r, const std::string& id) {
        r.set_container_id(id);
        r.set_verbose(true);
      });
}

absl::StatusOr<int> cmdInspectp(const Invocation& in) {
  return inspect<v1::RuntimeService::Stub, v1::PodSandboxStatusRequest,
                 v1::PodSandboxStatusResponse>(
      in, "a pod ID", &Client::runtime, &v1::RuntimeService::Stub::PodSandboxStatus,
      "PodSandboxStatus", [](auto& r, const std::string& id) {
        r.set_pod_sandbox_id(id);
        r.set_verbose(true);
      });
}

absl::StatusOr<int> cmdInspecti(const Invocation& in) {
  return inspect<v1::ImageService::Stub, v1::ImageStatusRequest, v1::ImageStatusResponse>(
      in, "an image", &Client::images, &v1::ImageService::Stub::ImageStatus, "ImageStatus",
      [](auto& r, const std::string& image) { r.mutable_image()->set_image(image); });
}

absl::StatusOr<int> cmdUpdate(const Invocation& in) {
  auto p = parseArgs(in.args, {{"--cpuset-cpus", true}, {"--cpuset-mems", true}});
  if (!p.ok()) return p.status();
  if (auto s = needArgs(*p, 1, "a container ID"); !s.ok()) return s;
  v1::UpdateContainerResourcesRequest req;
  req.set_container_id(p->positional[0]);
  if (p->has("--cpuset-cpus")) req.mutable_linux()->set_cpuset_cpus(p->get("--cpuset-cpus"));
  if (p->has("--cpuset-mems")) req.mutable_linux()->set_cpuset_mems(p->get("--cpuset-mems"));
  Client c(in.options);
  auto r = c.call(c.runtime(), &v1::RuntimeService::Stub::UpdateContainerResources, req,
                  "UpdateContainerResources");
  if (!r.ok()) return r.status();
  in.out << p->positional[0] << '\n';
  return 0;
}

}  // namespace crihook::ctl
