#!/usr/bin/env python3
"""Writes the seed corpus of each harness under fuzz/corpus/<harness>/.

The seeds are small, valid inputs taken from crihook's own tests, docs and
fixtures, plus a few near misses; libFuzzer mutates from there. Run it again
after changing a seed here; scripts/fuzz.sh never writes into fuzz/corpus
(it fuzzes a copy). Inputs that once crashed a harness are committed next to
these (crash-<what>): by hand as the fuzzer wrote them, or made here where
they read better as frames.
"""
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(harness, name, data):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- gRPC framing ---------------------------------------------------------
def grpc(msg, compressed=0):
    return bytes([compressed]) + struct.pack(">I", len(msg)) + msg


# fuzz_grpc_wire: the stream, then the split seed byte, then the limit byte
# (255: 16 MiB); FuzzedDataProvider takes integers from the input's end.
def wire(stream, seed, limit):
    return stream + bytes([seed, limit])


write("fuzz_grpc_wire", "one-message", wire(grpc(b"\x0a\x02v1"), 7, 255))
write("fuzz_grpc_wire", "two-messages", wire(grpc(b"abc") + grpc(b""), 3, 255))
write("fuzz_grpc_wire", "over-limit", wire(grpc(b"ab") + grpc(b"too long"), 1, 4))
write("fuzz_grpc_wire", "split-header", wire(grpc(b"x" * 9) + b"\x00\x00\x00", 200, 10))
write("fuzz_grpc_wire", "compressed", wire(grpc(b"zz", compressed=1), 0, 255))
write("fuzz_grpc_wire", "timeout", wire(b"99999999H", 0, 255))
write("fuzz_grpc_wire", "percent", wire(b"a%20b%zz%", 0, 255))

# --- annotations ----------------------------------------------------------
ann = {
    "device-allocated-gpu-rdma":
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":'
        '"16Gi","koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"}],'
        '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
        '"extension":{"vfs":[{"minor":-1,"busID":"0000:1f:00.2"}]}}]}',
    "device-allocated-null-resources":
        '{"gpu":[{"minor":0,"resources":null,"id":"GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d"}]}',
    "device-allocated-shared":
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50"},"id":"GPU-00000000-aaaa-bbbb-'
        'cccc-dddddddddddd","extension":{"gpuSharedResourceTemplate":"vir02"}}],"fpga":[{"minor":2}]}',
    "device-allocated-bad-vf": '{"rdma":[{"minor":1,"extension":{"vfs":[{"busID":"../../../../x"}]}}]}',
    "device-allocated-unknown-type": '{"npu":[]}',
    "resource-status": '{"cpuset":"2-5","numaNodeResources":[{"node":0,"resources":{"cpu":"4","memory":"8Gi"}}]}',
    "resource-status-bad": '{"numaNodeResources":[{"node":"zero"}]}',
    "joint-allocate": '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIeSwitch"}',
    "cpu-list": "0-3,8,10-11",
    "quantity": "1.5Gi",
    "deep": '{"gpu":[{"minor":0,"extension":{"x":' + "[" * 20 + "]" * 20 + "}}]}",
}
for name, text in ann.items():
    write("fuzz_annotations", name, text)

# --- CDI specs ------------------------------------------------------------
write("fuzz_cdi_spec", "vendor.json", """{
  "cdiVersion": "0.6.0", "kind": "vendor.com/gpu",
  "containerEdits": {"env": ["VENDOR_DRIVER=1"]},
  "devices": [
    {"name": "0", "containerEdits": {
      "env": ["VENDOR_VISIBLE=0"],
      "deviceNodes": [{"path": "/dev/vgpu0", "hostPath": "/dev/vgpu0"}, {"path": "/dev/vgpuctl"}],
      "mounts": [{"hostPath": "/opt/vendor/lib", "containerPath": "/usr/lib/vendor", "options": ["ro", "bind"]}]}},
    {"name": "1", "containerEdits": {"env": ["VENDOR_VISIBLE=1"]}}]}""")
