#!/usr/bin/env bash
# The newcomer's first command: installs what is missing, builds herd, launches a 2-node cluster
# on the embedded local provider (network namespaces on this machine; needs root), trains the
# minGPT example with DDP across both nodes under torchrun, fetches the checkpoint through the
# generated ssh config, and prints what to do next. The cluster stays up for `herd exec`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "quickstart: the local provider makes network namespaces: run as root (sudo $0)" >&2
  exit 1
fi
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
herd=${HERD_BUILD_DIR:-$root/build}/controller/herd
cluster=${CLUSTER:-mingpt}

cd "$root/examples/mingpt-ddp"
echo "+ herd launch -c $cluster train-multinode-cpu.yaml"
"$herd" launch -c "$cluster" -y train-multinode-cpu.yaml

out=$(mktemp -d /tmp/herd-quickstart-XXXXXX)
echo
echo "+ scp $cluster:sky_workdir/gpt_snapshot.pt $out/"
scp -q -F "$HOME/.ssh/config" "$cluster:sky_workdir/gpt_snapshot.pt" "$out/"
/usr/bin/python3 -c 'import sys, torch; s = torch.load(sys.argv[1]); print("checkpoint:", sys.argv[1], "epochs run:", s["EPOCHS_RUN"])' "$out/gpt_snapshot.pt"

cat <<MSG

Next:
  $herd exec $cluster train-rdzv-cpu.yaml   # the c10d rendezvous variant, same agents
  $herd queue $cluster                      # jobs of the cluster
  $herd logs $cluster 1                     # the training's log again
  ssh $cluster                              # the head node (ssh $cluster-worker1: the worker)
  $herd down $cluster -y                    # tear everything down
MSG
