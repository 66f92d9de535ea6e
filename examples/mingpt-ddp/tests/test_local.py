"""Runs the example under a real torchrun on this machine: 2 gloo processes, one node.

Started by ctest (mingpt_local_torchrun) with /usr/bin/python3. Installs the torchrun shim into a
temporary HOME, never the real one. Exits 77 (ctest: skipped) when this interpreter has no torch.
"""

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

# Makes that rank raise after its first iteration (see trainer.py).
FAIL_RANK = "MINGPT_FAIL_RANK"
EXAMPLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Outer bound of one torchrun: a failed run can otherwise sit in torchrun's exit barrier.
TORCHRUN_TIMEOUT_S = 120
# Rank 0's training lines, e.g. "[CPU0] Epoch 3 | Iter 10 | Train Loss 2.31450".
LOSS_RE = re.compile(r"^\[(?:CPU|GPU)0\] Epoch (\d+) \| Iter (\d+) \| Train Loss ([0-9.]+)$", re.M)
START_RE = re.compile(
    r"^world_size=(\d+) rank=(\d+) local_rank=(\d+) backend=(gloo|nccl) master=\S+:\d+$", re.M
)
# Short runs: 2 epochs of 15 iterations take ~2 s of CPU per process.
SHORT_ARGS = ["--max_iters", "15", "--log_every", "5", "--sample_chars", "50"]


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


class LocalTorchrunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mingpt-test-")
        # A class cleanup also runs when the rest of setUpClass fails (tearDownClass would not).
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.home = os.path.join(cls.tmp, "home")
        os.mkdir(cls.home)
        # TMPDIR: torchrun's elastic agent leaves its torchelastic_* directory behind; here it
        # goes with the test's own directory.
        cls.env = dict(os.environ, HOME=cls.home, TMPDIR=cls.tmp)
        cls.env.pop(FAIL_RANK, None)
        install = subprocess.run(
            ["bash", os.path.join(EXAMPLE_DIR, "install_torchrun_shim.sh")],
            env=cls.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        cls.install_output = install.stdout + install.stderr
        cls.install_rc = install.returncode
        cls.env["PATH"] = os.path.join(cls.home, ".local", "bin") + os.pathsep + cls.env["PATH"]

    def torchrun(self, *args, extra_env=None):
        """Runs torchrun in the example folder; returns (rc, output, seconds)."""
        env = dict(self.env, **(extra_env or {}))
        cmd = ["timeout", "-k", "5", str(TORCHRUN_TIMEOUT_S), "torchrun", "--standalone",
               "--nnodes=1", "--nproc_per_node=2",
               # Notice exits within 1 s instead of torchrun's default 5 s.
               "--monitor_interval=1", "main.py", *args]
        start = time.monotonic()
        # Own session, so that whatever the run leaves behind can be killed as one group.
        proc = subprocess.Popen(cmd, cwd=EXAMPLE_DIR, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=TORCHRUN_TIMEOUT_S + 30)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        return proc.returncode, out, time.monotonic() - start

    def test_shim_installed_only_where_torchrun_is_broken(self):
        self.assertEqual(self.install_rc, 0, self.install_output)
        from torch.distributed.elastic.multiprocessing.api import Std

        shim = os.path.join(self.home, ".local", "bin", "torchrun")
        system_torchrun = shutil.which("torchrun", path=os.environ["PATH"])
        broken = Std.from_str("0") is None
        if broken or system_torchrun is None:
            self.assertTrue(os.access(shim, os.X_OK), self.install_output)
            # The shim runs the interpreter of the torch it fixes (here: this one).
            with open(shim) as f:
                interpreter = f.readline().strip()[2:]
            self.assertEqual(os.path.realpath(interpreter), os.path.realpath(sys.executable))
        else:
            self.assertFalse(os.path.exists(shim), self.install_output)
        # Running it again changes nothing and still succeeds.
        again = subprocess.run(["bash", os.path.join(EXAMPLE_DIR, "install_torchrun_shim.sh")],
                               env=self.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)

    def test_trains_saves_snapshot_and_resumes(self):
        snapshot = os.path.join(self.tmp, "train", "gpt_snapshot.pt")
        rc, out, secs = self.torchrun("--max_epochs", "2", "--snapshot_path", snapshot,
                                      *SHORT_ARGS)
        print(f"first run: {secs:.1f} s", file=sys.stderr)
        self.assertEqual(rc, 0, out)
        starts = START_RE.findall(out)
        self.assertEqual(sorted(int(r) for _, r, _, _ in starts), [0, 1], out)
        self.assertTrue(all(w == "2" for w, _, _, _ in starts), out)
        losses = [(int(e), float(loss)) for e, _, loss in LOSS_RE.findall(out)]
        self.assertEqual({e for e, _ in losses}, {0, 1}, out)
        first, last = losses[0][1], losses[-1][1]
        # From ~4.3 (uniform over the vocabulary) the loss drops well below 3.8 in 30 steps.
        self.assertLess(last, first - 0.5, out)
        self.assertTrue(os.path.isfile(snapshot), out)
        self.assertIn(f"Training snapshot saved at {snapshot}", out)
        self.assertRegex(out, r"\[(CPU|GPU)0\] Sample:\n")

        import torch

        state = torch.load(snapshot, map_location="cpu")
        self.assertEqual(state["EPOCHS_RUN"], 2)
        self.assertIn("MODEL_STATE", state)
        self.assertIn("OPTIMIZER_STATE", state)

        rc, out2, secs = self.torchrun("--max_epochs", "3", "--snapshot_path", snapshot,
                                       *SHORT_ARGS)
        print(f"resumed run: {secs:.1f} s", file=sys.stderr)
        self.assertEqual(rc, 0, out2)
        for rank in (0, 1):
            resuming = rf"\[(CPU|GPU){rank}\] Resuming training from snapshot at Epoch 2"
            self.assertRegex(out2, resuming)
        resumed = [(int(e), float(loss)) for e, _, loss in LOSS_RE.findall(out2)]
        self.assertEqual({e for e, _ in resumed}, {2}, out2)
        # The weights came back: the first resumed step is far better than a fresh start.
        self.assertLess(resumed[0][1], first - 0.5, out2)
        self.assertEqual(torch.load(snapshot, map_location="cpu")["EPOCHS_RUN"], 3)

    def test_failed_rank_fails_the_run_within_the_bound(self):
        snapshot = os.path.join(self.tmp, "fail", "gpt_snapshot.pt")
        # Long enough that only the failure can end it early.
        rc, out, secs = self.torchrun("--max_epochs", "50", "--max_iters", "0",
                                      "--snapshot_path", snapshot,
                                      extra_env={FAIL_RANK: "1"})
        print(f"failing run: {secs:.1f} s", file=sys.stderr)
        self.assertNotEqual(rc, 0, out)
        self.assertNotIn(rc, (124, 137), f"torchrun had to be killed by timeout:\n{out}")
        self.assertLess(secs, TORCHRUN_TIMEOUT_S, out)
        self.assertIn("injected failure after the first iteration", out)
        self.assertFalse(os.path.exists(snapshot), out)

if __name__ == "__main__":
    if not torch_available():
        print(f"SKIP: {sys.executable} cannot import torch", file=sys.stderr)
        sys.exit(77)
    unittest.main(verbosity=2)
