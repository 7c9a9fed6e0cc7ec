#pragma once

// A daemon started as systemd starts a socket-activated service: the
// listening socket `fd` at fd 3 without close-on-exec, no other fd above
// it, LISTEN_FDS=1, LISTEN_FDNAMES=crihookd.socket and LISTEN_PID=its own
// pid (or another, `pid_offset` away: variables meant for someone else).
// Its stdout and stderr go to `log`. It dies with the test (PR_SET_PDEATHSIG;
// forked from the test's main thread, which lives as long as the test) and
// is SIGKILLed when destroyed still running.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test/support/eventually.h"

namespace crihook::testing {

class ActivatedDaemon {
 public:
  ActivatedDaemon(const std::string& binary, int fd, const std::vector<std::string>& args,
                  const std::string& log, int pid_offset = 0) {
    const pid_t test = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != test) ::_exit(127);
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(out, 1);
      ::dup2(out, 2);
      if (fd == 3) {
        ::fcntl(3, F_SETFD, 0);
      } else {
        ::dup2(fd, 3);  // the copy without close-on-exec
      }
      ::close_range(4, ~0U, 0);
      ::setenv("LISTEN_FDS", "1", 1);
      ::setenv("LISTEN_FDNAMES", "crihookd.socket", 1);
      ::setenv("LISTEN_PID", std::to_string(::getpid() + pid_offset).c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~ActivatedDaemon() {
    if (pid_ > 0 && code_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ActivatedDaemon(const ActivatedDaemon&) = delete;
  ActivatedDaemon& operator=(const ActivatedDaemon&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) {
    if (code_ < 0) ::kill(pid_, sig);
  }
  // The exit code (128+signal when killed), or -1 if still running after
  // `timeout`.
  int wait(std::chrono::milliseconds timeout) {
    eventually(
        [&] {
          int status = 0;
          if (code_ < 0 && ::waitpid(pid_, &status, WNOHANG) == pid_)
            code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return code_ >= 0;
        },
        timeout);
    return code_;
  }

 private:
  pid_t pid_ = -1;
  int code_ = -1;
};

}  // namespace crihook::testing
