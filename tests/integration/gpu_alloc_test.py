"""Per-job GPU allocation, as a user sees it: a head and a worker on 127.0.30.2-3 with 8 GPUs each
(the head's found through NVML, the fake libnvidia-ml.so.1 on the agent's library path; the
worker's declared with `gpus: 8`), jobs submitted with the real `herd --endpoint` CLI. Two 4-GPU
jobs run at once on disjoint CUDA_VISIBLE_DEVICES; an 8-GPU job waits PENDING until both ended,
then gets all 8; SKYPILOT_NUM_GPUS_PER_NODE says each job's count. A job no node could ever hold
(9 GPUs, or a type no node has) is refused at submit, and nothing is queued."""

import os
import re
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import HERD, LoopbackCluster, job_id_of, run  # noqa: E402

ADDRS = ["127.0.30.2", "127.0.30.3"]
FAKE_NVML = os.environ.get("FAKE_NVML", "")

# Prints what the job was given, then waits (at most 120 s) for its gate file.
RUN = r"""
echo "CVD=${CUDA_VISIBLE_DEVICES-<unset>} NGPU=$SKYPILOT_NUM_GPUS_PER_NODE"
for i in $(seq 1200); do [ -e "$GATE" ] && exit 0; sleep 0.1; done
exit 3
"""


@unittest.skipUnless(FAKE_NVML, "FAKE_NVML not set (the fake libnvidia-ml.so.1)")
class GpuAllocTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="herd-hgpu-")
        self.cluster = LoopbackCluster(
            "hgpu", ADDRS, gpus_per_node=[None, 8], gpu_name="H200", cpus=8,
            agent_env={"LD_LIBRARY_PATH": os.path.dirname(FAKE_NVML),
                       "FAKE_NVML_GPUS": ",".join(["NVIDIA H200"] * 8)})

    def tearDown(self):
        self.cluster.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def submit(self, name, gpus):
        task = os.path.join(self.tmp, name + ".yaml")
        with open(task, "w") as f:
            f.write(f"name: {name}\nnum_nodes: 2\nresources:\n  accelerators: H200:{gpus}\n"
                    f"envs:\n  GATE: {os.path.join(self.tmp, name + '.gate')}\n"
                    "run: |\n" + "".join("  " + line + "\n" for line in RUN.strip().splitlines()))
        p = run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env(), "-d", task])
        return job_id_of(p.stderr)

    def release(self, name):
        open(os.path.join(self.tmp, name + ".gate"), "w").close()

    def given(self, job):
        """{rank: (CUDA_VISIBLE_DEVICES, SKYPILOT_NUM_GPUS_PER_NODE)} once both ranks printed."""
        deadline = time.time() + 30
        while time.time() < deadline:
            out = self.cluster.herd("logs", "--no-follow", str(job), check=False).stdout.decode()
            found = {}
            for m in re.finditer(r"^\((?:head|worker1), rank=(\d), pid=\d+(?:, ip=[\d.]+)?\) "
                                 r"CVD=(\S+) NGPU=(\d+)$", out, re.M):
                found[int(m.group(1))] = (m.group(2), int(m.group(3)))
            if len(found) == 2:
                return found
            time.sleep(0.1)
        raise AssertionError(f"job {job} did not print its GPUs:\n{out}")

    def test_two_4_gpu_jobs_share_8_gpus_and_an_8_gpu_job_waits(self):
        nodes = self.cluster.nodes()
        self.assertEqual([n["gpus"] for n in nodes], [8, 8])
        self.assertEqual([n["gpu_source"] for n in nodes], ["nvml", "declared"])

        a = self.submit("four-a", 4)
        b = self.submit("four-b", 4)
        self.cluster.wait_state(a, {"RUNNING"})
        self.cluster.wait_state(b, {"RUNNING"})
        queue = self.cluster.queue()
        self.assertEqual((queue[a]["status"], queue[b]["status"]), ("RUNNING", "RUNNING"))
        got_a, got_b = self.given(a), self.given(b)
        for rank in (0, 1):
            ids_a = set(got_a[rank][0].split(","))
            ids_b = set(got_b[rank][0].split(","))
            self.assertEqual(len(ids_a), 4, got_a)
            self.assertEqual(len(ids_b), 4, got_b)
            self.assertEqual(ids_a & ids_b, set(), (got_a, got_b))  # disjoint on each node
            self.assertEqual(ids_a | ids_b, {str(i) for i in range(8)})
            self.assertEqual((got_a[rank][1], got_b[rank][1]), (4, 4))

        big = self.submit("eight", 8)
        time.sleep(1.5)  # several scheduling rounds: it must still wait
        self.assertEqual(self.cluster.queue()[big]["status"], "PENDING")

        # More GPUs than any node has, or a type no node has, can never run: refused by the head
        # at submit with the reason, and nothing queued (an 8-GPU job, above, waits instead).
        before = set(self.cluster.queue())
        for gpus, why in (("H200:9", "9 GPU(s) of type H200"), ("A100:1", "1 GPU(s) of type A100")):
            task = os.path.join(self.tmp, "never.yaml")
            with open(task, "w") as f:
                f.write(f"name: never\nresources:\n  accelerators: {gpus}\nrun: echo ran\n")
            p = run([HERD, "exec", *self.cluster.target(), "-d", task], check=False)
            err = p.stderr.decode()
            self.assertNotEqual(p.returncode, 0, err)
            self.assertIn("the task cannot run on this cluster", err)
            self.assertIn("cannot run on this cluster: task needs 1 node(s) with " + why, err)
            self.assertIn("gpus=8 x NVIDIA H200", err)  # the nodes it has, in the same words
            self.assertNotIn("Job submitted", err)
        self.assertEqual(set(self.cluster.queue()), before)

        self.release("four-a")
        self.assertEqual(self.cluster.wait_state(a, {"SUCCEEDED", "FAILED"})["status"],
                         "SUCCEEDED")
        time.sleep(1.0)  # 4 GPUs per node are free now: still not enough
        queue = self.cluster.queue()
        self.assertEqual((queue[b]["status"], queue[big]["status"]), ("RUNNING", "PENDING"))

        self.release("four-b")
        self.cluster.wait_state(big, {"RUNNING"})
        got = self.given(big)
        for rank in (0, 1):
            self.assertEqual(got[rank], (",".join(str(i) for i in range(8)), 8))
        self.release("eight")
        self.assertEqual(self.cluster.wait_state(big, {"SUCCEEDED", "FAILED"})["status"],
                         "SUCCEEDED")
        self.assertEqual(self.cluster.queue()[b]["status"], "SUCCEEDED")


if __name__ == "__main__":
    unittest.main()
