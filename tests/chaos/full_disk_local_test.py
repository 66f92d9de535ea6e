"""A full disk on a node of a `local` cluster (issue 7 item 6), as a user meets it: `herd launch`
makes two nodes (network, UTS and mount namespaces of their own, herdlet under its supervisor),
a 1 MiB tmpfs is mounted over the worker's log directory inside that node's mount namespace (over
ssh, as root on the node), and a job prints fast there. The job must end FAILED_DRIVER naming the
node, the path as the node sees it and "No space left on device" in `herd queue` and `herd logs`;
the agent must be the same process, alive, and run the next job once the tmpfs is gone. Then the
worker's herdlet is SIGKILLed under a running job: its supervisor starts it again, the new agent
adopts the job, every line arrives once."""

import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from herd_env import HerdEnvTestCase, netns_available  # noqa: E402
from survive_test import count_rank_lines  # noqa: E402

CLUSTER = "hchl"
WORKER = f"{CLUSTER}-worker1"
LOGS = "/root/.herd/agent/state/logs"  # the agent's log directory, as the node sees it
NO_SPACE = "No space left on device"


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class LocalFullDiskTest(HerdEnvTestCase):
    ENV_PREFIX = CLUSTER
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        cls.mounted = False

    @classmethod
    def launch_args(cls):
        return ("launch", "-c", CLUSTER, "-y", "--num-nodes", "2", "--", "true")

    @classmethod
    def after_launch(cls):
        print(f"\nlaunch of 2 local nodes: {cls.launch_seconds:.1f} s", file=sys.stderr)

    @classmethod
    def close_env(cls):
        if cls.mounted:
            cls.h.ssh(WORKER, f"umount -l {LOGS}")
        super().close_env()

    def task(self, name, body):
        path = os.path.join(self.h.dir, name)
        with open(path, "w") as f:
            f.write(body)
        return path

    def queue(self):
        return {j["id"]: j for j in json.loads(self.h.herd("queue", CLUSTER, "-o", "json").stdout)}

    def wait_state(self, job, states, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.queue().get(job)
            if j and j["status"] in states:
                return j
            time.sleep(0.2)
        self.fail(f"job {job} not in {states}: {self.queue().get(job)}")

    def submit(self, name, body):
        p = self.h.herd("exec", CLUSTER, "-d", self.task(name, body))
        return int(re.search(rb"Job submitted, ID: (\d+)", p.stderr).group(1))

    def agent_pid(self):
        p = self.h.ssh(WORKER, "cat .herd/agent/herdlet.pid")
        self.assertEqual(p.returncode, 0, p.stderr)
        return int(p.stdout.strip())

    def test_a_full_log_dir_fails_the_job_and_the_agent_runs_the_next(self):
        pid = self.agent_pid()
        p = self.h.ssh(WORKER, f"mkdir -p {LOGS} && mount -t tmpfs -o size=1m herd-full {LOGS}")
        self.assertEqual(p.returncode, 0, p.stderr)
        type(self).mounted = True
        try:
            t0 = time.time()
            job = self.submit("fill.yaml", (
                "num_nodes: 2\nrun: |\n"
                "  case $(hostname) in *-worker1) yes 'a line of a job that fills the disk' ;;\n"
                "    *) sleep 1000 ;;\n  esac\n"))
            info = self.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER"}, 30)
            print(f"\nfull disk on {WORKER}: {info['status']} {time.time() - t0:.1f} s after "
                  f"submit: {info['message']}", file=sys.stderr)
            self.assertEqual(info["status"], "FAILED_DRIVER", info)
            self.assertRegex(info["message"],
                             rf"node {WORKER} \(rank 1\) could not store its output and was "
                             rf"stopped: cannot write {LOGS}/\S+: {NO_SPACE}$")
            logs = self.h.herd("logs", CLUSTER, str(job), check=False).stdout.decode()
            self.assertIn(info["message"], logs)
            self.assertRegex(logs, rf"\(worker1, rank=1, pid=\d+[^)]*\) herd: cannot write {LOGS}/")
            # The head's node had nothing full: its rank was killed, not stopped by a disk.
            self.assertEqual(info["exit_codes"][0], 137)
        finally:
            p = self.h.ssh(WORKER, f"umount -l {LOGS}")
            type(self).mounted = p.returncode != 0
        self.assertEqual(p.returncode, 0, p.stderr)
        # The same agent, up all along; the next job runs on both nodes.
        self.assertEqual(self.agent_pid(), pid)
        self.assertEqual(self.h.ssh(WORKER, f"kill -0 {pid}").returncode, 0)
        p = self.h.herd("exec", CLUSTER, "--num-nodes", "2", "--", "echo", "again",
                        "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 1\n", p.stdout)

    def test_b_agent_killed_9_is_restarted_by_its_supervisor_and_adopts(self):
        per_rank = 400
        job = self.submit("count.yaml", (
            "num_nodes: 2\nrun: |\n"
            f"  for i in $(seq 1 {per_rank}); do echo \"r$SKYPILOT_NODE_RANK $i\"\n"
            "    if [ $((i % 20)) = 0 ]; then sleep 0.2; fi; done\n"))
        deadline = time.time() + 30
        while b") r1 1\n" not in self.h.herd("logs", CLUSTER, str(job), "--no-follow",
                                             check=False).stdout:
            self.assertLess(time.time(), deadline)
            time.sleep(0.2)
        pid = self.agent_pid()
        self.assertEqual(self.h.ssh(WORKER, f"kill -9 {pid}").returncode, 0)
        final = self.h.herd("logs", CLUSTER, str(job), timeout=120, check=False)
        self.assertEqual(self.queue()[job]["status"], "SUCCEEDED")
        text = final.stdout.decode(errors="replace")
        for rank in (0, 1):
            self.assertIsNone(count_rank_lines(text, rank, per_rank))
        self.assertNotEqual(self.agent_pid(), pid)  # a new agent, started by the supervisor


if __name__ == "__main__":
    unittest.main(verbosity=2)