write("fuzz_cdi_spec", "vendor.yaml", """cdiVersion: "0.6.0"
kind: vendor.com/gpu
devices:
  - name: "1"
    containerEdits:
      env: ["VENDOR_VISIBLE=1-from-run"]
      deviceNodes:
        - path: /dev/vgpu1
          permissions: rw
""")
write("fuzz_cdi_spec", "nic-hook.yaml", """cdiVersion: "0.6.0"
kind: vendor.com/nic
devices:
  - name: a
    containerEdits:
      deviceNodes: [{path: /dev/vnic0}]
      hooks:
        - hookName: createContainer
          path: /usr/bin/vendor-ctk
      intelRdt: {closID: x}
""")
write("fuzz_cdi_spec", "broken-env.json",
      '{"cdiVersion": "0.6.0", "kind": "vendor.com/x", "devices": [{"name": "0", "containerEdits": {"env": ["NOEQUALS"]}}]}')
write("fuzz_cdi_spec", "anchors.yaml", "a: &x [1, *x]\nkind: &k vendor.com/y\ncdiVersion: *k\ndevices: []\n")

# --- hook server registrations ---------------------------------------------
hs = {
    "koordlet": '{"remote-endpoint": "/var/run/koordlet/koordlet.sock", "failure-policy": "Ignore", '
                '"runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", '
                '"PostStartContainer", "PreUpdateContainerResources", "PostStopContainer", '
                '"PreRemoveRunPodSandbox"]}',
    "unix-fail": '{"remote-endpoint": "unix:///var/run/koordlet/koordlet.sock", "failure-policy": "Fail", '
                 '"runtime-hooks": ["PreCreateContainer"]}',
    "case-keys": '{"Remote-Endpoint": "/k.sock", "remote-endpoint": "/k2.sock", "FAILURE-POLICY": "fail", '
                 '"runtime-hooks": ["PreCreateContainer", "Unknown"], "extra": {"x": [1]}}',
    "tcp": '{"remote-endpoint": "tcp://x", "runtime-hooks": ["PreCreateContainer"]}',
    "bad-hook": '{"remote-endpoint": "/k.sock", "runtime-hooks": ["PreCreateContainer", 7]}',
    "null": '{"remote-endpoint": "/k.sock", "failure-policy": null, "runtime-hooks": null}',
}
for name, text in hs.items():
    write("fuzz_hookserver_file", name, text)

# --- config -----------------------------------------------------------------
SOURCE = os.path.join(os.path.dirname(ROOT), "..")


def doc_toml(page, after):
    """The first TOML block of `page` after the heading `after`."""
    lines, on, seen = [], False, False
    for line in open(os.path.join(SOURCE, page)):
        if line.startswith(after):
            seen = True
        if seen and line.startswith("```toml"):
            on = True
            continue
        if on and line.startswith("```"):
            break
        if on:
            lines.append(line)
    if not lines:
        sys.exit(f"make-seeds: no TOML block after {after!r} in {page}")
    return "".join(lines)


write("fuzz_config", "server", doc_toml("README.md", "## A working configuration"))
write("fuzz_config", "hooks", doc_toml("docs/hooks.md", "# Hooks"))
write("fuzz_config", "example", open(os.path.join(SOURCE, "debian/examples/crihook.toml")).read())
write("fuzz_config", "bad-workers", "[server]\nworkers = 0\n")
write("fuzz_config", "unknown-key", "[server]\nlisten = \"/run/x.sock\"\ntypo = 1\n")
write("fuzz_config", "durations", "[backend]\nconnect_timeout = \"1500ms\"\n[hooks]\nhookserver_timeout = \"1m\"\n")

