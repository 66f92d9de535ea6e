"""One-node recovery (issue 26 item 3) end to end on a `local` netns cluster, as a user drives it:
a 3-node managed job whose worker node dies (every process in its namespace SIGKILLed) is
recovered on the same cluster: the head answers and only that worker is lost, so the lost node is
made again by the provider and only its agent is started, the survivors' agents (the same herdlet
processes) and addresses stay, every rank keeps its SKYPILOT_NODE_RANK (the replacement in the
lost rank), the run resumes from its checkpoint and the job SUCCEEDS with one recovery shown by
`herd jobs queue`. The head sees the killed agent's connection closed by its kernel: the node is
lost after kNodeClosedGrace (2.5 s), not after kNodeLostAfter (8 s) of silence. Cluster names start
with `hon`."""

import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import recovery_job  # noqa: E402
from herd_env import (HerdEnvTestCase, herdlets_in, kill_managed_controllers,  # noqa: E402
                      kill_netns, launch_managed, namespaces_of, netns_available,
                      wait_managed)

STEPS = 40  # checkpointed steps of 0.5 s
NODES = 3
# The killed node's agent connection ends at once: lost after kNodeClosedGrace (2.5 s) and the next
# node check (0.5 s); RECOVERING a controller's poll later. Well under kNodeLostAfter (8 s) plus
# that, with room for a loaded machine's scheduling.
RECOVERING_WITHIN = 7.5


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class OneNodeRecoveryTest(HerdEnvTestCase):
    ENV_PREFIX = "hon"

    @classmethod
    def prepare_env(cls):
        cls.ckpt = os.path.join(cls.h.dir, "ckpt")  # a host directory every local node sees
        os.makedirs(cls.ckpt)

    @classmethod
    def close_env(cls):
        try:
            kill_managed_controllers(cls.h)  # they would relaunch what `down` removes
        finally:
            super().close_env()

    @classmethod
    def check_nothing_left(cls):
        left = namespaces_of("hon")
        assert left == [], left

    def test_a_lost_worker_is_replaced_alone_and_every_rank_keeps_its_rank(self):
        path = os.path.join(self.h.dir, "job.yaml")
        with open(path, "w") as f:
            f.write(recovery_job.task_yaml("hon-job", NODES, self.ckpt, STEPS))
        t0 = time.time()
        job_id = launch_managed(self.h, path)
        j, _, _ = wait_managed(self.h, job_id, lambda j: j["status"] == "RUNNING", 120, "RUNNING")
        cluster = j["cluster"]
        self.assertEqual(cluster, f"hon-job-{job_id}-1")
        task_id = j["task_id"]
        deadline = time.time() + 60
        while recovery_job.step(self.ckpt, task_id) < 4:
            self.assertLess(time.time(), deadline,
                            f"no step 4 checkpoint:\n{self.h.controller_log(job_id)}")
            time.sleep(0.1)
        before = recovery_job.attempts(self.ckpt, task_id)[1]
        self.assertEqual(sorted(before), list(range(NODES)))
        ns = {i: f"herd-{cluster}-{i}" for i in range(NODES)}
        agents = {i: herdlets_in(ns[i]) for i in range(NODES)}
        for i in range(NODES):
            self.assertTrue(agents[i], f"no herdlet in {ns[i]}")

        # Worker 1 (rank 1) dies: every process in its namespace, as a machine that is gone.
        lost_rank = 1
        self.assertEqual(before[lost_rank]["host"], f"{cluster}-worker1")
        self.assertTrue(kill_netns(ns[lost_rank]))
        killed_at = time.time()

        j, recovering_at, seen = wait_managed(self.h, job_id,
                                              lambda j: j["status"] == "RECOVERING", 60,
                                              "RECOVERING")
        j, running_at, seen2 = wait_managed(self.h, job_id, lambda j: j["status"] == "RUNNING",
                                            120, "RUNNING again")
        deadline = time.time() + 60
        while len(recovery_job.attempts(self.ckpt, task_id).get(2, {})) < NODES:
            self.assertLess(time.time(), deadline,
                            f"attempt 2 not on every rank:\n{self.h.controller_log(job_id)}")
            time.sleep(0.05)
        all_running_at = max(r["t"] for r in recovery_job.attempts(self.ckpt, task_id)[2].values())

        # The same cluster, one recovery, shown by `herd jobs queue`.
        self.assertEqual(j["cluster"], cluster)
        self.assertEqual(j["recoveries"], 1)
        table = self.h.herd("jobs", "queue").stdout.decode()
        self.assertRegex(table, rf"\n{job_id}\s+hon-job\s.*\s1\s+RUNNING\s+{cluster}")
        self.assertIn(f"{cluster}-worker1", j["attempts"][0]["reason"])
        self.assertIn("alone", j["attempts"][0]["reason"])
        # Survivors: the same agents (processes), addresses and ranks; the lost rank on the node
        # made again in its place, with a new agent.
        after = recovery_job.attempts(self.ckpt, task_id)[2]
        for rank in range(NODES):
            self.assertEqual(after[rank]["host"], before[rank]["host"], (rank, before, after))
            self.assertEqual(after[rank]["ip"], before[rank]["ip"], (rank, before, after))
        for i in range(NODES):
            if i != lost_rank:
                self.assertEqual(herdlets_in(ns[i]), agents[i], f"{ns[i]}'s agent was replaced")
        new_agents = herdlets_in(ns[lost_rank])
        self.assertTrue(new_agents)
        self.assertFalse(set(new_agents) & set(agents[lost_rank]))

        j, _, _ = wait_managed(self.h, job_id,
                               lambda j: j["status"] not in ("RUNNING", "RECOVERING"), 120,
                               "the end")
        self.assertEqual(j["status"], "SUCCEEDED", self.h.controller_log(job_id))
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"])
        self.assertEqual([a["cluster"] for a in j["attempts"]], [cluster, cluster])
        self.assertEqual(recovery_job.step(self.ckpt, task_id), STEPS)
        logs = self.h.herd("jobs", "logs", str(job_id), check=False)
        out = logs.stdout.decode()
        self.assertEqual(logs.returncode, 0, out[-3000:])
        resumed = int(re.search(r"resuming at step (\d+) \(attempt 2\)", out).group(1))
        self.assertGreaterEqual(resumed, 4)  # from the checkpoint, not from step 0
        # The head saw the agent's connection end: lost without waiting out kNodeLostAfter.
        self.assertLess(recovering_at - killed_at, RECOVERING_WITHIN, seen)
        self.assertEqual([c for c in self.h.clusters() if c.startswith("hon-job")], [])
        print(f"\nworker lost -> RECOVERING {recovering_at - killed_at:.1f} s, -> RUNNING again "
              f"{running_at - killed_at:.1f} s, every rank running again "
              f"{all_running_at - killed_at:.1f} s; resumed at step {resumed}; whole job "
              f"{time.time() - t0:.1f} s; states {seen + seen2}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
