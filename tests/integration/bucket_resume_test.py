"""The seed's resume through a bucket (issue 24 item 3), as a user runs it: the minGPT DDP task
(examples/mingpt-ddp, real torchrun, 2 nodes x 2 processes) as a managed job with /checkpoints a
MOUNT_CACHED bucket and --snapshot_path /checkpoints/gpt_snapshot.pt. Once a snapshot is in the
bucket, every process of the worker node's namespace is killed; attempt 2, on a new cluster with a
subnet of its own, loads the snapshot from the bucket instead of starting at epoch 0, and the
snapshot of the last epoch is in the bucket after every cluster is gone. A persistent: false bucket
of the same job outlives attempt 1's cluster (attempt 2 sees what attempt 1 wrote there) and is
deleted when the job ends.

The store is a real S3-compatible server (s3rver, SigV4 checked) on 10.213.0.232, an address this
test puts on a veth pair of its own in this machine's namespace; herd's config.yaml has
`local: {host_routes: [10.213.0.232]}`, so the nodes of every local cluster the job makes route it
through their host end (local/provider: LocalConfig)."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (HerdEnvTestCase, kill_managed_controllers, namespaces_of,  # noqa: E402
                      netns_available, pids_with_marker, wait_for)
from s3_server import S3Server, have_tools  # noqa: E402

EXAMPLE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                       "mingpt-ddp"))
NAME = "hbr-gpt"  # the managed job; its clusters are hbr-gpt-<id>-<attempt>
S3_ADDR = "10.213.0.232"  # in 10.213.0.0/24, which no local cluster gets
LINK, PEER = "hbr232a", "hbr232b"  # the veth pair that holds S3_ADDR
CKPT, SCRATCH = "herd-br-ckpt", "herd-br-scratch"
SNAPSHOT = "/checkpoints/gpt_snapshot.pt"
# Short but real: a snapshot after every epoch; enough epochs that the run is still training when
# the first snapshot has reached the bucket and the worker is killed.
EPOCHS, ITERS = 8, 8


def has_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          capture_output=True).returncode == 0


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@unittest.skipUnless(netns_available() and have_tools() and has_torch(),
                     "needs root, ip netns, python3-torch, rclone, /dev/fuse and s3rver "
                     "(scripts/install-deps.sh)")
class BucketResumeTest(HerdEnvTestCase):
    ENV_PREFIX = "bktres"

    @classmethod
    def prepare_env(cls):
        cls.s3 = None
        # The mount points are made on this machine's filesystem (the nodes share it; each mount
        # lives in its node's mount namespace): the ones this test made go again at the end.
        cls.made_dirs = [d for d in ("/checkpoints", "/scratch") if not os.path.exists(d)]
        ip("link", "del", LINK, check=False)  # left by a killed run of this test
        ip("link", "add", LINK, "type", "veth", "peer", "name", PEER)
        ip("addr", "add", f"{S3_ADDR}/32", "dev", LINK)
        ip("link", "set", LINK, "up")
        ip("link", "set", PEER, "up")
        cls.s3 = S3Server(os.path.join(cls.h.dir, "s3rver-data"))
        cls.s3.start(S3_ADDR)
        cls.s3.use_in(cls.h.env)
        herd_home = cls.h.env["HERD_HOME"]
        os.makedirs(herd_home, exist_ok=True)
        with open(os.path.join(herd_home, "config.yaml"), "w") as f:
            # The whole cluster relaunched on another subnet (a lost worker replaced alone on the
            # same cluster is one_node_recovery_test's).
            f.write(f"local:\n  host_routes: [{S3_ADDR}]\njobs:\n  node_recovery: cluster\n")

    @classmethod
    def close_env(cls):
        try:
            # Controllers first (they would relaunch what `down` removes), then every cluster
            # while the store still answers (down flushes and unmounts), then the store.
            kill_managed_controllers(cls.h)
            for name in list(cls.h.clusters()):
                cls.h.herd("down", name, "-y", check=False)
        finally:
            try:
                if cls.s3 is not None:
                    cls.s3.stop()
                ip("link", "del", LINK, check=False)
                for d in cls.made_dirs:
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
            finally:
                super().close_env()

    @classmethod
    def check_nothing_left(cls):
        left = [n for n in ip("netns", "list").stdout.split() if n.startswith(f"herd-{NAME}")]
        assert left == [], left
        assert pids_with_marker(cls.h.dir) == [], "processes of the suite left (rclone, s3rver)"
        assert ip("link", "show", LINK, check=False).returncode != 0, f"{LINK} left"

    def write(self, name, text):
        path = os.path.join(self.h.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def job(self, job_id):
        jobs = json.loads(self.h.herd("jobs", "queue", "-o", "json").stdout)
        return next(j for j in jobs if j["id"] == job_id)

    def until(self, job_id, what, cond, timeout):
        got = wait_for(lambda: cond(self.job(job_id)), timeout)
        self.assertTrue(got, f"job {job_id}: no {what} within {timeout} s: {self.job(job_id)}\n"
                             f"controller log:\n{self.h.controller_log(job_id)}")

    def storage_ls(self):
        return {b["name"]: b for b in json.loads(self.h.herd("storage", "ls", "-o",
                                                             "json").stdout)}

    def test_a_node_lost_run_resumes_from_the_snapshot_in_the_bucket(self):
        task = self.write("gpt.yaml", f"""
name: {NAME}
num_nodes: 2
resources:
  job_recovery:
    strategy: FAILOVER
    max_restarts_on_errors: 0
workdir: {EXAMPLE}
file_mounts:
  /checkpoints:
    name: {CKPT}
    mode: MOUNT_CACHED
  /scratch:
    name: {SCRATCH}
    mode: MOUNT
    persistent: false
