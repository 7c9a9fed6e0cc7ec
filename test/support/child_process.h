#pragma once

// A child process for tests that drive real binaries (crihookd, containerd):
// output to a log file, killed on destruction if still running.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace crihook::testing {

class ChildProcess {
 public:
  ChildProcess(const std::string& binary, const std::vector<std::string>& args,
               const std::string& log_path, const std::map<std::string, std::string>& env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The exit code (128+signal when killed), or -1 if still running after `timeout`.
  int wait(std::chrono::milliseconds timeout);
  void signal(int sig);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

std::string readFile(const std::string& path);

// Polls until `path` exists.
bool waitForFile(const std::string& path, std::chrono::milliseconds timeout);

}  // namespace crihook::testing
