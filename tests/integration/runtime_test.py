"""Graceful stops and hung ranks (issue 26 items 1-2), as a user sees them, on a head and a worker
on 127.0.181.1-2 (LoopbackCluster: real herdlet, real certificates, one machine):

- `herd cancel` sends SIGTERM to every process: a job that traps it writes its checkpoint, exits 0
  and shows CANCELLED; one that ignores it is killed after `--grace`.
- `--time-limit` with `--signal USR1@N`: USR1 first, then SIGTERM at the limit; FAILED with the
  time limit named.
- Bad limits (hang timeout 0, a negative grace, a malformed --signal) are refused at submit and
  nothing is queued.
- A 2-rank gloo all_reduce in which rank 1 sleeps instead of joining, with a hang timeout: the job
  ends within the timeout plus a few seconds, the log holds every rank's stacks under its prefix
  (rank 0 waiting in all_reduce, rank 1 in its sleeping function) and names rank 1 as the one that
  differs; `herd stack` shows the same of a running job without stopping it.

The ranks run as two processes on one machine (two agents), not on two network-namespace nodes."""

import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import HERD, ClusterTestCase, run, write_task  # noqa: E402



def has_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"],
                          capture_output=True).returncode == 0


class RuntimeCase(ClusterTestCase):
    """The helpers of both tests below (a class without tests makes no cluster)."""

    def logs(self, job_id):
        return self.cluster.herd("logs", str(job_id), "--no-follow", check=False).stdout.decode()

    def wait_log(self, job_id, text, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            out = self.logs(job_id)
            if text in out:
                return out
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not in the log of job {job_id}:\n{self.logs(job_id)}")

    def exec_args(self, *flags):
        return [HERD, "exec", *self.cluster.target(), *self.cluster.marker_env(), "-d", *flags]


class GracefulStopTest(RuntimeCase):
    CLUSTER, ADDRS = "hrt", ["127.0.181.1", "127.0.181.2"]

    def test_1_cancel_lets_a_job_save_its_checkpoint(self):
        ckpt = os.path.join(self.tasks, "ckpt-1")
        job = self.submit("-ckpt", f"""
run: |
  trap 'echo step 41 > {ckpt}; echo checkpoint saved; exit 0' TERM
  echo ready
  sleep 1000 &
  wait
""")
        self.wait_log(job, "ready")
        start = time.time()
        p = self.cluster.herd("cancel", str(job))
        self.assertIn(f"Cancelling job(s): {job}", p.stdout.decode())
        info = self.cluster.wait_state(job, {"CANCELLED", "FAILED", "SUCCEEDED"})
        self.assertEqual(info["status"], "CANCELLED")
        self.assertLess(time.time() - start, 10, "the job saved at once; no grace was waited out")
        with open(ckpt) as f:
            self.assertEqual(f.read(), "step 41\n")
        self.assertIn("checkpoint saved", self.logs(job))
        self.assertEqual(self.cluster.leftovers(), [])

    def test_2_a_job_that_ignores_sigterm_is_killed_after_the_grace(self):
        job = self.submit("-stubborn", """
run: |
  trap 'echo ignoring SIGTERM' TERM
  echo ready
  while true; do sleep 0.1; done
""")
        self.wait_log(job, "ready")
        start = time.time()
        self.cluster.herd("cancel", "--grace", "3", str(job))
        info = self.cluster.wait_state(job, {"CANCELLED"}, timeout=30)
        took = time.time() - start
        self.assertGreaterEqual(took, 2.9, "SIGKILL came before the grace period")
        self.assertLess(took, 3 + 6, "SIGKILL did not follow the grace period")
        self.assertEqual(info["exit_codes"], [137])
        self.assertIn("ignoring SIGTERM", self.logs(job))
        self.assertEqual(self.cluster.leftovers(), [])

    def test_3_time_limit_sends_the_signal_first(self):
        path = write_task(self.tasks, "limit.yaml", """
run: |
  trap 'echo got USR1: saving' USR1
  trap 'echo got TERM; exit 0' TERM
  echo started
  while true; do sleep 0.1; done
""")
        start = time.time()
        p = run(self.exec_args("--time-limit", "6s", "--signal", "USR1@3", "--grace", "5", path))
        job = int(p.stderr.decode().split("ID: ")[1].split()[0])
        info = self.cluster.wait_state(job, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=30)
        took = time.time() - start
        out = self.logs(job)
        self.assertEqual(info["status"], "FAILED", out)
        self.assertEqual(info["end_reason"], "time_limit")
        self.assertIn(f"ERROR: Job {job} failed: it reached its time limit of 6s", info["message"])
        self.assertGreater(took, 5.5)
        self.assertLess(took, 12)
        usr1 = out.index("got USR1: saving")
        self.assertLess(out.index(f"herd: sending SIGUSR1 to every process of job {job}"), usr1)
        self.assertLess(usr1, out.index(f"herd: job {job} reached its time limit of 6s"))
        self.assertLess(usr1, out.index("got TERM"))
        self.assertEqual(info["exit_codes"], [0])  # it saved and exited 0; the limit still fails it

    def test_4_bad_limits_are_refused_at_submit(self):
        before = set(self.cluster.queue())
        path = write_task(self.tasks, "ok.yaml", "run: echo hi\n")
        for flags, words in [
            (["--hang-timeout", "0"], "the hang timeout must be positive"),
            (["--grace=-5"], "a duration cannot be negative"),
            (["--time-limit", "1m", "--signal", "USR1@"], "bad --signal 'USR1@'"),
            (["--time-limit", "1m", "--signal", "NOSUCH@5"], "unknown signal name"),
            (["--signal", "USR1@5"], "give --time-limit too"),
        ]:
            with self.subTest(flags=flags):
                p = run(self.exec_args(*flags, path), check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(words, p.stderr.decode())
        zero = write_task(self.tasks, "zero.yaml", "config: {herd: {hang_timeout: 0}}\nrun: echo\n")
        p = run(self.exec_args(zero), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("config.herd.hang_timeout: the hang timeout must be positive",
                      p.stderr.decode())
        p = self.cluster.herd("cancel", "--grace=-1", "1", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(set(self.cluster.queue()), before, "a refused submit queued a job")


HANG_PY = r"""
import datetime, os, sys, time
import torch
import torch.distributed as dist

rank = int(os.environ["SKYPILOT_NODE_RANK"])
master = os.environ["SKYPILOT_NODE_IPS"].split()[0]
dist.init_process_group("gloo", init_method=f"tcp://{master}:{os.environ['PORT']}", rank=rank,
                        world_size=int(os.environ["SKYPILOT_NUM_NODES"]),
                        timeout=datetime.timedelta(seconds=600))
t = torch.ones(4)
dist.all_reduce(t)
print(f"rank {rank}: first all_reduce done", flush=True)


def slow_data_loader():
    time.sleep(3600)


if rank == 1 and os.environ.get("STALL") == "1":
    slow_data_loader()
dist.all_reduce(t)
print(f"rank {rank}: second all_reduce done", flush=True)
if os.environ.get("STALL") != "1":
    time.sleep(3600)
"""


@unittest.skipUnless(has_torch(), "needs Debian's python3-torch")
class HungRankTest(RuntimeCase):
    CLUSTER, ADDRS = "hrh", ["127.0.181.3", "127.0.181.4"]

    def task(self, name, port, stall, extra=""):
        script = write_task(self.tasks, "hang.py", HANG_PY)
        return write_task(self.tasks, name, f"""
num_nodes: 2
{extra}
envs: {{PORT: "{port}", STALL: "{stall}"}}
run: timeout -k 5 300 /usr/bin/python3 {script}
""")

    def test_1_a_rank_sleeping_in_the_collective_is_named_and_the_job_ends(self):
        hang_timeout = 8
        path = self.task("hang.yaml", 29581, 1,
                         f"config: {{herd: {{hang_timeout: {hang_timeout}s}}}}")
        p = run(self.exec_args(path))
        job = int(p.stderr.decode().split("ID: ")[1].split()[0])
        out = self.wait_log(job, "rank 0: first all_reduce done", timeout=120)
        quiet_from = time.time()
        info = self.cluster.wait_state(job, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=120)
        ended = time.time() - quiet_from
        out = self.logs(job)
        self.assertEqual(info["status"], "FAILED", out[-4000:])
        self.assertEqual(info["end_reason"], "hung")
        self.assertLess(ended, hang_timeout + 20, "the hang was not caught near its timeout")
        self.assertIn("made no progress (no output, no CPU time) for 8s", out)
        # Every rank's stacks, under its own prefix: rank 0 waits in all_reduce, rank 1 sleeps in
        # its own function.
        self.assertRegex(out, r"\(head, rank=0, pid=\d+\)   File \".*distributed_c10d\.py\", "
                              r"line \d+ in all_reduce")
        self.assertRegex(out, r"\(worker1, rank=1, pid=\d+, ip=127\.0\.181\.4\)   File "
                              r"\".*hang\.py\", line \d+ in slow_data_loader")
        self.assertRegex(out, r"herd: rank 0 waits in all_reduce \(distributed_c10d\.py:\d+\); "
                              r"rank 1 differs: slow_data_loader \(hang\.py:\d+\)")
        self.assertIn("ranks that differ from the rest: 1", info["message"])
        self.assertEqual(self.cluster.leftovers(), [])

    def test_2_herd_stack_shows_a_running_job_without_stopping_it(self):
        path = self.task("stack.yaml", 29582, 0)
        p = run(self.exec_args(path))
        job = int(p.stderr.decode().split("ID: ")[1].split()[0])
        self.wait_log(job, "rank 1: second all_reduce done", timeout=120)
        self.wait_log(job, "rank 0: second all_reduce done", timeout=30)
        stacks = self.cluster.herd("stack", str(job), timeout=60).stdout.decode()
        self.assertRegex(stacks, r"\(head, rank=0, pid=\d+\)   File \".*hang\.py\", line \d+ in "
                                 r"<module>")
        self.assertRegex(stacks, r"\(worker1, rank=1, pid=\d+, ip=127\.0\.181\.4\) == pid \d+ "
                                 r"\(python3\): /usr/bin/python3 .*hang\.py")
        self.assertIn("herd: every rank stands at <module> (hang.py:", stacks)
        self.assertIn("herd: stacks of job", self.logs(job))  # written into the log too
        self.assertEqual(self.cluster.queue()[job]["status"], "RUNNING")
        self.cluster.herd("cancel", str(job))
        self.cluster.wait_state(job, {"CANCELLED"})
        p = self.cluster.herd("stack", str(job), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("is not running", p.stderr.decode())


if __name__ == "__main__":
    unittest.main(verbosity=2)
