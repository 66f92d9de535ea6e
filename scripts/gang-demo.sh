#!/usr/bin/env bash
# A head and a worker on loopback addresses (127.0.0.2, 127.0.0.3) with a fresh cluster CA, and a
# 2-node job through the direct client path: every line comes back prefixed with its rank.
# Everything it starts is stopped, and its temp dir removed, on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HERD_BUILD_DIR:-$root/build}
[ -x "$build/controller/herd" ] || "$root/scripts/build.sh"
herd=$build/controller/herd
herdlet=$build/agent/herdlet

dir=$(mktemp -d /tmp/herd-gang-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

"$herd" certs init "$dir/certs" --cluster demo >/dev/null
addrs=(127.0.0.2 127.0.0.3)
for i in 0 1; do
  node=$([ $i -eq 0 ] && echo demo-head || echo demo-worker$i)
  "$herd" certs issue "$dir/certs" --node "$node" --ip "${addrs[$i]}" --out "$dir/$node/certs" >/dev/null
  {
    echo "role: $([ $i -eq 0 ] && echo head || echo worker)"
    echo "cluster: demo"
    echo "node_id: $node"
    echo "address: ${addrs[$i]}"
    echo "certs: $dir/$node/certs"
    echo "state_dir: $dir/$node/state"
    if [ $i -eq 0 ]; then
      echo "listen: ${addrs[0]}:0"
      echo "port_file: $dir/port"
    else
      echo "head: ${addrs[0]}:$(cat "$dir/port")"
    fi
  } >"$dir/$node.yaml"
  "$herdlet" --config "$dir/$node.yaml" --log-level warn 2>>"$dir/$node.log" &
  pids+=($!)
  if [ $i -eq 0 ]; then
    for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
  fi
done
target=(--endpoint "${addrs[0]}:$(cat "$dir/port")" --certs "$dir/certs")
for _ in $(seq 100); do
  [ "$("$herd" nodes "${target[@]}" -o json 2>/dev/null | grep -o '"alive":true' | wc -l)" -eq 2 ] && break
  sleep 0.1
done
"$herd" nodes "${target[@]}"
echo

cat >"$dir/task.yaml" <<'YAML'
name: gang-demo
num_nodes: 2
setup: |
  echo "setup on $(hostname), node $SKYPILOT_SETUP_NODE_RANK of $SKYPILOT_NUM_NODES"
run: |
  MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
  echo "rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES, master $MASTER_ADDR"
  for step in 1 2 3; do echo "step $step"; sleep 0.2; done
YAML
"$herd" exec "${target[@]}" "$dir/task.yaml"
echo
"$herd" queue "${target[@]}"
