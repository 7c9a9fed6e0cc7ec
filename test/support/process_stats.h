#pragma once

// What the kernel says of a process, for tests and benchmarks that bound
// what crihook keeps (threads, memory). Linux /proc only; -1 / 0 when the
// process is gone.

#include <dirent.h>
#include <sys/types.h>

#include <fstream>
#include <string>

namespace crihook {

// Threads of `pid` (0: this process), as /proc/PID/task lists them.
inline size_t threadCount(pid_t pid = 0) {
  const std::string dir = pid == 0 ? "/proc/self/task" : "/proc/" + std::to_string(pid) + "/task";
  size_t n = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// Threads of this process named `name` (their /proc/self/task/TID/comm).
inline size_t threadsNamed(const std::string& name) {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string line;
    n += std::getline(comm, line) && line == name;
  }
  ::closedir(d);
  return n;
}

// A "Vm...:" figure of `pid` (0: this process) in KiB, from its status.
inline long statusKiB(pid_t pid, const std::string& field) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : "/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Resident memory of `pid` (0: this process) in KiB, from VmRSS.
inline long rssKiB(pid_t pid = 0) { return statusKiB(pid, "VmRSS"); }

// The most it was ever resident (VmHWM), in KiB.
inline long peakRssKiB(pid_t pid = 0) { return statusKiB(pid, "VmHWM"); }

}  // namespace crihook
