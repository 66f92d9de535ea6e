"""Node health as a user sees it, on a head and a worker on 127.0.34.2-3 (real herdlets, real TLS,
the real CLI over --endpoint). The worker's GPUs come from the fake libnvidia-ml.so.1 (two H200s),
whose faults the test writes into a file the fake reads; the head runs a health-check command
(the agent config's `health_check`) that fails while a file exists.

- An XID 79 on the worker's GPU drains it within seconds: `herd nodes` says DRAINED with the
  reason, the job running there ends FAILED_DRIVER naming the node and the XID, and a new GPU job
  waits PENDING instead of landing on it; `herd nodes --undrain` brings the node back and the
  waiting job runs.
- The head's failing health check drains the head with the check's output as the reason.
- A user's `--drain NODE --reason R` survives a head restart; `--drain` without a reason is
  refused."""

import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import LoopbackCluster, job_id_of, write_task  # noqa: E402

ADDRS = ["127.0.34.2", "127.0.34.3"]
FAKE_NVML = os.environ.get("FAKE_NVML", "")


@unittest.skipUnless(FAKE_NVML, "FAKE_NVML not set (the fake libnvidia-ml.so.1)")
class NodeHealthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.tmp = tempfile.mkdtemp(prefix="herd-hhl-")
        cls.faults = os.path.join(cls.tmp, "worker-faults")
        cls.sick = os.path.join(cls.tmp, "head-is-sick")
        open(cls.faults, "w").close()
        check = f"if [ -e {cls.sick} ]; then echo 'scratch disk is read-only'; exit 1; fi"
        cls.cluster = LoopbackCluster(
            "hhl", ADDRS, gpus_per_node=[0, None], cpus=4,
            agent_env={"LD_LIBRARY_PATH": os.path.dirname(FAKE_NVML),
                       "FAKE_NVML_GPUS": "NVIDIA H200,NVIDIA H200"},
            wrappers={1: ["env", f"FAKE_NVML_FAULTS={cls.faults}"]},
            agent_config={0: {"health_check": {"command": check, "interval": 1}}})

    @classmethod
    def tearDownClass(cls):
        import shutil
        cls.cluster.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def nodes(self):
        return {n["node_id"]: n for n in self.cluster.nodes()}

    def wait(self, pred, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = pred()
            if got:
                return got
            time.sleep(0.2)
        raise AssertionError(f"{what}: nodes {json.dumps(self.nodes(), indent=1)}\n"
                             f"queue {json.dumps(self.cluster.queue(), indent=1)}")

    def submit(self, name, gpus, run):
        task = write_task(self.tmp, name + ".yaml",
                          f"name: {name}\nresources:\n  accelerators: H200:{gpus}\nrun: {run}\n")
        p = self.cluster.herd("exec", *self.cluster.marker_env(), "-d", task)
        return job_id_of(p.stderr)

    def test_1_an_xid_drains_the_node_and_undrain_brings_it_back(self):
        worker = self.cluster.node_id(1)
        nodes = self.nodes()
        self.assertEqual(nodes[worker]["gpus"], 2)
        self.assertEqual(nodes[worker]["gpu_source"], "nvml")
        self.assertFalse(nodes[worker]["drained"])
        job = self.submit("train", 1, "sleep 120")
        self.wait(lambda: self.cluster.queue()[job]["status"] == "RUNNING", "job running")

        with open(self.faults, "a") as f:
            f.write("xid 0 79\n")
        drained = self.wait(lambda: self.nodes()[worker]["drained"] and self.nodes()[worker],
                            "the worker drained after an XID 79")
        self.assertEqual(drained["drain_reason"],
                         "unhealthy: GPU 0: XID 79 (GPU has fallen off the bus)")
        self.assertEqual(drained["status"], "UP")  # drained, not lost
        ended = self.wait(lambda: self.cluster.queue()[job]["status"] == "FAILED_DRIVER"
                          and self.cluster.queue()[job], "the job on the drained node ended")
        self.assertIn(f"node {worker} was drained: unhealthy: GPU 0: XID 79", ended["message"])
        table = self.cluster.herd("nodes").stdout.decode()
        self.assertIn("UP, DRAINED", table)
        self.assertIn(f"--undrain {worker}", table)

        waiting = self.submit("after-fix", 1, "echo fixed")
        time.sleep(2)  # it would have started by now on an undrained node
        self.assertEqual(self.cluster.queue()[waiting]["status"], "PENDING")
        p = self.cluster.herd("nodes", "--undrain", worker)
        self.assertIn(b"undrained", p.stderr)
        self.assertFalse(self.nodes()[worker]["drained"])
        self.wait(lambda: self.cluster.queue()[waiting]["status"] == "SUCCEEDED",
                  "the waiting job ran once the node was undrained")
        self.assertEqual(self.cluster.leftovers(), [])

    def test_2_a_failing_health_check_drains_the_head(self):
        head = self.cluster.node_id(0)
        self.assertFalse(self.nodes()[head]["drained"])
        open(self.sick, "w").close()
        try:
            drained = self.wait(lambda: self.nodes()[head]["drained"] and self.nodes()[head],
                                "the head drained by its health check", timeout=20)
            self.assertRegex(drained["drain_reason"],
                             r"^unhealthy: health check `.*` exited 1: scratch disk is read-only$")
        finally:
            os.unlink(self.sick)
        # Healthy again does not undrain it by itself: a user says when it is fixed.
        time.sleep(2)
        self.assertTrue(self.nodes()[head]["drained"])
        self.cluster.herd("nodes", "--undrain", head)
        self.assertFalse(self.nodes()[head]["drained"])

    def test_3_a_users_drain_survives_a_head_restart(self):
        worker = self.cluster.node_id(1)
        p = self.cluster.herd("nodes", "--drain", worker, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"give a --reason", p.stderr)
        p = self.cluster.herd("nodes", "--drain", "hhl-nosuch", "--reason", "x", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"no node hhl-nosuch", p.stderr)
        self.cluster.herd("nodes", "--drain", worker, "--reason", "maintenance window")
        self.cluster.restart_head()
        self.cluster.wait_nodes(2)
        node = self.nodes()[worker]
        self.assertTrue(node["drained"])
        self.assertEqual(node["drain_reason"], "maintenance window")
        self.cluster.herd("nodes", "--undrain", worker)


if __name__ == "__main__":
    unittest.main(verbosity=2)
