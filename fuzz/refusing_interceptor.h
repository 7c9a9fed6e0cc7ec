#pragma once

// An Interceptor that refuses every intercepted call, so that a harness
// reaches the answers crihookd makes without the runtime (fuzz_relay,
// fuzz_transparent).

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "cri/interceptor.h"

namespace crihook::fuzz {

class RefusingInterceptor final : public Interceptor {
 public:
  // `by`: the harness, named in the refusal's message.
  explicit RefusingInterceptor(std::string by) : message_("refused by " + std::move(by)) {}
  void pre(std::shared_ptr<InterceptedCall>, std::function<void(absl::Status)> done) override {
    done(absl::FailedPreconditionError(message_));
  }
  void post(std::shared_ptr<InterceptedCall>, std::function<void()> done) override { done(); }

 private:
  std::string message_;
};

}  // namespace crihook::fuzz
