"""examples/mingpt-ddp/sdk_train.py end to end: a real 2-node herd cluster made by the CLI, a
real multi-node torchrun, the snapshot copied back with scp, and the SDK's queue/status/down
checked against what the cluster says.

Needs a working `herd launch` (the CLI named by $HERD, default `herd` on PATH) and Debian's torch;
skipped unless HERD_E2E=1. HERD_E2E_INFRA sets the task's infra (e.g. "local"); HERD_HOME and
HOME are used as they are, so the generated ssh config that scp needs is the user's.

    HERD_E2E=1 HERD=build/controller/herd /usr/bin/python3 python/tests/test_sdk_e2e.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import herd  # noqa: E402

SDK_TRAIN = os.path.join(REPO, "examples", "mingpt-ddp", "sdk_train.py")
# Provisioning 2 nodes, setup, and 4 epochs of 4 gloo processes on this 2-core machine.
RUN_TIMEOUT_S = 900


@unittest.skipUnless(os.environ.get("HERD_E2E") == "1", "set HERD_E2E=1 to run (needs a cluster)")
class SdkTrainE2ETest(unittest.TestCase):
    """The tests run in order on one cluster: the failing job first (it leaves no snapshot to
    resume from), kept up; then the full run, which tears the cluster down."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = f"sdk-e2e-{os.getpid()}"
        cls.dir = tempfile.mkdtemp(prefix="herd-sdk-e2e-")

    @classmethod
    def tearDownClass(cls):
        try:
            if herd.status(cls.cluster):
                herd.down(cls.cluster)
        finally:
            shutil.rmtree(cls.dir, ignore_errors=True)

    def run_script(self, *args):
        cmd = [sys.executable, SDK_TRAIN, "--cluster", self.cluster, "--num-nodes", "2", *args]
        if os.environ.get("HERD_E2E_INFRA"):
            cmd += ["--infra", os.environ["HERD_E2E_INFRA"]]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                           cwd=self.dir)
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        return p

    def test_1_failing_rank_fails_the_job(self):
        p = self.run_script("--fail-rank", "1", "--keep")
        self.assertEqual(p.returncode, herd.JOB_FAILED, p.stderr)
        self.assertIn("MINGPT_FAIL_RANK=1: injected failure", p.stdout + p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "gpt_snapshot.pt")))
        (cluster,) = herd.status(self.cluster)
        self.assertEqual(cluster["status"], "UP")
        job = herd.queue(self.cluster)[-1]
        self.assertEqual(job["status"], "FAILED")
        self.assertTrue(any(code != 0 for code in job["exit_codes"]), job)
        self.assertEqual(herd.job_status(self.cluster), {job["id"]: "FAILED"})

    def test_2_trains_fetches_the_snapshot_and_tears_down(self):
        out = os.path.join(self.dir, "gpt_snapshot.pt")
        p = self.run_script("--snapshot-out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        # 2 nodes x 2 processes: global ranks 0..3 all trained.
        for rank in range(4):
            self.assertIn(f"[CPU{rank}] Epoch 3", p.stdout)
        self.assertIn("Training snapshot saved", p.stdout)
        check = subprocess.run(
            [sys.executable, "-c",
             "import sys, torch; s = torch.load(sys.argv[1], map_location='cpu'); "
             "print(s['EPOCHS_RUN'], len(s['MODEL_STATE']) > 0)", out],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertEqual(check.stdout.split(), ["4", "True"])
        self.assertEqual(herd.status(self.cluster), [], "the cluster is still there after down")


if __name__ == "__main__":
    unittest.main()
