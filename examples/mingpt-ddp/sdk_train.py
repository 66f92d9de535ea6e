#!/usr/bin/python3
"""minGPT DDP on 2 CPU nodes through herd's Python SDK: the SkyPilot quickstart's SDK script
(examples/distributed-pytorch/sdk_scripts/train.py) for herd, with the task of
train-multinode-cpu.yaml. Launches, follows the log, copies the snapshot back, tears down.

    /usr/bin/python3 sdk_train.py [--cluster mingpt-sdk] [--num-nodes 2] [--keep]
                                  [--fail-rank R] [--infra local]

Exits with tail_logs' code (0 succeeded, 100 failed, ...), or 1 when herd itself failed or the
snapshot could not be copied. Uses $HERD as the CLI (default `herd` on PATH).
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import herd
except ImportError:  # run from a checkout: the SDK is in python/
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import herd

# The setup and run of train-multinode-cpu.yaml, one command per item.
SETUP = [
    "bash install_torchrun_shim.sh",
    "/usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available(); "
    "import torch; print(\"torch\", torch.__version__)'",
]
RUN = [
    "export PATH=$HOME/.local/bin:$PATH",
    "export LOGLEVEL=INFO",
    'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
    'echo "Starting distributed training, head node: $MASTER_ADDR"',
    "torchrun \\",
    "  --nnodes=$SKYPILOT_NUM_NODES \\",
    "  --nproc_per_node=$NPROC_PER_NODE \\",
    "  --master_addr=$MASTER_ADDR \\",
    "  --master_port=8008 \\",
    "  --node_rank=${SKYPILOT_NODE_RANK} \\",
    "  main.py --max_epochs=$MAX_EPOCHS --max_iters=$MAX_ITERS --snapshot_path=$SNAPSHOT_PATH",
]
SNAPSHOT = "gpt_snapshot.pt"  # written by global rank 0, in ~/sky_workdir on the head


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="mingpt-sdk", help="cluster name (default: %(default)s)")
    p.add_argument("--num-nodes", type=int, default=2, help="nodes (default: %(default)s)")
    p.add_argument("--nproc-per-node", type=int, default=2,
                   help="training processes per node (default: %(default)s)")
    p.add_argument("--max-epochs", type=int, default=4)
    p.add_argument("--max-iters", type=int, default=25, help="iterations per epoch")
    p.add_argument("--fail-rank", type=int, default=None,
                   help="make this global rank raise after its first iteration")
    p.add_argument("--infra", default=None, help="where to launch (e.g. local)")
    p.add_argument("--snapshot-out", default=SNAPSHOT,
                   help="where to copy the snapshot to (default: ./%(default)s)")
    p.add_argument("--keep", action="store_true", help="leave the cluster up at the end")
    return p.parse_args(argv)


def make_task(args):
    envs = {
        "NPROC_PER_NODE": args.nproc_per_node,
        "MAX_EPOCHS": args.max_epochs,
        "MAX_ITERS": args.max_iters,
        "SNAPSHOT_PATH": SNAPSHOT,
    }
    if args.fail_rank is not None:
        envs["MINGPT_FAIL_RANK"] = args.fail_rank
    return herd.Task(
        name="minGPT-ddp-sdk",
        resources=herd.Resources(cpus="2+", infra=args.infra),
        num_nodes=args.num_nodes,
        envs=envs,
        workdir=HERE,
        setup=SETUP,
        run=RUN,
    )


def copy_snapshot(cluster, dest):
    """scp through the ssh config herd generated for the cluster (`ssh CLUSTER` is its head)."""
    # -F: the config herd wrote the Include into ($HOME's; ssh alone reads the passwd home's).
    config = os.path.expanduser("~/.ssh/config")
    cmd = ["scp", "-q", "-F", config, "-o", "BatchMode=yes",
           f"{cluster}:sky_workdir/{SNAPSHOT}", dest]
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode == 0


def train(args):
    """Launch, follow, fetch: returns the exit code of the script."""
    request = herd.launch(task=make_task(args), cluster_name=args.cluster)
    job_id, handle = herd.stream_and_get(request)
    print(f"Job {job_id} submitted to {handle.cluster_name} (head {handle.head_ip})", flush=True)
    code = herd.tail_logs(args.cluster, job_id, follow=True)
    print(f"Job {job_id} exit code: {code}", flush=True)
    if code != herd.JOB_SUCCEEDED:
        return code
    if not copy_snapshot(args.cluster, args.snapshot_out):
        print(f"error: could not copy {SNAPSHOT} from {args.cluster}", file=sys.stderr)
        return 1
    print(f"Snapshot saved to {args.snapshot_out}", flush=True)
    return code


def main(argv):
    args = parse_args(argv)
    code = 1
    try:
        code = train(args)
    except herd.HerdError as e:
        print(f"error: {e}", file=sys.stderr)
    finally:
        # Also after a failed launch: a half-made cluster must not be left behind.
        if not args.keep:
            print(f"Tearing down {args.cluster}", flush=True)
            try:
                herd.down(args.cluster)
            except herd.HerdError as e:
                print(f"error: {e}", file=sys.stderr)
                code = code or 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
