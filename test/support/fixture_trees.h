#pragma once

// test/topology/make-fixtures.sh's machines (dgx, workstation, intel-rdma,
// snc: the script's header says what each holds), made once per test
// program on first use, in a temporary directory removed at its exit. The
// script runs hundreds of programs, seconds on a loaded machine, so every
// suite of a program shares one set; none may change them (copy one first).
// Needs CRIHOOK_SOURCE_DIR (the tests' cpp_args). A script that fails is a
// test failure naming it; the path is returned all the same (and the test
// then fails on what is missing).

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "test/support/fake_cri_server.h"  // TempDir

namespace crihook::testing {

// The root of fixture `name` (a directory holding sys/ and proc/).
inline std::string fixtureTree(const std::string& name) {
  static TempDir dir;
  static const bool made = [] {
    const std::string cmd =
        std::string("bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh ") + dir.path();
    const int rc = std::system(cmd.c_str());
    if (rc != 0) ADD_FAILURE() << cmd << " exited with " << rc;
    return rc == 0;
  }();
  (void)made;
  return dir.file(name);
}

}  // namespace crihook::testing
