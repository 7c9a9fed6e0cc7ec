#!/usr/bin/env bash
# Installs the Debian packages crihook needs. Idempotent: packages already
# present are not fetched again, and apt-get update runs only when something
# is missing.
#
#   scripts/install-deps.sh          everything: build, test, package, fuzz
#   scripts/install-deps.sh demo     what scripts/run-demo.sh needs: the
#                                    build of crihookd and crihookctl, and the
#                                    runtime the demo pod runs on
set -euo pipefail

build_pkgs=(
  build-essential pkg-config meson ninja-build
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libgrpc-dev
  libnghttp2-dev libboost-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev libyaml-cpp-dev
  libabsl-dev libgtest-dev libgmock-dev
  libseccomp-dev
)
# ccache: every build of a run (the suite's, the package's, the fuzzing
# harnesses') compiles through it, so a second build of the same code is a
# cache hit (scripts/ccache.sh sets where the cache is).
cache_pkgs=(ccache)
# git: a build from a checkout shows its commit (scripts/git-describe.sh).
source_pkgs=(git)
# The end-to-end tests and the demo run a real containerd and runc and build a
# busybox image locally; iproute2/iptables are what containerd's CNI-less sandbox needs.
runtime_pkgs=(containerd runc busybox-static)
# systemd-socket-activate, which the socket-activation test starts crihookd with.
test_pkgs=(systemd)
# gocri, the grpc-go CRI client the tests dial crihookd with as kubelet does
# (test/e2e/gocri), is built offline from Debian's Go packages.
go_pkgs=(golang-go golang-google-grpc-dev golang-goprotobuf-dev)
# The fuzzing harnesses (fuzz/, scripts/fuzz.sh): clang with libFuzzer and
# the sanitizer runtimes.
fuzz_pkgs=(clang-14 libclang-rt-14-dev llvm-14)
# The Debian package (debian/, the e2e test debian_package): dpkg-buildpackage
# and debhelper (which brings man-db, for the man pages), fakeroot, lintian.
package_pkgs=(debhelper dpkg-dev fakeroot lintian)
# Graphviz: `dot -Tsvg` checks that `crihookctl topology --output dot` is a
# graph Graphviz reads (test/topology/views_test.cc), and renders docs/topology-dgx.svg.
docs_pkgs=(graphviz)

case ${1:-all} in
  demo) wanted=("${build_pkgs[@]}" "${cache_pkgs[@]}" "${source_pkgs[@]}" "${runtime_pkgs[@]}") ;;
  all)
    wanted=("${build_pkgs[@]}" "${cache_pkgs[@]}" "${source_pkgs[@]}" "${runtime_pkgs[@]}" "${test_pkgs[@]}"
      "${go_pkgs[@]}" "${fuzz_pkgs[@]}" "${docs_pkgs[@]}" "${package_pkgs[@]}")
    ;;
  *)
    echo "usage: install-deps.sh [demo|all]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: must run as root to install packages" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # containerd's unit must not start a system containerd on its own: the
  # tests start a private one, and the demo uses whatever the operator runs.
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
