#!/usr/bin/env bash
# Builds fixture trees of machines crihook must understand, each a directory
# holding sys/ (and proc/ where a driver exposes something there), as the
# kernel lays them out: real directories under sys/devices, relative symlinks
# under sys/bus and sys/class, SR-IOV physfn/virtfn links.
#
#   make-fixtures.sh OUTDIR
#     OUTDIR/dgx          2 sockets, 8 NVIDIA GPUs on 4 PCIe switches, 5
#                         Mellanox NICs (one with 2 SR-IOV VFs, mlx5_4's port
#                         down), 2 NUMA nodes; the BMC's VGA controller (ASPEED,
#                         behind its own bridge: not a GPU); GPU 7's numa_node
#                         is -1 (so is its downstream port's), its switch says 1
#     OUTDIR/workstation  1 socket, 4 NVIDIA GPUs straight on root ports, no RDMA
#     OUTDIR/intel-rdma   an Intel E810 RoCE NIC (irdma, not mlx5_N), a Mellanox
#                         mlx5_1, and an AMD GPU whose numa_node is -1 as is its
#                         bridge's, 2 NUMA nodes
#     OUTDIR/snc          sub-NUMA clustering: 2 sockets x 2 NUMA nodes each
#                         (node 1 is socket 0's second, node 2 socket 1's first),
#                         2 GPUs and 2 Mellanox NICs each on a node of its own:
#                         GPU 0 on node 1, mlx5_0 on node 0 (socket 0), GPU 1
#                         on node 2, mlx5_1 on node 3 (socket 1); no device's
#                         node number is its socket's
set -euo pipefail
out=${1:?usage: make-fixtures.sh OUTDIR}
rm -rf "$out"
mkdir -p "$out"

# No program where the shell can do it (dirname, basename, realpath, a
# command substitution's fork): each costs milliseconds on a loaded machine,
# and these trees take ~1,800 of them otherwise.
# mkd DIR: mkdir -p, run only when DIR is missing.
mkd() { [[ -d $1 ]] || mkdir -p "$1"; }
# rel TARGET LINK: TARGET relative to LINK's directory, in REPLY (both under
# one fixture root, with no symlink between them: realpath -m's answer).
rel() {
  local to=$1 from=${2%/*} up=""
  while [[ $to != "$from" && $to != "$from"/* ]]; do
    from=${from%/*} up+="../"
  done
  REPLY=${to#"$from"}
  REPLY=$up${REPLY#/}
  REPLY=${REPLY%/}
  REPLY=${REPLY:-.}
}
link() { mkd "${2%/*}"; rel "$1" "$2"; ln -sfn "$REPLY" "$2"; }

# cpus ROOT SOCKETS CORES_PER_SOCKET THREADS [NODES_PER_SOCKET]: CPU n is
# core (n % total cores), thread n / total cores (Linux's usual numbering);
# a socket's cores are split evenly among its NUMA nodes (1 by default: node =
# socket; more is sub-NUMA clustering, node = socket * NODES_PER_SOCKET + the
# core's part). Distances: 10 to itself, 12 within the socket, 21 across.
cpus() {
  local root=$1 sockets=$2 cores=$3 threads=$4 per=${5:-1}
  local total=$(($2 * $3)) n=$(($2 * $3 * $4)) c s core t node
  local nodes=$((sockets * per)) span=$((cores / per))
  local sys=$1/sys/devices/system
  mkd "$sys/cpu"; mkd "$sys/node"
  echo "0-$((n - 1))" >"$sys/cpu/online"
  echo "0-$((nodes - 1))" >"$sys/node/online"
  for ((c = 0; c < n; c++)); do
    core=$((c % total)); t=$((c / total)); s=$((core / cores)); node=$((core / span))
    mkd "$sys/cpu/cpu$c/topology"
    echo "$s" >"$sys/cpu/cpu$c/topology/physical_package_id"
    echo "$((core % cores))" >"$sys/cpu/cpu$c/topology/core_id"
    local sib=""
    for ((t2 = 0; t2 < threads; t2++)); do sib+="${sib:+,}$((core + t2 * total))"; done
    echo "$sib" >"$sys/cpu/cpu$c/topology/thread_siblings_list"
    link "$sys/node/node$node" "$sys/cpu/cpu$c/node$node"
  done
  for ((node = 0; node < nodes; node++)); do
    local list=""
    for ((t = 0; t < threads; t++)); do
      list+="${list:+,}$((node * span + t * total))-$((node * span + t * total + span - 1))"
    done
    mkd "$sys/node/node$node"
    echo "$list" >"$sys/node/node$node/cpulist"
    printf 'Node %d MemTotal:       %d kB\nNode %d MemFree:        1024 kB\n' "$node" $((256 * 1024 * 1024 / per)) "$node" \
      >"$sys/node/node$node/meminfo"
    local d=""
    for ((o = 0; o < nodes; o++)); do
      if ((o == node)); then d+="${d:+ }10"; elif ((o / per == node / per)); then d+="${d:+ }12"; else d+="${d:+ }21"; fi
    done
    echo "$d" >"$sys/node/node$node/distance"
  done
}

# pci ROOT PATH VENDOR DEVICE CLASS NUMA [DRIVER]: PATH is the device's path
# under sys/devices (pci0000:17/0000:17:00.0/...), its last part the address.
pci() {
  local root=$1 path=$2 vendor=$3 device=$4 class=$5 numa=$6 driver=${7:-}
  local d=$1/sys/devices/$2 addr
  addr=${path##*/}
  mkd "$d"
  echo "$vendor" >"$d/vendor"
  echo "$device" >"$d/device"
  echo "$class" >"$d/class"
  echo "$numa" >"$d/numa_node"
  link "$d" "$root/sys/bus/pci/devices/$addr"
  if [[ -n "$driver" ]]; then
    mkd "$root/sys/bus/pci/drivers/$driver"
    link "$root/sys/bus/pci/drivers/$driver" "$d/driver"
  fi
}

