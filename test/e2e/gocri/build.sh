#!/usr/bin/env bash
# Builds gocri, or another Go program of test/e2e (PROGRAM: the folder of its
# main.go, e.g. koordlet), offline from Debian's Go packages (scripts/install-deps.sh):
# grpc-go 1.33 (golang-google-grpc-dev) and protoc-gen-go 1.3
# (golang-goprotobuf-dev), in GOPATH mode. Newer protoc-gen-go output compiles
# but panics inside grpc-go 1.33's codec, hence the 1.3 plugin.
#   build.sh SOURCE_ROOT WORK_DIR OUTPUT PROTOC_GEN_GO [PROGRAM]
set -euo pipefail
src=$(realpath "$1") work=$(realpath -m "$2") out=$(realpath -m "$3") plugin=$(realpath "$4")
program=${5:-gocri}
gopath=$work/gopath
rm -rf "$gopath"
mkdir -p "$gopath/src/crihook/cri" "$gopath/src/crihook/koord" "$gopath/src/crihook/$program" \
  "$work/gocache"
# The proto has no go_package: the M flag names its Go import path.
protoc -I "$src/cri-api" --plugin=protoc-gen-go="$plugin" \
  --go_out=plugins=grpc,Mruntime_v1.proto=crihook/cri:"$gopath/src/crihook/cri" runtime_v1.proto
protoc -I "$src/cri-api" --plugin=protoc-gen-go="$plugin" \
  --go_out=plugins=grpc,Mkoordinator_runtime_v1alpha1.proto=crihook/koord:"$gopath/src/crihook/koord" \
  koordinator_runtime_v1alpha1.proto
cp "$src/test/e2e/$program/main.go" "$gopath/src/crihook/$program/"
cd "$gopath/src/crihook/$program"
GOPATH="$gopath:/usr/share/gocode" GO111MODULE=off GOCACHE="$work/gocache" GOFLAGS= \
  go build -o "$out" .