setup: |
  bash install_torchrun_shim.sh
run: |
  export PATH=$HOME/.local/bin:$PATH
  if [ "$SKYPILOT_NODE_RANK" = 0 ]; then
    touch /scratch/from-attempt-$HERD_ATTEMPT
    echo "scratch: $(ls /scratch | tr '\\n' ' ')"
  fi
  MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
  torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=2 --master_addr=$MASTER_ADDR \\
    --master_port=8008 --node_rank=$SKYPILOT_NODE_RANK \\
    main.py --max_epochs={EPOCHS} --max_iters={ITERS} --save_every=1 --snapshot_path={SNAPSHOT}
""")
        t0 = time.time()
        p = self.h.herd("jobs", "launch", "-d", "-y", task)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        self.until(job_id, "RUNNING", lambda j: j["status"] == "RUNNING", 180)
        first = self.job(job_id)["cluster"]
        self.assertEqual(first, f"{NAME}-{job_id}-1")

        # A snapshot is in the bucket (saved on the head, uploaded by its write-back cache).
        in_bucket = wait_for(lambda: "gpt_snapshot.pt" in (self.s3.objects(CKPT) or []), 180)
        self.assertTrue(in_bucket, f"no snapshot in the bucket: {self.s3.objects(CKPT)}\n"
                                   f"{self.h.controller_log(job_id)}")
        self.assertEqual(self.job(job_id)["status"], "RUNNING", "trained to the end too soon")

        # The worker node dies: SIGKILL to everything in its namespace.
        worker_ns = f"herd-{first}-1"
        self.assertIn(worker_ns, namespaces_of(first))
        killed_at = time.time()
        for pid in ip("netns", "pids", worker_ns).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

        self.until(job_id, "RECOVERING", lambda j: j["status"] == "RECOVERING", 90)
        recovering_at = time.time()
        self.until(job_id, "attempt 2 RUNNING",
                   lambda j: j["status"] == "RUNNING" and j["recoveries"] == 1, 240)
        running_again_at = time.time()
        self.until(job_id, "the end", lambda j: j["status"] not in ("RUNNING", "RECOVERING"), 300)
        j = self.job(job_id)
        self.assertEqual(j["status"], "SUCCEEDED", self.h.controller_log(job_id))
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"])
        self.assertEqual(j["attempts"][1]["cluster"], f"{NAME}-{job_id}-2")
        ended_at = time.time()

        logs = self.h.herd("jobs", "logs", str(job_id), check=False)
        out = logs.stdout.decode()
        self.assertEqual(logs.returncode, 0, out[-3000:])
        header2 = f"=== herd jobs: job {job_id}, attempt 2 on cluster {NAME}-{job_id}-2 ==="
        self.assertIn(header2, out)
        attempt1, attempt2 = out.split(header2)
        # Attempt 1 started afresh and saved into the bucket.
        self.assertRegex(attempt1, r"Epoch 0 \| Batchsize")
        self.assertIn(f"Training snapshot saved at {SNAPSHOT}", attempt1)
        # Attempt 2, on nodes that never saw attempt 1's disk, started from the bucket's snapshot.
        resumed = re.search(r"Resuming training from snapshot at Epoch (\d+)", attempt2)
        self.assertIsNotNone(resumed, attempt2[-3000:])
        epoch = int(resumed.group(1))
        self.assertGreaterEqual(epoch, 1)
        self.assertNotRegex(attempt2, r"Epoch 0 \| Batchsize")
        self.assertRegex(attempt2, rf"Epoch {epoch} \| Batchsize")
        self.assertIn(f"Epoch {EPOCHS - 1} | Training snapshot saved at {SNAPSHOT}", attempt2)
        # The job's non-persistent bucket outlived attempt 1's cluster.
        self.assertIn("scratch: from-attempt-1 from-attempt-2", attempt2)

        # Every cluster is gone; the snapshot of the last epoch is in the bucket.
        self.assertEqual([c for c in self.h.clusters() if c.startswith(NAME)], [])
        self.assertEqual(namespaces_of(f"{NAME}-{job_id}-2"), [])
        self.assertEqual(self.s3.objects(CKPT), ["gpt_snapshot.pt"])
        with tempfile.TemporaryDirectory(dir=self.h.dir) as d:
            got = self.s3.rclone("copyto", f"t:{CKPT}/gpt_snapshot.pt", f"{d}/s.pt")
            self.assertEqual(got.returncode, 0, got.stderr)
            check = subprocess.run(["/usr/bin/python3", "-c",
                                    "import sys, torch; print(torch.load(sys.argv[1])"
                                    "['EPOCHS_RUN'])", f"{d}/s.pt"],
                                   capture_output=True, text=True)
            self.assertEqual(check.stdout.strip(), str(EPOCHS), check.stderr)
        ls = self.storage_ls()
        self.assertEqual((ls[CKPT]["clusters"], ls[CKPT]["managed_jobs"]), ([], []))
        self.assertIn(f"{CKPT} ", self.h.herd("storage", "ls").stdout.decode())
        # The job ended: its non-persistent bucket went with it.
        self.assertNotIn(SCRATCH, ls)
        self.assertIsNone(self.s3.objects(SCRATCH))
        print(f"\nsnapshot in the bucket -> worker killed; -> RECOVERING "
              f"{recovering_at - killed_at:.1f} s, -> RUNNING again {running_again_at - killed_at:.1f}"
              f" s; attempt 2 resumed at epoch {epoch}; kill -> end {ended_at - killed_at:.1f} s; "
              f"whole job {ended_at - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