bridge() { pci "$1" "$2" 0x10b5 0xc010 0x060400 "$3" pcieport; }  # a PLX/Broadcom switch port

nvidia_gpu() {  # ROOT PATH NUMA MINOR UUID
  local root=$1 path=$2 addr
  addr=${path##*/}
  pci "$root" "$path" 0x10de 0x20b0 0x030200 "$3" nvidia
  mkd "$root/proc/driver/nvidia/gpus/$addr"
  printf 'Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 180\nGPU UUID: \t %s\nVideo BIOS: \t 92.00.36.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDevice Minor: \t %d\nBlacklisted:\t No\n' \
    "$5" "$4" >"$root/proc/driver/nvidia/gpus/$addr/information"
}

# ibdev ROOT PCI-PATH NAME UVERBS-N NETDEV LINK-LAYER
ibdev() {
  local root=$1
  local d=$root/sys/devices/$2 name=$3 n=$4
  mkd "$d/infiniband/$name/ports/1"; mkd "$d/infiniband_verbs/uverbs$n"; mkd "$d/net/$5"
  echo "4: ACTIVE" >"$d/infiniband/$name/ports/1/state"
  echo "$6" >"$d/infiniband/$name/ports/1/link_layer"
  link "$d" "$d/infiniband/$name/device"
  link "$d/infiniband/$name" "$root/sys/class/infiniband/$name"
  echo "$name" >"$d/infiniband_verbs/uverbs$n/ibdev"
  echo "231:$((192 + n))" >"$d/infiniband_verbs/uverbs$n/dev"
  link "$d/infiniband_verbs/uverbs$n" "$root/sys/class/infiniband_verbs/uverbs$n"
  link "$d/net/$5" "$root/sys/class/net/$5"
}

mlx_nic() {  # ROOT PATH NUMA NAME UVERBS NETDEV
  pci "$1" "$2" 0x15b3 0x101b 0x020700 "$3" mlx5_core
  ibdev "$1" "$2" "$4" "$5" "$6" InfiniBand
}

sriov() {  # ROOT PF-PATH VF-ADDR...: VFs beside their PF
  local root=$1 pf=$2 i=0
  shift 2
  echo "$#" >"$root/sys/devices/$pf/sriov_numvfs"
  for vf in "$@"; do
    local vpath=${pf%/*}/$vf numa
    read -r numa <"$root/sys/devices/$pf/numa_node"
    pci "$root" "$vpath" 0x15b3 0x101c 0x020700 "$numa" mlx5_core
    link "$root/sys/devices/$vpath" "$root/sys/devices/$pf/virtfn$i"
    link "$root/sys/devices/$pf" "$root/sys/devices/$vpath/physfn"
    i=$((i + 1))
  done
}

# --- (1) dgx: 2 sockets x 16 cores x 2 threads; 4 switches ------------------
r=$out/dgx
cpus "$r" 2 16 2
mkd "$r/proc/driver/nvidia"
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023" \
  >"$r/proc/driver/nvidia/version"
gpu=0 uv=0 ib=0
# switch ROOTBUS NUMA NICS: root complex pciDDDD:RB, root port RB:00.0,
# switch upstream port RB+1:00.0, downstream ports RB+2:0N.0, endpoints RB+3+N.
switch() {
  local rb=$1 numa=$2 nics=$3
  local rc=pci0000:$rb rp=0000:$rb:00.0 up dp ep uuid
  printf -v up '0000:%02x:00.0' $((0x$rb + 1))
  bridge "$r" "$rc/$rp" "$numa"
  bridge "$r" "$rc/$rp/$up" "$numa"
  local port=0
  for _ in 1 2; do
    printf -v dp '0000:%02x:0%d.0' $((0x$rb + 2)) "$port"
    printf -v ep '0000:%02x:00.0' $((0x$rb + 3 + port))
    printf -v uuid 'GPU-%08d-aaaa-bbbb-cccc-dddddddddddd' "$gpu"
    bridge "$r" "$rc/$rp/$up/$dp" "$numa"
    nvidia_gpu "$r" "$rc/$rp/$up/$dp/$ep" "$numa" "$gpu" "$uuid"
    gpu=$((gpu + 1)) port=$((port + 1))
  done
  for ((k = 0; k < nics; k++)); do
    printf -v dp '0000:%02x:0%d.0' $((0x$rb + 2)) "$port"
    printf -v ep '0000:%02x:00.0' $((0x$rb + 3 + port))
    bridge "$r" "$rc/$rp/$up/$dp" "$numa"
    mlx_nic "$r" "$rc/$rp/$up/$dp/$ep" "$numa" "mlx5_$ib" "$uv" "ibp$((0x$rb + 3 + port))s0"
    NIC_PATH=$rc/$rp/$up/$dp/$ep
    ib=$((ib + 1)) uv=$((uv + 1)) port=$((port + 1))
  done
}
switch 17 0 1
first_nic=$NIC_PATH
switch 37 0 1
switch 97 1 2
switch b7 1 1
# mlx5_0 has two VFs, each its own RDMA device.
sriov "$r" "$first_nic" 0000:1c:00.2 0000:1c:00.3
vfdir=${first_nic%/*}
ibdev "$r" "$vfdir/0000:1c:00.2" "mlx5_$ib" "$uv" ibp28s0v0 InfiniBand
ib=$((ib + 1)) uv=$((uv + 1))
ibdev "$r" "$vfdir/0000:1c:00.3" "mlx5_$ib" "$uv" ibp28s0v1 InfiniBand
# mlx5_4 (on switch b7) has lost its link.
echo "1: DOWN" >"$r/sys/devices/pci0000:b7/0000:b7:00.0/0000:b8:00.0/0000:b9:02.0/0000:bc:00.0/infiniband/mlx5_4/ports/1/state"
# GPU 7 and its downstream port do not say their NUMA node (a BIOS that
# leaves _PXM out); the switch above does.
gpu7=pci0000:b7/0000:b7:00.0/0000:b8:00.0/0000:b9:01.0
echo -1 >"$r/sys/devices/$gpu7/numa_node"
echo -1 >"$r/sys/devices/$gpu7/0000:bb:00.0/numa_node"
# The BMC's VGA controller, as on most servers: an ASPEED AST2x00 behind the
# ASPEED PCIe-to-PCI bridge on a chipset root port. A display controller, not
# a GPU: no minor, no NVIDIA driver.
pci "$r" pci0000:00/0000:00:1c.0 0x8086 0xa190 0x060400 0 pcieport
pci "$r" pci0000:00/0000:00:1c.0/0000:02:00.0 0x1a03 0x1150 0x060400 0
pci "$r" pci0000:00/0000:00:1c.0/0000:02:00.0/0000:03:00.0 0x1a03 0x2000 0x030000 0 ast

# --- (2) workstation: 1 socket x 8 cores x 2 threads; GPUs on root ports -----
r=$out/workstation
cpus "$r" 1 8 2
mkd "$r/proc/driver/nvidia"
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024" \
  >"$r/proc/driver/nvidia/version"
for i in 0 1 2 3; do
  rp=0000:00:0$((i + 1)).0
  bridge "$r" "pci0000:00/$rp" 0
  nvidia_gpu "$r" "pci0000:00/$rp/0000:0$((i + 1)):00.0" 0 "$i" "GPU-ws00000$i-1111-2222-3333-444444444444"
done
pci "$r" pci0000:00/0000:00:1f.6 0x8086 0x15b8 0x020000 0 e1000e  # a plain Ethernet NIC, no RDMA

# --- (3) intel-rdma: 2 sockets x 4 cores x 1 thread; irdma NIC, AMD GPU -------
r=$out/intel-rdma
cpus "$r" 2 4 1
bridge "$r" pci0000:16/0000:16:02.0 0
pci "$r" pci0000:16/0000:16:02.0/0000:18:00.0 0x8086 0x1593 0x020000 0 ice
ibdev "$r" pci0000:16/0000:16:02.0/0000:18:00.0 rocep24s0 0 ens2f0 Ethernet
bridge "$r" pci0000:80/0000:80:01.0 -1
pci "$r" pci0000:80/0000:80:01.0/0000:83:00.0 0x1002 0x740f 0x030200 -1 amdgpu
# A ConnectX-6 named mlx5_1 (mlx5_0 gone: renamed or removed) on socket 1.
bridge "$r" pci0000:c0/0000:c0:01.0 1
mlx_nic "$r" pci0000:c0/0000:c0:01.0/0000:c1:00.0 1 mlx5_1 1 ibp193s0

# --- (4) snc: 2 sockets x 8 cores x 2 threads, 2 NUMA nodes per socket --------
# Node 0: CPUs 0-3,16-19; node 1: 4-7,20-23 (socket 0); node 2: 8-11,24-27;
# node 3: 12-15,28-31 (socket 1). Each GPU and NIC on a root port of its own.
r=$out/snc
cpus "$r" 2 8 2 2
mkd "$r/proc/driver/nvidia"
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024" \
  >"$r/proc/driver/nvidia/version"
bridge "$r" pci0000:17/0000:17:01.0 1
nvidia_gpu "$r" pci0000:17/0000:17:01.0/0000:18:00.0 1 0 GPU-5c000000-1111-2222-3333-444444444444
bridge "$r" pci0000:30/0000:30:01.0 0
mlx_nic "$r" pci0000:30/0000:30:01.0/0000:31:00.0 0 mlx5_0 0 ibp49s0
bridge "$r" pci0000:97/0000:97:01.0 2
nvidia_gpu "$r" pci0000:97/0000:97:01.0/0000:98:00.0 2 1 GPU-5c000001-1111-2222-3333-444444444444
bridge "$r" pci0000:b0/0000:b0:01.0 3
mlx_nic "$r" pci0000:b0/0000:b0:01.0/0000:b1:00.0 3 mlx5_1 1 ibp177s0
