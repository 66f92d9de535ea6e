"""Bucket file_mounts end to end, as a user drives them: a real S3-compatible server (s3rver, with
SigV4 checked) on the host's address of a 2-node local cluster's bridge, so that the nodes reach
it; MOUNT_CACHED, MOUNT and COPY mounts made with rclone inside the node namespaces; what the job
wrote read back through the S3 API; `herd storage ls/delete`; a non-persistent bucket deleted
with the cluster; and the bad inputs (a missing bucket, wrong credentials, a wrong endpoint, a
bucket name S3 refuses), each a one-line error naming the mount, nothing left mounted. s3rver has
no IAM: the nodes mount with the user's keys, and the launch says so."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, pids_with_marker, wait_for  # noqa: E402
from s3_server import KEY, BucketSuite, S3Server, needs_bucket_tools  # noqa: E402

CLUSTER = "stor"
# The buckets of this suite (names S3 takes; s3rver keeps them in the test's own directory).
CKPT, DATA, SRC = "herd-st-ckpt", "herd-st-data", "herd-st-src"


@needs_bucket_tools
class StorageTest(BucketSuite, HerdEnvTestCase):
    ENV_PREFIX = "storage"
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        cls.s3 = None
        cls.plain = cls.write(cls, "plain.yaml", "num_nodes: 2\nrun: echo up\n")

    @classmethod
    def launch_args(cls):
        # The cluster first: s3rver listens on the host's address of its bridge.
        return ("launch", "-c", CLUSTER, "-y", cls.plain)

    @classmethod
    def after_launch(cls):
        ip = cls.h.clusters()[CLUSTER]["nodes"][0]["ip"]
        cls.s3 = S3Server(os.path.join(cls.h.dir, "s3rver-data"))
        cls.start_s3rver(ip.rsplit(".", 1)[0] + ".254")

    @classmethod
    def start_s3rver(cls, addr):
        """s3rver on addr (over the data it already holds); herd and the test's rclone use it."""
        cls.s3.start(addr)
        cls.endpoint = cls.s3.endpoint
        cls.s3.use_in(cls.h.env)

    @classmethod
    def close_env(cls):
        try:
            # Down first: it flushes, unmounts and deletes the non-persistent buckets, which
            # needs the server.
            if getattr(cls, "launch", None) is not None:
                cls.h.herd("down", CLUSTER, "-y", check=False)
        finally:
            try:
                if cls.s3 is not None:
                    cls.s3.stop()
            finally:
                super().close_env()

    def rclone(self, *args):
        """rclone on this machine against the server (the test's own view of the bucket)."""
        p = self.s3.rclone(*args)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def objects(self, bucket):
        return self.s3.objects(bucket)

    def mounts(self):
        """The rclone FUSE mounts on each node (in the node's own mount namespace)."""
        out = {}
        for alias in (CLUSTER, f"{CLUSTER}-worker1"):
            p = self.h.ssh(alias, "grep fuse.rclone /proc/mounts || true")
            self.assertEqual(p.returncode, 0, p.stderr)
            out[alias] = sorted(line.split()[1] for line in p.stdout.decode().splitlines())
        return out

    def storage_ls(self):
        return {b["name"]: b for b in json.loads(self.h.herd("storage", "ls", "-o",
                                                             "json").stdout)}

    def test_a_mount_cached_checkpoint_is_in_the_bucket_when_the_job_is_done(self):
        task = self.write("ckpt.yaml", f"""name: ckpt
num_nodes: 2
file_mounts:
  ~/checkpoints:
    name: {CKPT}
    mode: MOUNT_CACHED
    persistent: false
run: |
  head -c 3000000 /dev/urandom > ~/checkpoints/blob-$SKYPILOT_NODE_RANK.bin
  echo "epoch 3 of rank $SKYPILOT_NODE_RANK" > ~/checkpoints/ckpt-$SKYPILOT_NODE_RANK.txt
  echo written
""")
        p = self.h.herd("launch", "-c", CLUSTER, "-y", task)
        self.assertIn(b"Job finished (status: SUCCEEDED)", p.stderr)
        # Right after the job is reported done, without waiting: the flush happened before.
        self.assertEqual(self.objects(CKPT), ["blob-0.bin", "blob-1.bin", "ckpt-0.txt",
                                              "ckpt-1.txt"])
        self.assertEqual(self.rclone("cat", f"t:{CKPT}/ckpt-1.txt").stdout, "epoch 3 of rank 1\n")
        sizes = {o["Name"]: o["Size"] for o in json.loads(self.rclone("lsjson", f"t:{CKPT}").stdout)}
        self.assertEqual(sizes["blob-0.bin"], 3000000)
        self.assertEqual(sizes["blob-1.bin"], 3000000)
        for alias, paths in self.mounts().items():
            self.assertEqual(len([x for x in paths if x.endswith("/checkpoints")]), 1, alias)
        ls = self.storage_ls()
        self.assertEqual(ls[CKPT]["clusters"], [CLUSTER])
        self.assertTrue(ls[CKPT]["herd_made"])
        self.assertFalse(ls[CKPT]["persistent"])
        table = self.h.herd("storage", "ls").stdout.decode()
        self.assertRegex(table, rf"{CKPT}\s+\S.*s3 \({self.endpoint}\)")
        # The keys went to the nodes in a 0600 file only; no output of herd shows them.
        mode = self.h.ssh(CLUSTER, "stat -c %a .herd/agent/storage/rclone.conf").stdout
        self.assertEqual(mode.decode().strip(), "600")
        for args in (("queue", CLUSTER, "-o", "json"), ("status", "-o", "json"),
                     ("logs", CLUSTER)):
            out = self.h.herd(*args)
            self.assertNotIn(KEY.encode(), out.stdout + out.stderr, args)
        self.assertNotIn(KEY.encode(), p.stdout + p.stderr)
        # s3rver has no IAM (AWS_ENDPOINT_URL_IAM unset): the nodes got the user's keys, and the
        # launch said so (bucket_keys_test covers a store with one).
        self.assertIn(f"{self.endpoint} has no IAM herd knows of".encode(), p.stderr)
        self.assertEqual(self.h.ssh(CLUSTER, "grep -c '^access_key_id = S3RVER$' "
                                             ".herd/agent/storage/rclone.conf").stdout, b"1\n")

    def test_b_copy_and_mount_with_a_local_source(self):
        self.rclone("mkdir", f"t:{DATA}")
        data = self.write("hello.txt", "hello from the bucket\n")
        self.rclone("copyto", data, f"t:{DATA}/sub/hello.txt")
        src = os.path.join(self.h.dir, "src")
        os.makedirs(src)
        with open(os.path.join(src, "a.txt"), "w") as f:
            f.write("uploaded source\n")
        task = self.write("copy.yaml", f"""name: copy
num_nodes: 2
file_mounts:
  ~/data: s3://{DATA}/sub
  ~/src:
    name: {SRC}
    source: {src}
    mode: MOUNT
run: |
  cat ~/data/hello.txt ~/src/a.txt
  echo "rank $SKYPILOT_NODE_RANK wrote" > ~/src/out-$SKYPILOT_NODE_RANK.txt
""")
        p = self.h.herd("launch", "-c", CLUSTER, "-y", task)
        out = p.stdout.decode()
        self.assertEqual(out.count("hello from the bucket"), 2, out)
        self.assertEqual(out.count("uploaded source"), 2, out)
        self.assertEqual(self.objects(SRC), ["a.txt", "out-0.txt", "out-1.txt"])
        self.assertEqual(self.rclone("cat", f"t:{SRC}/out-0.txt").stdout, "rank 0 wrote\n")
        # COPY is a download, not a mount.
        for alias, paths in self.mounts().items():
            self.assertFalse([x for x in paths if x.endswith("/data")], alias)
            self.assertEqual(len([x for x in paths if x.endswith("/src")]), 1, alias)
        ls = self.storage_ls()
        self.assertFalse(ls[DATA]["herd_made"])
        self.assertTrue(ls[SRC]["herd_made"])
        # In use: `storage delete` refuses.
        d = self.h.herd("storage", "delete", "-y", SRC, check=False)
        self.assertEqual(d.returncode, 1, d.stderr)
        self.assertIn(f"mounted by cluster(s) {CLUSTER}", d.stderr.decode())

    def expect_refused(self, text, env=None, words=()):
        before = self.mounts()
        task = self.write("bad.yaml", text)
        saved = dict(self.h.env)
        try:
            self.h.env.update(env or {})
            p = self.h.herd("launch", "-c", CLUSTER, "-y", task, check=False)
        finally:
            self.h.env.clear()
            self.h.env.update(saved)
        err = p.stderr.decode()
        self.assertNotEqual(p.returncode, 0, err)
        lines = [x for x in err.splitlines() if x.startswith("herd:")]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("file_mounts.~/bad", lines[0])
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(self.mounts(), before)
        self.assertNotIn("herd-st-never", self.storage_ls())
        return lines[0]

    def test_c_bad_inputs_are_one_line_errors_naming_the_mount(self):
        # A bucket that does not exist, with no name to make it.
        self.expect_refused("file_mounts:\n  ~/bad: s3://herd-st-never\nrun: true\n",
                            words=("does not exist", "name: herd-st-never"))
        # Wrong credentials: a key the server does not know (s3rver checks the key id; it does
        # not compute SigV4 signatures itself).
        self.expect_refused("file_mounts:\n  ~/bad:\n    name: herd-st-never\nrun: true\n",
                            env={"AWS_ACCESS_KEY_ID": "WRONGKEY"}, words=("403",))
        # An endpoint nobody listens on.
        self.expect_refused("file_mounts:\n  ~/bad:\n    name: herd-st-never\nrun: true\n",
                            env={"AWS_ENDPOINT_URL_S3": "http://127.0.201.9:9"},
                            words=("cannot reach",))
        # Nothing was created on the server either.
        self.assertIsNone(self.objects("herd-st-never"))
        # Bad forms are refused at check, with their place.
        for text, where, what in (
                ("file_mounts:\n  /d:\n    name: Bad_Name\n", "3:11", "not a valid S3 bucket"),
                ("file_mounts:\n  /d:\n    name: b1c\n    mode: FAST\n", "4:11", "unknown mode"),
                ("file_mounts:\n  /d:\n    mode: COPY\n", "3:5", "needs a name"),
                ("file_mounts:\n  /d:\n    name: b1c\n    store: gcs\n", "4:12",
                 "not supported by herd")):
            path = self.write("form.yaml", text)
            p = self.h.herd("check", path, check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(f"form.yaml:{where}: file_mounts./d", p.stderr.decode())
            self.assertIn(what, p.stderr.decode())

    def test_d_start_after_stop_mounts_the_buckets_again(self):
        self.h.herd("stop", CLUSTER, "-y")
        # Stopped: nothing of rclone runs for the cluster's nodes.
        self.assertEqual(wait_for(lambda: not pids_with_marker(".herd/agent/storage"), 10), True)
        p = self.h.herd("start", CLUSTER, "-y")
        self.assertEqual(self.h.clusters()[CLUSTER]["status"], "UP", p.stderr)
        # The MOUNT and MOUNT_CACHED buckets of the launches before are mounted again on every
        # node; the COPY one was a download, still on the nodes' disks.
        for alias, paths in self.mounts().items():
            self.assertEqual(sorted(x.rsplit("/", 1)[1] for x in paths), ["checkpoints", "src"],
                             alias)
        ls = self.storage_ls()
        self.assertEqual(ls[CKPT]["clusters"], [CLUSTER])
        # The mounts read and write through to the buckets.
        task = self.write("after.yaml", """name: after
num_nodes: 2
run: |
  cat ~/checkpoints/ckpt-$SKYPILOT_NODE_RANK.txt ~/data/hello.txt
  echo "after start $SKYPILOT_NODE_RANK" > ~/src/after-start-$SKYPILOT_NODE_RANK.txt
""")
        e = self.h.herd("exec", CLUSTER, task)
        out = e.stdout.decode()
        self.assertIn("epoch 3 of rank 0", out)
        self.assertIn("epoch 3 of rank 1", out)
        self.assertEqual(out.count("hello from the bucket"), 2, out)
        self.assertEqual(self.objects(SRC), ["a.txt", "after-start-0.txt", "after-start-1.txt",
                                             "out-0.txt", "out-1.txt"])
        self.assertEqual(self.rclone("cat", f"t:{SRC}/after-start-1.txt").stdout,
                         "after start 1\n")

    def test_e_start_fails_naming_the_mount_when_a_bucket_was_deleted(self):
        saved = os.path.join(self.h.dir, "src-saved")
        self.rclone("copy", f"t:{SRC}", saved)
        self.h.herd("stop", CLUSTER, "-y")
        self.rclone("purge", f"t:{SRC}")  # deleted behind herd's back
        self.assertIsNone(self.objects(SRC))
        p = self.h.herd("start", CLUSTER, "-y", check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        lines = [x for x in err.splitlines() if x.startswith("herd:")]
        self.assertEqual(len(lines), 1, err)
        self.assertIn(f"file_mounts.~/src: bucket '{SRC}' no longer exists at {self.endpoint}",
                      lines[0])
        # Nothing started: the cluster is as it was, and the bucket was not made again.
        self.assertEqual(self.h.clusters()[CLUSTER]["status"], "STOPPED")
        self.assertIsNone(self.objects(SRC))
        # With the bucket back, the start goes through and mounts it again.
        self.rclone("copy", saved, f"t:{SRC}")
        self.h.herd("start", CLUSTER, "-y")
        for alias, paths in self.mounts().items():
            self.assertEqual(sorted(x.rsplit("/", 1)[1] for x in paths), ["checkpoints", "src"],
                             alias)

    def test_z_down_unmounts_deletes_non_persistent_and_storage_delete(self):
        self.h.herd("down", CLUSTER, "-y")
        # The bridge address went with the cluster: the same data, served on loopback now.
        self.start_s3rver("127.0.201.1")
        # The non-persistent bucket herd made went with the cluster; the others stay.
        self.assertIsNone(self.objects(CKPT))
        ls = self.storage_ls()
        self.assertNotIn(CKPT, ls)
        self.assertEqual(ls[SRC]["clusters"], [])
        self.assertEqual(self.objects(SRC), ["a.txt", "after-start-0.txt", "after-start-1.txt",
                                             "out-0.txt", "out-1.txt"])
        d = self.h.herd("storage", "delete", "-y", SRC, DATA)
        self.assertIn(f"Deleted bucket {SRC}", d.stderr.decode())
        self.assertIn("herd did not make the bucket", d.stderr.decode())
        self.assertIsNone(self.objects(SRC))
        self.assertEqual(self.objects(DATA), ["sub/hello.txt"])  # not herd's: left as it was
        self.assertEqual(self.storage_ls(), {})
        self.assertIn(b"No existing storage.", self.h.herd("storage", "ls").stdout)
        gone = self.h.herd("storage", "delete", "-y", SRC, check=False)
        self.assertEqual(gone.returncode, 102, gone.stderr)
        # No rclone left on this machine for the cluster's nodes.
        self.assertEqual(wait_for(lambda: not pids_with_marker(".herd/agent/storage"), 10), True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