# --- topology: parts separated by NUL, in fuzz_topology.cc's kParts order ----
topo = [
    "0-3\n",                      # cpu/online
    "0-1\n",                      # node/online
    "0-1\n",                      # node0/cpulist
    "Node 0 MemTotal:       268435456 kB\nNode 0 MemFree:        1024 kB\n",
    "10 21\n",                    # node0/distance
    "0\n", "0\n", "0\n",          # cpu0 package, core, siblings
    "0x10de\n", "0x030200\n", "0\n",  # GPU vendor, class, numa_node
    "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   140\nGPU UUID: \t GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d\n"
    "Device Minor: \t 0\n",
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05\n",
    "0\n",                        # bridge numa_node
    "4: ACTIVE\n", "InfiniBand\n", "mlx5_0\n",
    "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
    "../../devices/pci0000:00/0000:00:02.0/0000:02:00.0/infiniband/mlx5_0",
]
write("fuzz_topology", "fixture", "\0".join(topo))
bad = list(topo)
bad[0], bad[10], bad[11], bad[14] = "0-65535x\n", "7\n", "Device Minor: 255\n", "1: DOWN\n"
write("fuzz_topology", "bad-values", "\0".join(bad))
write("fuzz_topology", "links-out", "\0".join(topo[:17] + ["../../../../../../../../etc", "/proc/self"]))
write("fuzz_topology", "few-files", "0\0")

# --- HTTP/2 to the relay ----------------------------------------------------
def h2frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    # Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2);
    # names and values here are under 127 bytes.
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def headers(path, extra=()):
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
              ("content-type", "application/grpc"), ("te", "trailers")] + list(extra)
    return b"".join(hpack_literal(n, v) for n, v in fields)


SETTINGS = h2frame(4, 0, 0)
END_STREAM, END_HEADERS = 0x1, 0x4


def call(path, body, stream=1, extra=()):
    return (h2frame(1, END_HEADERS, stream, headers(path, extra)) +
            h2frame(0, END_STREAM, stream, body))


RT = "/runtime.v1.RuntimeService/"
version = grpc(b"\x0a\x02v1")
stop = grpc(b"\x0a\x02c1")                        # StopContainerRequest{container_id: "c1"}
create = grpc(b"\x0a\x02sb")                      # CreateContainerRequest{pod_sandbox_id: "sb"}
# RunPodSandboxRequest{config{metadata{name: "p", uid: "u", namespace: "ns"}}}
meta = b"\x0a\x01p\x12\x01u\x1a\x02ns"
run = grpc(b"\x0a" + bytes([len(meta) + 2]) + b"\x0a" + bytes([len(meta)]) + meta)

# First byte: bit 0 set = the interceptor refuses intercepted calls.
write("fuzz_relay", "version", b"\x00" + SETTINGS + call(RT + "Version", version))
write("fuzz_relay", "stop-container-pass", b"\x00" + SETTINGS + call(RT + "StopContainer", stop))
write("fuzz_relay", "stop-container-refused", b"\x01" + SETTINGS + call(RT + "StopContainer", stop))
write("fuzz_relay", "run-pod-sandbox", b"\x01" + SETTINGS + call(RT + "RunPodSandbox", run, stream=3))
write("fuzz_relay", "create-two-messages", b"\x00" + SETTINGS +
      call(RT + "CreateContainer", create + grpc(b"second")))
write("fuzz_relay", "timeout-and-v1alpha2", b"\x00" + SETTINGS +
      call("/runtime.v1alpha2.RuntimeService/StopContainer", stop, extra=[("grpc-timeout", "100m")]))
hb = headers(RT + "Version")
write("fuzz_relay", "continuation-ping-window-goaway", b"\x00" + SETTINGS +
      h2frame(1, 0, 1, hb[:10]) + h2frame(9, END_HEADERS, 1, hb[10:]) +
      h2frame(6, 0, 0, b"12345678") + h2frame(8, 0, 1, struct.pack(">I", 1000)) +
      h2frame(0, END_STREAM, 1, version) + h2frame(3, 0, 5, struct.pack(">I", 8)) +
      h2frame(7, 0, 0, struct.pack(">II", 1, 0)))
write("fuzz_relay", "trailers-from-client", b"\x01" + SETTINGS +
      h2frame(1, END_HEADERS, 1, headers(RT + "StopContainer")) + h2frame(0, 0, 1, stop) +
      h2frame(1, END_HEADERS | END_STREAM, 1, hpack_literal("x-trailer", "1")))

