#pragma once

// crihookctl's CRI commands, in the spirit of crictl (which Debian does not
// package): each makes one or more calls to the runtime at -r (crihookd's
// socket by default) with the -t timeout each, and prints the answer as a
// table or, with -o json, as the CRI message in JSON. A call the runtime
// refuses is an error naming the method and the gRPC code ("StartContainer:
// Unimplemented: ..."), exit 1; a request file that cannot be read or is not
// the CRI message is a usage error naming the file. They block the calling
// thread for the calls.

#include "tools/crihookctl/command.h"

namespace crihook::ctl {

absl::StatusOr<int> cmdVersion(const Invocation& in);   // Version
absl::StatusOr<int> cmdInfo(const Invocation& in);      // Status, verbose
absl::StatusOr<int> cmdPods(const Invocation& in);      // ListPodSandbox
absl::StatusOr<int> cmdPs(const Invocation& in);        // ListContainers
absl::StatusOr<int> cmdImages(const Invocation& in);    // ListImages
absl::StatusOr<int> cmdRunp(const Invocation& in);      // RunPodSandbox from a JSON file
absl::StatusOr<int> cmdCreate(const Invocation& in);    // CreateContainer from JSON files
absl::StatusOr<int> cmdStart(const Invocation& in);     // StartContainer, each ID
absl::StatusOr<int> cmdStop(const Invocation& in);      // StopContainer, each ID
absl::StatusOr<int> cmdRm(const Invocation& in);        // RemoveContainer, each ID
absl::StatusOr<int> cmdStopp(const Invocation& in);     // StopPodSandbox, each ID
absl::StatusOr<int> cmdRmp(const Invocation& in);       // RemovePodSandbox, each ID
absl::StatusOr<int> cmdExec(const Invocation& in);      // ExecSync: the command's exit code
absl::StatusOr<int> cmdInspect(const Invocation& in);   // ContainerStatus, verbose
absl::StatusOr<int> cmdInspectp(const Invocation& in);  // PodSandboxStatus, verbose
absl::StatusOr<int> cmdInspecti(const Invocation& in);  // ImageStatus
absl::StatusOr<int> cmdUpdate(const Invocation& in);    // UpdateContainerResources (cpusets)

}  // namespace crihook::ctl
