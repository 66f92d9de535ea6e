#!/usr/bin/env python3
"""A warm `herd exec -- true` with and without a container, interleaved, on one cluster
(issue 24: within 1.5x).

  bench/container_bench.py --herd HERD [--nodes 2] [--reps 20]

Builds the test image of tests/integration/container_test.py (this machine's Debian files, no
pull), launches one N-node local cluster, starts the nodes' container once (warm-up), then
alternates `herd exec C --num-nodes N -- true` (A: on the host) and the same with
`--image-id docker:localhost/herd-bench:1` (B: in the node's kept container), order swapped every
rep; prints both medians and the ratio B/A. Needs root, podman and runc. The cluster and the image
are removed at the end, also on failure or Ctrl-C.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from ab import interleaved_execs  # noqa: E402
from container_test import BASE_PACKAGES, PODMAN, build_image  # noqa: E402
from suite import BenchError, Env, load, log  # noqa: E402

IMAGE = "localhost/herd-bench:1"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--herd", required=True, help="the herd binary")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--prefix", default="hcb")
    args = ap.parse_args()
    args.trace = False
    if os.geteuid() != 0:
        ap.error("needs root (the local provider makes network namespaces)")
    herd = os.path.abspath(args.herd)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    env = Env(herd, tempfile.mkdtemp(prefix="herd-cbench-"))
    log(f"load at start {load():.2f}")
    code = 1
    try:
        build_image(IMAGE, BASE_PACKAGES, env.workdir)
        name = f"{args.prefix}x"
        env.launch(name, args.nodes)
        tail = ["--num-nodes", str(args.nodes), "--", "true"]
        commands = {"A": [herd, "exec", name, *tail],
                    "B": [herd, "exec", name, "--image-id", f"docker:{IMAGE}", *tail]}
        res = interleaved_execs(args, env, commands,
                                {"A": "on the host", "B": "in the kept container"})
        ratio = statistics.median(res["B"]) / statistics.median(res["A"])
        print(f"ratio B/A (median): {ratio:.2f}x (target <= 1.5x)")
        code = 0
    except (BenchError, KeyboardInterrupt, subprocess.CalledProcessError) as e:
        log(f"failed: {e}; commands in {env.log_path}")
    finally:
        env.down_all()
        subprocess.run([*PODMAN, "rmi", "-f", IMAGE], capture_output=True)
        log(f"load at end {load():.2f}")
        if code == 0:
            shutil.rmtree(env.workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