# --- A server's reply to crihookd's gRPC client ----------------------------
# The server's side of a connection whose first (client) stream is 1.
STATUS_200 = b"\x88"  # :status 200, static table index 8 (RFC 7541 appendix A)
RESPONSE = h2frame(1, END_HEADERS, 1, STATUS_200 + hpack_literal("content-type", "application/grpc"))
SETTINGS_ACK = h2frame(4, 0x1, 0)


def trailers(status, message=None, flags=END_HEADERS | END_STREAM):
    block = hpack_literal("grpc-status", status)
    if message is not None:
        block += hpack_literal("grpc-message", message)
    return h2frame(1, flags, 1, block)


answer = grpc(b"\x0a\x02ok")
write("fuzz_grpc_channel", "reply", SETTINGS + SETTINGS_ACK + RESPONSE + h2frame(0, 0, 1, answer) +
      trailers("0"))
write("fuzz_grpc_channel", "trailers-only", SETTINGS + SETTINGS_ACK +
      h2frame(1, END_HEADERS | END_STREAM, 1, STATUS_200 +
              hpack_literal("content-type", "application/grpc") + hpack_literal("grpc-status", "9") +
              hpack_literal("grpc-message", "pod %22x%22 %C3%B6")))
write("fuzz_grpc_channel", "split-data-and-window", SETTINGS + RESPONSE +
      h2frame(0, 0, 1, answer[:3]) + h2frame(8, 0, 0, struct.pack(">I", 1000)) +
      h2frame(0, 0, 1, answer[3:]) + h2frame(6, 0, 0, b"12345678") + trailers("0"))
write("fuzz_grpc_channel", "reset", SETTINGS + h2frame(3, 0, 1, struct.pack(">I", 8)))
write("fuzz_grpc_channel", "goaway-then-reply", SETTINGS + h2frame(7, 0, 0, struct.pack(">II", 1, 0)) +
      RESPONSE + h2frame(0, 0, 1, answer) + trailers("0"))
write("fuzz_grpc_channel", "two-messages-bad-status", SETTINGS + RESPONSE +
      h2frame(0, 0, 1, answer + grpc(b"x", compressed=1)) + trailers("5x", "%zz"))
write("fuzz_grpc_channel", "continuation", SETTINGS + h2frame(1, 0, 1, STATUS_200) +
      h2frame(9, END_HEADERS, 1, hpack_literal("content-type", "application/grpc")) +
      h2frame(0, 0, 1, answer) + trailers("0"))

# --- Both directions of a relayed connection, as the transparent relay reads them
# The last byte picks the read size (1 + byte % 64).
def hpack_indexed_literal(name, value):
    # Literal with incremental indexing, new name (RFC 7541 6.2.1): enters the table.
    name, value = name.encode(), value.encode()
    return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value


write("fuzz_h2_wire", "kubelet-calls", SETTINGS + call(RT + "Version", version) +
      call(RT + "StopContainer", stop, stream=3) + b"\x06")
write("fuzz_h2_wire", "continuation-ping-window-goaway", SETTINGS +
      h2frame(1, 0, 1, hb[:10]) + h2frame(9, END_HEADERS, 1, hb[10:]) +
      h2frame(6, 0, 0, b"12345678") + h2frame(8, 0, 1, struct.pack(">I", 1000)) +
      h2frame(0, END_STREAM, 1, version) + h2frame(3, 0, 5, struct.pack(">I", 8)) +
      h2frame(7, 0, 0, struct.pack(">II", 1, 0)) + b"\x01")
write("fuzz_h2_wire", "runtime-replies-indexed", SETTINGS + SETTINGS_ACK +
      h2frame(1, END_HEADERS, 1, STATUS_200 + hpack_indexed_literal("content-type", "application/grpc")) +
      h2frame(0, 0, 1, answer) +
      h2frame(1, END_HEADERS | END_STREAM, 1, hpack_indexed_literal("grpc-status", "0")) +
      h2frame(1, END_HEADERS, 3, STATUS_200 + b"\xbe") +  # index 62: the newest entry
      h2frame(1, END_HEADERS | END_STREAM, 3, b"\xbe\xbf") + b"\x10")
