#pragma once

// Threads named after their job: what `top -H`, `ps -L`, gdb and a core dump
// show for each of crihookd's threads (docs/architecture.md, "Threading
// model", lists them). Linux keeps 15 bytes of a name; longer ones are cut.

#include <pthread.h>

#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace crihook {

// The longest name the kernel keeps (TASK_COMM_LEN less its NUL).
inline constexpr size_t kMaxThreadName = 15;

// Names the calling thread, cut to kMaxThreadName bytes.
inline void setThreadName(std::string_view name) {
  const std::string cut(name.substr(0, kMaxThreadName));
  ::pthread_setname_np(::pthread_self(), cut.c_str());
}

// A std::thread that names itself `name`, then runs `fn`.
template <typename Fn>
std::thread namedThread(std::string name, Fn&& fn) {
  return std::thread([name = std::move(name), fn = std::forward<Fn>(fn)]() mutable {
    setThreadName(name);
    fn();
  });
}

}  // namespace crihook
