"""The seed's workflow with real torchrun: the multi-node minGPT DDP task on 2 namespace nodes x 2
processes, the checkpoint fetched with scp through the generated ssh config, the rendezvous task
on the same agents, and the Python SDK script (success and a failing rank)."""

import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, netns_available  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "mingpt-ddp")
CLUSTER = "mingpt"
# Short but real: 2 epochs x 8 iterations, 4 processes on the 2 cores of a test machine.
SHORT = ["--env", "MAX_EPOCHS=2", "--env", "MAX_ITERS=8"]


def has_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          capture_output=True).returncode == 0


def losses(text):
    return [float(x) for x in re.findall(r"Train Loss ([0-9.]+)", text)]


@unittest.skipUnless(netns_available() and has_torch(), "needs root, ip netns and python3-torch")
class TorchTest(HerdEnvTestCase):
    ENV_PREFIX = "torch"

    def agent_pids(self):
        return [self.h.ssh(a, "cat .herd/agent/herdlet.pid").stdout.strip()
                for a in (CLUSTER, f"{CLUSTER}-worker1")]

    def test_1_multinode_static_rendezvous(self):
        os.chdir(EXAMPLE)  # workdir: . as a user runs it from the example's folder
        p = self.h.herd("launch", "-c", CLUSTER, "-y", *SHORT, "train-multinode-cpu.yaml",
                        timeout=600)
        out = p.stdout.decode()
        head_ip = self.h.clusters()[CLUSTER]["nodes"][0]["ip"]
        # MASTER_ADDR is the first line of SKYPILOT_NODE_IPS on both nodes: the head's address.
        self.assertIn(f"(head, rank=0, pid=", out)
        self.assertRegex(out, rf"\(head, rank=0, pid=\d+\) Starting distributed training, "
                              rf"head node: {re.escape(head_ip)}\n")
        self.assertRegex(out, rf"\(worker1, rank=1, pid=\d+, ip=[\d.]+\) Starting distributed "
                              rf"training, head node: {re.escape(head_ip)}\n")
        # World size 4: global ranks 0,1 on the head, 2,3 on the worker, each with its prefix.
        for rank in (0, 1):
            self.assertRegex(out, rf"\(head, rank=0, pid=\d+\) world_size=4 rank={rank} ")
        for rank in (2, 3):
            self.assertRegex(out, rf"\(worker1, rank=1, pid=\d+, ip=[\d.]+\) world_size=4 "
                                  rf"rank={rank} ")
        trained = losses(out)
        self.assertGreater(len(trained), 4)
        self.assertLess(trained[-1], trained[0], "the loss did not fall")
        self.assertIn("Job finished (status: SUCCEEDED).", p.stderr.decode())
        # The checkpoint comes back through the generated ssh config.
        dest = os.path.join(self.h.dir, "gpt_snapshot.pt")
        cp = self.h.ssh(None, [f"{CLUSTER}:sky_workdir/gpt_snapshot.pt", dest], tool="scp")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        check = subprocess.run(["/usr/bin/python3", "-c",
                                "import sys, torch; s = torch.load(sys.argv[1]); "
                                "print(s['EPOCHS_RUN'])", dest], capture_output=True, text=True)
        self.assertEqual(check.stdout.strip(), "2", check.stderr)

    def test_2_rdzv_reuses_the_agents(self):
        before = self.agent_pids()
        os.chdir(EXAMPLE)
        p = self.h.herd("exec", CLUSTER, *SHORT, "--env", "SNAPSHOT_PATH=rdzv_snapshot.pt",
                        "train-rdzv-cpu.yaml", timeout=600)
        out = p.stdout.decode()
        self.assertIn("Job finished (status: SUCCEEDED).", p.stderr.decode())
        self.assertEqual(len(set(re.findall(r"world_size=4 rank=(\d)", out))), 4, out[-3000:])
        trained = losses(out)
        self.assertLess(trained[-1], trained[0])
        self.assertEqual(self.agent_pids(), before)

    def test_3_sdk_script_success_and_failing_rank(self):
        env = dict(self.h.env, HERD=os.environ.get("HERD", "herd"))
        sdk = os.path.join(EXAMPLE, "sdk_train.py")
        ok = subprocess.run(["/usr/bin/python3", sdk, "--cluster", CLUSTER, "--keep",
                             "--max-epochs", "1", "--max-iters", "6",
                             "--snapshot-out", os.path.join(self.h.dir, "sdk.pt")],
                            capture_output=True, env=env, timeout=600, cwd=self.h.dir)
        self.assertEqual(ok.returncode, 0, ok.stderr.decode()[-3000:])
        self.assertTrue(os.path.getsize(os.path.join(self.h.dir, "sdk.pt")) > 0)
        # More epochs than the snapshot of the run above holds, so there is training to fail in.
        bad = subprocess.run(["/usr/bin/python3", sdk, "--cluster", CLUSTER, "--keep",
                              "--max-epochs", "3", "--max-iters", "6", "--fail-rank", "3"],
                             capture_output=True, env=env, timeout=600, cwd=self.h.dir)
        self.assertEqual(bad.returncode, 100, bad.stderr.decode()[-3000:])
        # Global rank 3 lives on node rank 1 (the worker) and raised there ...
        self.assertRegex(bad.stdout.decode(), r"\(worker1, rank=1, pid=\d+, ip=[\d.]+\) .*"
                                              r"MINGPT_FAIL_RANK=3: injected failure")
        jobs = json.loads(self.h.herd("queue", CLUSTER, "-o", "json").stdout)
        last = max(jobs, key=lambda j: j["id"])
        self.assertEqual(last["status"], "FAILED")
        # ... but which torchrun exits first is a race (the head's workers see the peer vanish):
        # herd names the node whose process it saw fail first, and killed the other (137).
        first = last["first_failed_rank"]
        self.assertIn(first, (0, 1))
        self.assertEqual(last["first_failed_node"], [f"{CLUSTER}-head", f"{CLUSTER}-worker1"][first])
        self.assertIn(f"first failure: rank {first} on {last['first_failed_node']}", last["message"])
        self.assertNotEqual(last["exit_codes"][first], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
