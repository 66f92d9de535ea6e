"""Task secrets, as a user relies on them: passed with the real CLI (`--secret NAME`, the value from
the caller's environment), in the job's environment, and nowhere else: not in the bytes of the
head's jobs.db (and its WAL), not in the controller's state.db, not in `herd queue`/`queue -o json`/
`status -o json`, not in agent logs or any other file herd wrote. The job proves it saw the value by
printing its SHA-256, so the value itself never reaches a log.

Two parts: a head on 127.0.30.4 started from the real binaries (a job waits PENDING with its
secret across a head restart), and a named cluster through the `local` provider (network
namespaces; skipped without root), which is where state.db and `status -o json` come in."""

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnv, namespaces_of, netns_available  # noqa: E402
from loopback_cluster import HERD, LoopbackCluster, job_id_of, run  # noqa: E402

NAME = "HGPU_TOKEN"
RUN = (f'echo "token sha256: $(printf %s "${NAME}" | sha256sum | cut -d" " -f1)"\n'
       'echo "plain env: $PLAIN"\n')


def task_yaml(path, name, extra_run=""):
    with open(path, "w") as f:
        f.write(f"name: {name}\nsecrets:\n  {NAME}: null\nenvs:\n  PLAIN: visible\n"
                "run: |\n" + "".join("  " + line + "\n"
                                      for line in (extra_run + RUN).strip().splitlines()))


def files_containing(root, needle):
    """Regular files under root whose bytes contain needle."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            try:
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
            except OSError:
                pass
    return found


class LoopbackSecretsTest(unittest.TestCase):
    def setUp(self):
        self.secret = "hgpu-" + uuid.uuid4().hex  # unique: a hit can only come from this test
        self.sha = hashlib.sha256(self.secret.encode()).hexdigest()
        self.tmp = tempfile.mkdtemp(prefix="herd-hgpu-secrets-")
        self.cluster = LoopbackCluster("hgpu-sec", ["127.0.30.4"], gpus_per_node=0, cpus=2)

    def tearDown(self):
        self.cluster.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def herd_exec(self, *args):
        env = dict(os.environ, **{NAME: self.secret})
        return run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env(), *args],
                   env=env)

    def assert_nowhere(self, what):
        needle = self.secret.encode()
        state = os.path.join(self.cluster.dir, self.cluster.node_id(0), "state")
        for name in ("jobs.db", "jobs.db-wal"):
            path = os.path.join(state, name)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    self.assertFalse(needle in f.read(), f"{what}: {name} holds the secret")
        self.assertEqual(files_containing(self.cluster.dir, needle), [], what)
        for args in (["queue"], ["queue", "-o", "json"]):
            out = self.cluster.herd(*args).stdout
            self.assertFalse(needle in out, f"{what}: herd {' '.join(args)} shows the secret")

    def test_secret_waits_in_the_queue_across_a_head_restart_and_reaches_the_job(self):
        gate = os.path.join(self.tmp, "gate")
        blocker = self.herd_exec("--cpus", "2", "-d", "--",
                                 f"for i in $(seq 600); do [ -e {gate} ] && exit 0; "
                                 "sleep 0.1; done; exit 3")
        blocker_id = job_id_of(blocker.stderr)
        self.cluster.wait_state(blocker_id, {"RUNNING"})
        task = os.path.join(self.tmp, "task.yaml")
        task_yaml(task, "with-secret")
        p = self.herd_exec("-d", "--secret", NAME, task)
        job = job_id_of(p.stderr)
        self.assertEqual(self.cluster.queue()[job]["status"], "PENDING")
        self.assert_nowhere("while PENDING")

        self.cluster.restart_head()  # the secret must come back from jobs.db
        self.cluster.wait_nodes(1)
        open(gate, "w").close()
        self.assertEqual(self.cluster.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER"},
                                                 timeout=60)["status"], "SUCCEEDED")
        out = self.cluster.herd("logs", "--no-follow", str(job)).stdout.decode()
        self.assertIn(f"token sha256: {self.sha}", out)
        self.assertIn("plain env: visible", out)
        self.assert_nowhere("after the job")
        key = os.path.join(self.cluster.dir, self.cluster.node_id(0), "state", "secrets.key")
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class NamedClusterSecretsTest(unittest.TestCase):
    CLUSTER = "hgpu-sec"

    def setUp(self):
        self.secret = "hgpu-" + uuid.uuid4().hex
        self.sha = hashlib.sha256(self.secret.encode()).hexdigest()
        self.h = HerdEnv("hgpu-sec")
        self.h.env[NAME] = self.secret

    def tearDown(self):
        self.h.close()
        self.assertEqual(namespaces_of(self.CLUSTER), [])

    def test_launch_with_a_secret_shows_it_nowhere(self):
        task = os.path.join(self.h.dir, "task.yaml")
        task_yaml(task, "named")
        p = self.h.herd("launch", "-c", self.CLUSTER, "-y", "--secret", NAME, task)
        out = p.stdout + p.stderr
        self.assertIn(f"token sha256: {self.sha}".encode(), out)
        self.assertIn(b"plain env: visible", out)
        self.assertNotIn(self.secret.encode(), out)
        outputs = {
            "status -o json": self.h.herd("status", "-o", "json").stdout,
            "status": self.h.herd("status").stdout,
            "queue -o json": self.h.herd("queue", self.CLUSTER, "-o", "json").stdout,
            "queue": self.h.herd("queue", self.CLUSTER).stdout,
            "logs": self.h.herd("logs", self.CLUSTER, "1", "--no-follow").stdout,
        }
        self.assertIn(b"SUCCEEDED", outputs["queue -o json"])
        for what, text in outputs.items():
            self.assertNotIn(self.secret.encode(), text, what)
        herd_home = self.h.env["HERD_HOME"]
        self.assertTrue(os.path.exists(os.path.join(herd_home, "state.db")))
        jobs_dbs = [os.path.join(d, "jobs.db") for d, _, names in os.walk(herd_home)
                    if "jobs.db" in names]
        self.assertEqual(len(jobs_dbs), 1, jobs_dbs)  # the head node's, under its home
        # Every file herd made: the controller's state.db, the node's jobs.db (+ -wal), the
        # agent's logs, run.log, the task logs.
        self.assertEqual(files_containing(herd_home, self.secret.encode()), [])


if __name__ == "__main__":
    unittest.main()