write("fuzz_h2_wire", "padded-priority", SETTINGS +
      h2frame(1, END_HEADERS | 0x8 | 0x20, 1, b"\x02" + b"\x00\x00\x00\x00\x10" + headers(RT + "Version") + b"\x00\x00") +
      h2frame(0, END_STREAM | 0x8, 1, b"\x03" + version + b"\x00\x00\x00") +
      h2frame(1, END_HEADERS | 0x8, 3, b"\xff") + b"\x00")

# --- Both peers of a connection through the transparent relay ----------------
# First byte: flags (bit 0: the interceptor refuses intercepted calls; bit 1:
# the runtime's records open its side, else the harness sends its SETTINGS;
# bit 2: tight limits). Then records: 1 byte kind, and for kubelet's (0) and
# the runtime's (1) bytes a 2-byte length and the bytes; 2 runs the timers,
# 3 and 4 hang up kubelet and the runtime, 5 shuts the connection down.
def kubelet(data):
    return b"\x00" + struct.pack(">H", len(data)) + data


def runtime(data):
    return b"\x01" + struct.pack(">H", len(data)) + data


TIMERS, KUBELET_HANGUP, RUNTIME_HANGUP, SHUTDOWN = b"\x02", b"\x03", b"\x04", b"\x05"


def response(stream=1):
    return h2frame(1, END_HEADERS, stream, STATUS_200 + hpack_literal("content-type", "application/grpc"))


def status_trailers(status, stream=1):
    return h2frame(1, END_HEADERS | END_STREAM, stream, hpack_literal("grpc-status", status))


def settings(*entries):
    return h2frame(4, 0, 0, b"".join(struct.pack(">HI", i, v) for i, v in entries))


T = "fuzz_transparent"
write(T, "unary-relayed", b"\x00" + kubelet(SETTINGS + call(RT + "Version", version)) +
      runtime(SETTINGS_ACK + response() + h2frame(0, 0, 1, answer) + status_trailers("0")) +
      kubelet(SETTINGS_ACK))
write(T, "run-pod-sandbox-pass", b"\x00" + kubelet(SETTINGS + call(RT + "RunPodSandbox", run)) +
      runtime(SETTINGS_ACK))
write(T, "run-pod-sandbox-refused", b"\x01" + kubelet(SETTINGS + call(RT + "RunPodSandbox", run, stream=3)))
# gRPC C++ answers a stream it saw cancelled: crihookd's own stream, the
# runtime's reply dropped and its blocks re-encoded for kubelet from then on.
write(T, "runtime-answers-own-stream", b"\x01" +
      kubelet(SETTINGS + call(RT + "StopContainer", stop) + call(RT + "Version", version, stream=3)) +
      runtime(response(1) + h2frame(0, 0, 1, answer) + status_trailers("1", 1)) +
      runtime(response(3) + h2frame(0, 0, 3, answer) + status_trailers("0", 3)))
write(T, "pings", b"\x00" + kubelet(SETTINGS + h2frame(6, 0, 0, b"12345678")) +
      runtime(h2frame(6, 0, 0, b"abcdefgh")) + kubelet(h2frame(6, 0x1, 0, b"abcdefgh")) +
      kubelet(call(RT + "Version", version) + h2frame(6, 0, 0, b"87654321")) + TIMERS +
      runtime(response() + status_trailers("0")))
write(T, "runtime-goaway", b"\x00" + kubelet(SETTINGS + call(RT + "Version", version) +
                                            call(RT + "Version", version, stream=3)) +
      runtime(response() + h2frame(7, 0, 0, struct.pack(">II", 1, 0)) + h2frame(0, 0, 1, answer) +
              status_trailers("0")))
