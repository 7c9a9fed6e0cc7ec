#pragma once

// The actions the device-lifecycle hook runs to initialise a device before a
// pod runs and to clean it up after the pod stops. An action is either a
// command (an argument vector, each argument a template, executed directly:
// no shell, so nothing a pod is named can become shell syntax) or a built-in:
//
//   {"command": ["/usr/bin/nvidia-smi", "-i", "{uuid}", "-pm", "1"], "timeout": "10s"}
//   {"builtin": "pci-reset"}   writes 1 to <root>/sys/bus/pci/devices/<pci>/reset
//                              (a function-level reset of the device)
//   {"builtin": "check-node"}  the device's node exists under the device root
//
// Templates: {type} {index} {minor} {id} {uuid} {pci} {name} {node}
// {pod_namespace} {pod_name} {pod_uid}; "{{" and "}}" are literal braces. An
// unknown placeholder is refused when the settings are read; a placeholder
// the device has no value for (an RDMA function has no {uuid}) fails the
// action, naming it, rather than running it with an empty argument.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "hooks/process_env.h"

namespace crihook {

// What an action knows of its device; kept in the device-lifecycle records,
// so a cleanup after a restart uses what the init used.
struct DeviceFacts {
  std::string type;  // gpu, rdma, fpga
  int index = 0;     // position among the pod's devices of this type
  int minor = -1;
  std::string id;    // as the scheduler wrote it
  std::string uuid;  // GPU UUID, from the topology
  std::string pci;   // PCI address, from the topology (the VF's for an allocated VF)
  std::string name;  // RDMA device name (mlx5_3), from the topology
  std::string node;  // device node under the device root: nvidia0, infiniband/uverbs3

  nlohmann::json toJson() const;
  static absl::StatusOr<DeviceFacts> fromJson(const nlohmann::json& j);
  // "gpu 0 (minor 0, GPU-…)" for messages.
  std::string describe() const;
};

struct PodFacts {
  std::string namespace_, name, uid;
};

// Where built-in actions look.
struct ActionRoots {
  std::string sys_root = "/";  // holds sys/
  std::string device_root = "/dev";
};

class Action {
 public:
  // One entry of settings.<type>.init / .cleanup. `field` names it in errors
  // ("settings.gpu.init[0]"). INVALID_ARGUMENT naming the field.
  static absl::StatusOr<Action> parse(const nlohmann::json& v, const std::string& field);

  // `nvidia-smi -i {uuid} -pm 1` or `builtin pci-reset`, for messages.
  std::string describe() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Runs it for one device through `env` (its exec, its files, its clock);
  // blocks up to its timeout or `deadline` (by env's clock), whichever is
  // sooner (a command still running then is killed with its process group).
  // OK on success; otherwise the reason: the exit status and the last line
  // the command printed, "timed out", or why it could not start.
  // DEADLINE_EXCEEDED without running when the deadline has passed.
  // Thread-safe.
  absl::Status run(const DeviceFacts& device, const PodFacts& pod, const ActionRoots& roots,
                   std::chrono::steady_clock::time_point deadline, Env& env = processEnv()) const;

  // The command line as it would run (for tests and logs).
  absl::StatusOr<std::vector<std::string>> expand(const DeviceFacts& device,
                                                  const PodFacts& pod) const;

 private:
  enum class Kind { kCommand, kPciReset, kCheckNode };
  Kind kind_ = Kind::kCommand;
  std::vector<std::string> argv_;
  std::chrono::milliseconds timeout_{10000};
};

// Runs `argv` (argv[0] an absolute path or a name looked up in PATH) with
// stdin from /dev/null, stdout and stderr captured, in its own process group;
// blocks until it exits or `timeout` passes (then kills the group). It goes
// through env.exec(); processEnv()'s is confine::processLauncher(): in
// crihookd the spawner process (the command runs outside crihookd's seccomp
// filter and capability drop; a dead spawner is UNAVAILABLE naming it),
// elsewhere a direct fork/exec.
absl::Status runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        Env& env = processEnv());

}  // namespace crihook
