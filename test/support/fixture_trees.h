#pragma once

// test/topology/make-fixtures.sh's machines (dgx, workstation, intel-rdma,
// snc: the script's header says what each holds). Under meson they are made
// once a build (test/meson.build's fixture_trees) and found through
// CRIHOOK_FIXTURE_TREES; a program run by hand makes its own on first use, in
// a temporary directory removed at its exit. Every test of every program
// shares one set: none may change them (copy one first). Needs
// CRIHOOK_SOURCE_DIR (the tests' cpp_args). A script that fails is a test
// failure naming it; the path is returned all the same (and the test then
// fails on what is missing).

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "test/support/fake_cri_server.h"  // TempDir

namespace crihook::testing {

// The folder holding make-fixtures.sh's machines.
inline const std::string& fixtureTrees() {
  static const std::string root = [] {
    const char* built = std::getenv("CRIHOOK_FIXTURE_TREES");
    if (built != nullptr && ::access((std::string(built) + "/dgx/sys").c_str(), F_OK) == 0)
      return std::string(built);
    static TempDir dir;
    const std::string cmd =
        std::string("bash " CRIHOOK_SOURCE_DIR "/test/topology/make-fixtures.sh ") + dir.path();
    const int rc = std::system(cmd.c_str());
    if (rc != 0) ADD_FAILURE() << cmd << " exited with " << rc;
    return dir.path();
  }();
  return root;
}

// The root of fixture `name` (a directory holding sys/ and proc/).
inline std::string fixtureTree(const std::string& name) { return fixtureTrees() + "/" + name; }

}  // namespace crihook::testing