rb = STATUS_200 + hpack_literal("content-type", "application/grpc")
write(T, "continuations", b"\x00" +
      kubelet(SETTINGS + h2frame(1, 0, 1, hb[:10]) + h2frame(9, 0, 1, hb[10:30]) +
              h2frame(9, END_HEADERS, 1, hb[30:]) + h2frame(0, END_STREAM, 1, version)) +
      runtime(h2frame(1, 0, 1, rb[:5]) + h2frame(9, END_HEADERS, 1, rb[5:]) + h2frame(0, 0, 1, answer) +
              status_trailers("0")))
write(T, "settings-change", b"\x00" +
      kubelet(settings((1, 0), (4, 1 << 20), (5, 1 << 15), (0xfe03, 1)) + call(RT + "Version", version)) +
      runtime(settings((1, 128), (5, 1 << 20), (6, 1 << 30), (0xfe03, 1)) + SETTINGS_ACK) +
      runtime(h2frame(1, END_HEADERS, 1, STATUS_200 + hpack_indexed_literal("content-type", "application/grpc")) +
              h2frame(0, 0, 1, answer) + status_trailers("0")))
write(T, "runtime-opens-its-side", b"\x02" + runtime(settings((3, 100), (0x9, 1))) +
      kubelet(SETTINGS + call(RT + "Version", version)) + runtime(response() + status_trailers("0")))
write(T, "runtime-hangs-up", b"\x00" + kubelet(SETTINGS + call(RT + "Version", version)) +
      runtime(response() + h2frame(0, 0, 1, answer[:3])) + RUNTIME_HANGUP +
      kubelet(call(RT + "Version", version, stream=3)))
write(T, "graceful-shutdown", b"\x00" + kubelet(SETTINGS + call(RT + "Version", version)) + SHUTDOWN +
      kubelet(call(RT + "Version", version, stream=3)) + runtime(response() + status_trailers("0")))
# A relayed reply announcing a message over the limit (64 KiB).
write(T, "reply-over-limit", b"\x00" + kubelet(SETTINGS + call(RT + "Version", version)) +
      runtime(response() + h2frame(0, 0, 1, answer + b"\x00\x00\x10\x00\x00xyz")) +
      runtime(h2frame(0, 0, 1, b"more") + status_trailers("0")))
# Tight limits: a request message over the limit (256 bytes); a call whose
# message comes after the tick found it late.
write(T, "tight-limits-late", b"\x04" + kubelet(SETTINGS + call(RT + "Version", grpc(b"x" * 300)) +
                                              h2frame(1, END_HEADERS, 3, headers(RT + "CreateContainer"))) +
      TIMERS + TIMERS + kubelet(h2frame(0, END_STREAM, 3, create)))
write(T, "trailers-from-kubelet", b"\x00" + kubelet(SETTINGS +
      h2frame(1, END_HEADERS, 1, headers(RT + "Version")) + h2frame(0, 0, 1, version) +
      h2frame(1, END_HEADERS | END_STREAM, 1, hpack_literal("x-trailer", "1"))) + KUBELET_HANGUP)
# HPACK across blocks crihookd keeps from a peer: the peer's decoder must stay
# in step with the other peer's encoder (fuzz_transparent's HPACK checks).
# kubelet's blocks index a field (RFC 7541 6.2.1) that a later block of
# kubelet's reads back as index 62; the runtime's, one its later reply reads.
INDEXED = hpack_indexed_literal("x-request-id", "r1")
NEWEST = b"\xbe"  # index 62: the dynamic table's newest entry


def open_call(path, stream=1, extra=b""):
    # A request's headers without END_STREAM: its message is still to come.
    return h2frame(1, END_HEADERS, stream, headers(path) + extra)


def relayed_version(stream, extra=b""):
    return open_call(RT + "Version", stream, extra) + h2frame(0, END_STREAM, stream, version)


# An intercepted call whose block changes the runtime's table: the runtime
# gets it as a ghost (without END_STREAM, then RST_STREAM CANCEL); then a
# relayed call that reads the entry back.
write(T, "hpack-intercepted-indexes", b"\x00" +
      kubelet(SETTINGS + open_call(RT + "StopContainer", 1, INDEXED) + h2frame(0, END_STREAM, 1, stop)) +
      runtime(SETTINGS_ACK) + kubelet(relayed_version(3, NEWEST)) +
      runtime(response(3) + h2frame(0, 0, 3, answer) + status_trailers("0", 3)))
