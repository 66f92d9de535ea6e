"""MOUNT_CACHED checkpoint write (issue 24, Speed): a job on a 1-node local cluster writes SIZE MB
to a MOUNT_CACHED bucket and to the node's local disk (each `dd ... conv=fsync`, timed inside the
job), against s3rver on the cluster's bridge address; prints both rates, their ratio and the whole
job's time (which includes the flush: the upload is finished when the job ends). Not a test:
nothing is asserted. Needs root, rclone, fuse3 and s3rver (scripts/install-deps.sh).

    HERD=build/controller/herd HERDLET=build/agent/herdlet /usr/bin/python3 bench/storage_bench.py
"""

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from storage_test import StorageTest  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="megabytes written per target")
    args = ap.parse_args()
    StorageTest.setUpClass()  # the suite's cluster, s3rver and environment
    try:
        t = StorageTest("test_a_mount_cached_checkpoint_is_in_the_bucket_when_the_job_is_done")
        task = t.write("bench.yaml", f"""name: bench
file_mounts:
  ~/ckpt:
    name: herd-bench-ckpt
    mode: MOUNT_CACHED
    persistent: false
run: |
  mkdir -p ~/local
  for d in local ckpt; do
    s=$(date +%s%N)
    dd if=/dev/zero of=~/$d/blob bs=1M count={args.mb} conv=fsync status=none
    e=$(date +%s%N)
    echo "$d $(( (e - s) / 1000000 ))"
  done
""")
        t0 = time.time()
        p = t.h.herd("launch", "-c", "stor", "-y", task, timeout=1800)
        job = time.time() - t0
        out = p.stdout.decode()
        secs = {k: int(v) / 1000 for k, v in re.findall(r"\b(local|ckpt) ([0-9]+)$", out, re.M)}
        objects = t.objects("herd-bench-ckpt")
        print(f"write {args.mb} MB: local disk {args.mb / secs['local']:.0f} MB/s, "
              f"MOUNT_CACHED {args.mb / secs['ckpt']:.0f} MB/s, ratio "
              f"{secs['local'] / secs['ckpt']:.2f}; launch to job end (with the flush) "
              f"{job:.1f} s; in the bucket at the end: {objects}")
    finally:
        StorageTest.tearDownClass()


if __name__ == "__main__":
    main()
