"""Job arrays and dependencies as a user sees them, on a head and a worker on 127.0.33.2-3 (the
worker with 8 declared H200s, the head with none), submitted with the real CLI:

- `herd exec --array 0-9%3` queues 10 jobs in one request; each gets SKYPILOT_JOB_RANK,
  SKYPILOT_NUM_JOBS and HERD_ARRAY_INDEX; never more than 3 run at once although the worker's GPUs
  would hold 4; jobs that run together get disjoint CUDA_VISIBLE_DEVICES; `herd queue` shows the
  array as one line (`-r` one line per job) and a held-back job as PENDING with its reason.
- `--after` waits for a job to end, whatever its outcome; `--after-ok` runs after success and is
  CANCELLED, with the reason, after a failure; a dependency on the array's id waits for all of it.
- Bad arrays and dependencies are refused at submit with the flag named, and nothing is queued."""

import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import (HERD, LoopbackCluster, job_id_of, run,  # noqa: E402
                              write_task)

ADDRS = ["127.0.33.2", "127.0.33.3"]

# Appends "start|end <index> <CUDA_VISIBLE_DEVICES> <epoch ns>" to $EVENTS (one write each, under
# flock), prints its place in the array, holds its GPUs for a moment.
SWEEP = r"""name: sweep
resources:
  accelerators: H200:2
run: |
  ev() { flock "$EVENTS" sh -c "echo $1 $HERD_ARRAY_INDEX $CUDA_VISIBLE_DEVICES $(date +%s%N) >> $EVENTS"; }
  ev start
  echo "rank=$SKYPILOT_JOB_RANK of=$SKYPILOT_NUM_JOBS index=$HERD_ARRAY_INDEX array=$HERD_ARRAY_JOB_ID"
  sleep 1.5
  ev end
"""

# Waits for its gate file (at most 60 s), then exits with the code written in it.
GATED = r"""name: gated
run: |
  for i in $(seq 600); do [ -e "$GATE" ] && exit "$(cat "$GATE")"; sleep 0.1; done
  exit 3
"""


class ArrayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = LoopbackCluster("harr", ADDRS, gpus_per_node=[0, 8], gpu_name="H200", cpus=8)
        cls.tmp = cls.cluster.dir  # removed with the cluster

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def exec(self, *args, check=True):
        return run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env(), "-d", *args],
                   check=check)

    def task(self, name, body, **envs):
        text = body
        if envs:
            text += "envs:\n" + "".join(f"  {k}: {v}\n" for k, v in envs.items())
        return write_task(self.tmp, name + ".yaml", text)

    def wait(self, pred, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            queue = self.cluster.queue()
            if pred(queue):
                return queue
            time.sleep(0.2)
        raise AssertionError(f"{what}: {json.dumps(self.cluster.queue(), indent=1)}")

    def log(self, job):
        return self.cluster.herd("logs", "--no-follow", str(job), check=False).stdout.decode()

    def test_1_array_runs_every_index_within_its_limit_on_disjoint_gpus(self):
        events = os.path.join(self.tmp, "events")
        open(events, "w").close()
        p = self.exec("--array", "0-9%3", self.task("sweep", SWEEP, EVENTS=events))
        m = re.search(rb"Job array submitted, ID: (\d+) \(10 jobs, IDs (\d+)-(\d+)\)", p.stderr)
        self.assertIsNotNone(m, p.stderr)
        first, last = int(m.group(2)), int(m.group(3))
        self.assertEqual(last - first, 9)
        ids = list(range(first, last + 1))

        # While it runs: the held-back jobs say why, and the array is one line of `queue`.
        queue = self.wait(lambda q: sum(q[i]["status"] == "RUNNING" for i in ids) == 3,
                          "3 of the array's jobs running")
        pending = [i for i in ids if queue[i]["status"] == "PENDING"]
        self.assertTrue(pending)
        table = self.cluster.herd("queue").stdout.decode()
        self.assertRegex(table, rf"(?m)^{first}_\[0-9%3\]\s+sweep\s")
        self.assertRegex(table, r"3 RUNNING, \d+ PENDING")
        self.assertNotRegex(table, rf"(?m)^{ids[5]}\s")  # the array's jobs are not listed one by one
        expanded = self.cluster.herd("queue", "-r").stdout.decode()
        self.assertIn(f"{ids[9]} ({first}_9)", expanded)
        self.assertIn(f"PENDING (array {first} runs its limit of 3 jobs at once)", expanded)

        queue = self.wait(lambda q: all(q[i]["status"] == "SUCCEEDED" for i in ids),
                          "every job of the array SUCCEEDED")
        for k, i in enumerate(ids):
            j = queue[i]
            self.assertEqual((j["array_id"], j["array_index"], j["array_rank"], j["array_size"],
                              j["array"]), (first, k, k, 10, "0-9%3"))
            self.assertIn(f"rank={k} of=10 index={k} array={first}", self.log(i))

        # Never more than 3 at once; jobs that overlapped held different GPUs.
        with open(events) as f:
            lines = [line.split() for line in f.read().splitlines()]
        self.assertEqual(sorted(int(x[1]) for x in lines if x[0] == "start"), list(range(10)))
        running, most = {}, 0
        for kind, index, cvd, _ in sorted(lines, key=lambda x: int(x[3])):
            if kind == "start":
                held = {g for other in running.values() for g in other.split(",")}
                self.assertFalse(held & set(cvd.split(",")), f"index {index} got {cvd}; in use: {held}")
                self.assertEqual(len(cvd.split(",")), 2)
                running[index] = cvd
                most = max(most, len(running))
            else:
                del running[index]
        self.assertLessEqual(most, 3)
        self.assertGreaterEqual(most, 2)  # they did run side by side

    def test_2_dependencies_wait_and_after_ok_cancels_on_failure(self):
        gate_a = os.path.join(self.tmp, "gate-a")
        a = job_id_of(self.exec(self.task("a", GATED, GATE=gate_a)).stderr)
        b = job_id_of(self.exec("--after", str(a), "--", "echo b ran").stderr)
        c = job_id_of(self.exec("--after-ok", str(a), "--", "echo c ran").stderr)
        queue = self.wait(lambda q: q[a]["status"] == "RUNNING", "job a running")
        time.sleep(0.5)  # b and c would have started by now if nothing held them
        queue = self.cluster.queue()
        self.assertEqual(queue[b]["status"], "PENDING")
        self.assertEqual(queue[b]["after"], [a])
        self.assertEqual(queue[c]["after_ok"], [a])
        self.assertIn(f"waiting for job {a} (RUNNING) to end", queue[b]["message"])
        table = self.cluster.herd("queue").stdout.decode()
        self.assertIn(f"PENDING (waiting for job {a} (RUNNING) to end)", table)

        with open(gate_a, "w") as f:
            f.write("1")  # a fails
        queue = self.wait(lambda q: q[b]["status"] == "SUCCEEDED" and q[c]["status"] == "CANCELLED",
                          "b run after a failed, c cancelled")
        self.assertEqual(queue[a]["status"], "FAILED")
        self.assertIn("b ran", self.log(b))
        self.assertNotIn("c ran", self.log(c))
        self.assertIn(f"its dependency job {a} ended FAILED (--after-ok)", queue[c]["message"])
        self.assertIn(f"its dependency job {a} ended FAILED (--after-ok)", self.log(c))

        # --after-ok on an array's id: after all of its jobs succeeded.
        arr = self.exec("--array", "0-2", "--", "sleep 0.3")
        first = int(re.search(rb"Job array submitted, ID: (\d+)", arr.stderr).group(1))
        d = job_id_of(self.exec("--after-ok", str(first), "--", "echo d ran").stderr)
        queue = self.wait(lambda q: q[d]["status"] == "SUCCEEDED", "d after the array")
        last_end = max(queue[first + k]["ended_at_ms"] for k in range(3))
        self.assertGreaterEqual(queue[d]["started_at_ms"], last_end)

    def test_3_bad_arrays_and_dependencies_are_refused_and_nothing_is_queued(self):
        before = self.cluster.queue()
        next_id = max(before) + 1 if before else 1
        for args, want in [
            (["--array", "5-1"], "--array 5-1: the range 5-1 ends before it starts"),
            (["--array", "0-9%0"], "--array 0-9%0: the limit after % must be at least 1"),
            (["--array", "0-1000"], "an array holds at most 1000 jobs"),
            (["--after", "x"], "--after x: 'x' is not a job id"),
            (["--after", "99999"], "--after 99999: no job 99999 on this cluster"),
            (["--after-ok", str(next_id)], f"--after-ok {next_id}: no job {next_id} on this cluster"),
        ]:
            p = self.exec(*args, "--", "echo never", check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(want, p.stderr.decode(), args)
        self.assertEqual(self.cluster.queue().keys(), before.keys())


if __name__ == "__main__":
    unittest.main(verbosity=2)
