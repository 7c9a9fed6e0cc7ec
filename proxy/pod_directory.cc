#include "proxy/pod_directory.h"

namespace crihook {

void PodDirectory::addSandbox(const std::string& sandbox_id, const CallIdentity& pod) {
  std::lock_guard lock(mu_);
  CallIdentity& entry = sandboxes_[sandbox_id];
  entry.pod_namespace = pod.pod_namespace;
  entry.pod_name = pod.pod_name;
  entry.pod_uid = pod.pod_uid;
  entry.sandbox_id = sandbox_id;
}

void PodDirectory::addContainer(const std::string& container_id, const std::string& sandbox_id,
                                const std::string& container_name) {
  std::lock_guard lock(mu_);
  containers_[container_id] = Container{sandbox_id, container_name};
}

void PodDirectory::removeSandbox(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  sandboxes_.erase(sandbox_id);
  // RemovePodSandbox removes the sandbox's containers too.
  std::erase_if(containers_, [&](const auto& kv) { return kv.second.sandbox_id == sandbox_id; });
}

void PodDirectory::removeContainer(const std::string& container_id) {
  std::lock_guard lock(mu_);
  containers_.erase(container_id);
}

void PodDirectory::complete(CallIdentity& id) const {
  std::lock_guard lock(mu_);
  if (!id.container_id.empty()) {
    if (auto c = containers_.find(id.container_id); c != containers_.end()) {
      if (id.sandbox_id.empty()) id.sandbox_id = c->second.sandbox_id;
      if (id.container_name.empty()) id.container_name = c->second.name;
    }
  }
  if (!id.sandbox_id.empty() && id.pod_name.empty()) {
    if (auto s = sandboxes_.find(id.sandbox_id); s != sandboxes_.end()) {
      id.pod_namespace = s->second.pod_namespace;
      id.pod_name = s->second.pod_name;
      id.pod_uid = s->second.pod_uid;
    }
  }
}

size_t PodDirectory::size() const {
  std::lock_guard lock(mu_);
  return sandboxes_.size() + containers_.size();
}

CallIdentity identityOf(const LifecycleSpec& spec, const google::protobuf::Message& request,
                        const PodDirectory& pods) {
  CallIdentity id = identityFromRequest(spec, request);
  pods.complete(id);
  return id;
}

void recordOutcome(const LifecycleSpec& spec, CallIdentity& id,
                   const google::protobuf::Message& response, PodDirectory& pods) {
  switch (spec.effect) {
    case Effect::kCreatesSandbox:
      id.sandbox_id = spec.createdId(response);
      if (!id.sandbox_id.empty()) pods.addSandbox(id.sandbox_id, id);
      return;
    case Effect::kCreatesContainer:
      id.container_id = spec.createdId(response);
      if (!id.container_id.empty())
        pods.addContainer(id.container_id, id.sandbox_id, id.container_name);
      return;
    case Effect::kRemovesSandbox:
      pods.removeSandbox(id.sandbox_id);
      return;
    case Effect::kRemovesContainer:
      pods.removeContainer(id.container_id);
      return;
    case Effect::kNone:
      return;
  }
}

}  // namespace crihook