# The same where the runtime's table already holds an entry of that name:
# without the ghost, the later call would read the older value back.
write(T, "hpack-intercepted-indexes-over-older", b"\x00" +
      kubelet(SETTINGS + relayed_version(1, INDEXED)) +
      kubelet(open_call(RT + "StopContainer", 3, hpack_indexed_literal("x-request-id", "r2")) +
              h2frame(0, END_STREAM, 3, stop)) +
      kubelet(relayed_version(5, NEWEST)) +
      runtime(response(1) + status_trailers("0", 1) + response(5) + status_trailers("0", 5)))
# An intercepted call's block all literal: left out, and kubelet's blocks
# still go as they came (the later ones index and read back).
write(T, "hpack-intercepted-literal", b"\x01" +
      kubelet(SETTINGS + call(RT + "StopContainer", stop)) +
      kubelet(relayed_version(3, INDEXED) + relayed_version(5, NEWEST)) +
      runtime(response(3) + status_trailers("0", 3) + response(5) + status_trailers("0", 5)))
# A request refused by its headers (content-type), whose block indexes: not
# for the runtime, which from then on gets kubelet's blocks re-encoded; the
# next call reads the entry back.
write(T, "hpack-refused-indexes", b"\x00" +
      kubelet(SETTINGS + h2frame(1, END_HEADERS | END_STREAM, 1, INDEXED +
                                  hpack_literal(":method", "POST") + hpack_literal(":path", RT + "Version") +
                                  hpack_literal("content-type", "text/plain"))) +
      kubelet(relayed_version(3, NEWEST)) + runtime(response(3) + status_trailers("0", 3)))
# kubelet's trailers (not for the runtime) index; the next call reads back.
write(T, "hpack-trailers-index", b"\x00" +
      kubelet(SETTINGS + open_call(RT + "Version", 1) + h2frame(0, 0, 1, version) +
              h2frame(1, END_HEADERS | END_STREAM, 1, hpack_indexed_literal("x-trailer", "1"))) +
      kubelet(relayed_version(3, NEWEST)) + runtime(response(3) + status_trailers("0", 3)))
# The runtime answers a stream crihookd answers (the ghost of an intercepted
# call, kubelet's message still to come), indexing: its block is kept from
# kubelet, whose blocks are re-encoded from then on; its reply to a relayed
# call reads the entry back.
indexed_response = STATUS_200 + hpack_indexed_literal("content-type", "application/grpc")
write(T, "hpack-runtime-answers-own-indexes", b"\x01" +
      kubelet(SETTINGS + open_call(RT + "StopContainer", 1, INDEXED)) +
      runtime(SETTINGS_ACK + h2frame(1, END_HEADERS, 1, indexed_response) + status_trailers("1", 1)) +
      kubelet(h2frame(0, END_STREAM, 1, stop) + relayed_version(3)) +
      runtime(h2frame(1, END_HEADERS, 3, STATUS_200 + NEWEST) + h2frame(0, 0, 3, answer) +
              h2frame(1, END_HEADERS | END_STREAM, 3, NEWEST + hpack_literal("grpc-status", "0"))))
# The same with the runtime's answer all literal: left out, and the runtime's
# blocks still go as they came (its reply indexes, the next reads back).
write(T, "hpack-runtime-answers-own-literal", b"\x01" +
      kubelet(SETTINGS + open_call(RT + "StopContainer", 1)) +
      runtime(SETTINGS_ACK + response(1) + status_trailers("1", 1)) +
      kubelet(h2frame(0, END_STREAM, 1, stop) + relayed_version(3) + relayed_version(5)) +
      runtime(h2frame(1, END_HEADERS, 3, indexed_response) + status_trailers("0", 3)) +
      runtime(h2frame(1, END_HEADERS, 5, STATUS_200 + NEWEST) + status_trailers("0", 5)))
