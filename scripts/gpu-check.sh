#!/usr/bin/env bash
# The GPU check for a machine with an NVIDIA GPU (one short run, e.g. on the device machine):
#   1. herdlet's GPU detection against the real card: NVML (dlopen) and, separately, nvidia-smi;
#   2. a 1-node torchrun with NCCL through herd: `herd launch` of examples/mingpt-ddp/train.yaml
#      (accelerators from the detected card) on the local provider, then `herd down`.
# Prints PASS/FAIL per step and exits non-zero on any failure. Needs root, a built tree
# (scripts/build.sh) and a torch with CUDA on /usr/bin/python3 (Debian's python3-torch has none:
# set PYTHON_WITH_CUDA to an interpreter that has it).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HERD_BUILD_DIR:-$root/build}
herd=$build/controller/herd
herdlet=$build/agent/herdlet
fail=0
step() { echo "== $*"; }
result() { if [ "$1" -eq 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

step "nvidia-smi"
smi=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1); rc=$?
echo "$smi"
result $rc "nvidia-smi lists the GPUs"

step "herdlet --probe-gpus (NVML first)"
probe=$("$herdlet" --probe-gpus); echo "$probe"
echo "$probe" | grep -q '"source":"nvml"'; result $? "NVML detection (source nvml)"
want=$(echo "$smi" | grep -c .)
echo "$probe" | grep -q "\"count\":$want"; result $? "NVML count matches nvidia-smi ($want)"

step "herdlet --probe-gpus without NVML (the nvidia-smi path)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
probe2=$("$herdlet" --probe-gpus --nvml-library "$tmp/no-such-libnvidia-ml.so.1" 2>&1 | tail -1)
echo "$probe2"
echo "$probe2" | grep -q '"source":"nvidia-smi"'; result $? "nvidia-smi detection (source nvidia-smi)"
echo "$probe2" | grep -q "\"count\":$want"; result $? "nvidia-smi count ($want)"

step "1-node torchrun with NCCL through herd"
export HERD_HOME=$tmp/herd
gpu=$(echo "$smi" | head -1 | awk '{print $NF}')
cd "$root/examples/mingpt-ddp"
out=$("$herd" launch -c gpucheck -y --gpus "$gpu:$want" train.yaml 2>&1); rc=$?
echo "$out" | tail -20
echo "$out" | grep -q "backend=nccl"; result $? "the training used NCCL"
result $rc "herd launch train.yaml exited 0"
"$herd" down gpucheck -y >/dev/null 2>&1
exit $fail
