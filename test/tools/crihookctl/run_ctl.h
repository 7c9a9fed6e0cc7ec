#pragma once

// What crihookctl's command tests share: one command line run in-process
// (ctl::run) with its exit code and both streams, and the state record of a
// container the explain tests store.

#include <sstream>
#include <string>
#include <vector>

#include "hooks/state_store.h"
#include "tools/crihookctl/cli.h"

namespace crihook::testing {

struct Result {
  int code;
  std::string out, err;
};

inline Result ctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = ctl::run(args, out, err);
  return {code, out.str(), err.str()};
}

// Stores pod ml/train-0 (sandbox sb-1) and returns the record of its
// container "trainer" (c0ffee1234) for the test to fill in and store.
inline hook::v1::ContainerRecord trainerOfTrain0(StateStore& state) {
  hook::v1::PodRecord pod;
  pod.set_sandbox_id("sb-1");
  pod.mutable_config()->mutable_metadata()->set_name("train-0");
  pod.mutable_config()->mutable_metadata()->set_namespace_("ml");
  state.putPod(pod);
  hook::v1::ContainerRecord c;
  c.set_id("c0ffee1234");
  c.set_sandbox_id("sb-1");
  c.mutable_requested()->mutable_metadata()->set_name("trainer");
  return c;
}

}  // namespace crihook::testing