# Once crashed fuzz_transparent: crihookd's frames written inside a frame or
# a header block of the peer it relays (test/proxy/transparent_test.cc's
# TransparentWireTest).
# kubelet's DATA on a stream that is neither relayed nor crihookd's is
# forwarded as it comes; the runtime's DATA on crihookd's own stream 1, read
# between its two halves, made crihookd credit the runtime inside it.
stray = h2frame(0, 0, 7, b"p" * 100)
write(T, "crash-kubelet-data-split-by-runtime-credit", b"\x01" +
      kubelet(SETTINGS + h2frame(1, END_HEADERS, 1, headers(RT + "RunPodSandbox")) + stray[:19]) +
      runtime(h2frame(0, 0, 1, b"hello")) + kubelet(stray[19:]))
# The runtime's reply headers in two frames read apart; the PING ACK owed
# to kubelet went between them.
write(T, "crash-ping-ack-inside-runtime-header-block", b"\x00" +
      kubelet(SETTINGS + call(RT + "Version", version)) + runtime(h2frame(1, 0, 1, rb[:5])) +
      kubelet(h2frame(6, 0, 0, b"12345678")) + TIMERS +
      runtime(h2frame(9, END_HEADERS, 1, rb[5:]) + status_trailers("0")))
# The runtime gone after half a header block: crihookd's statuses and
# GOAWAY followed it.
write(T, "crash-runtime-gone-inside-header-block", b"\x00" +
      kubelet(SETTINGS + call(RT + "Version", version)) + runtime(h2frame(1, 0, 1, rb[:5])) +
      RUNTIME_HANGUP)
# A HEADERS frame of the runtime's whose padding does not fit, without
# END_HEADERS: forwarded before it was read, then crihookd's GOAWAY after it
# (as the fuzzer found it, minimised).
write(T, "crash-runtime-bad-padding-headers", b"\x00" + runtime(h2frame(1, 0x8, 1568)))

print("seeds written under", ROOT, file=sys.stderr)


# --- fuzz_nri_wire: the runtime's side of the NRI socket --------------------
# NRI's mux frames (connection id, length) carrying ttrpc messages (length,
# stream id, type, flags), then the read-size byte.
def pb_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    out = bytes([(field << 3) | 2])
    n = len(data)
    while n >= 0x80:
        out += bytes([(n & 0x7f) | 0x80])
        n >>= 7
    return out + bytes([n]) + data


def ttrpc_request(service, method, payload, stream, conn=1):
    body = pb_bytes(1, service) + pb_bytes(2, method) + pb_bytes(3, payload)
    msg = struct.pack(">IIBB", len(body), stream, 1, 0) + body
    return struct.pack(">II", conn, len(msg)) + msg


PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
POD = pb_bytes(1, "sandbox-1") + pb_bytes(2, "train-0") + pb_bytes(4, "default")
CONTAINER = (pb_bytes(1, "ctr-1") + pb_bytes(3, "worker") + pb_bytes(8, "PATH=/usr/bin") +
             pb_bytes(9, pb_bytes(1, "/data") + pb_bytes(2, "bind") + pb_bytes(3, "/srv") +
                      pb_bytes(4, "ro")))
write("fuzz_nri_wire", "configure-then-create",
      ttrpc_request(PLUGIN, "Configure", pb_bytes(2, "containerd"), 1) +
      ttrpc_request(PLUGIN, "CreateContainer", pb_bytes(1, POD) + pb_bytes(2, CONTAINER), 3) +
      bytes([7]))
write("fuzz_nri_wire", "state-change-run-pod",
      ttrpc_request(PLUGIN, "StateChange", b"\x08\x01" + pb_bytes(2, POD), 5) + bytes([3]))
write("fuzz_nri_wire", "registration-reply",
      struct.pack(">II", 2, 12) + struct.pack(">IIBB", 2, 1, 2, 0) + b"\x0a\x00" + bytes([1]))
write("fuzz_nri_wire", "connection-zero", struct.pack(">II", 0, 1) + b"x" + bytes([2]))
