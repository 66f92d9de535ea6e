"""What a user sees after a fault, on a 2-node local cluster (hfs): a worker whose agent is killed
with its supervisor makes `herd status` show INIT naming the node, a 2-node `herd exec` fails at
once saying which node is missing and how to bring it back, and `herd start` does bring it back; a
herdlet stopped with SIGTERM (nothing restarts it then) shows as STOPPED in `herd nodes` with the
reason and the command that starts it again; a herdlet that crashes is restarted by its supervisor
and never shows as stopped."""

import json
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, netns_available, pids_by_cmdline  # noqa: E402

CLUSTER = "hfs"
WORKER = f"{CLUSTER}-worker1"
# kNodeLossReportedWithin in shared/common/limits.hpp: a silent node is lost within this.
NODE_LOST_WITHIN = 10.0
# A refused exec answers in well under a second here; a hanging one never would.
REFUSED_WITHIN = 10.0
# kStatusHeadTimeout in shared/common/limits.hpp: status waits no longer for a head.
STATUS_HEAD_TIMEOUT = 3.0


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class FaultStatesTest(HerdEnvTestCase):
    ENV_PREFIX = "hfs"
    CLUSTER = CLUSTER

    @classmethod
    def launch_args(cls):
        return ("launch", "-c", CLUSTER, "--num-nodes", "2", "-y")

    @classmethod
    def check_nothing_left(cls):
        # Stopping agents that try to say goodbye to a head going away too costs no wait.
        assert cls.close_seconds < 30, f"down took {cls.close_seconds:.1f} s"

    def setUp(self):
        # Each test starts from a whole cluster, whatever the one before it left.
        if 0 in self.worker_pids():
            self.h.herd("start", CLUSTER)
        self.wait("every node UP", lambda: all(
            n["alive"] for n in json.loads(self.h.herd("nodes", CLUSTER, "-o", "json").stdout)), 15)

    def status(self):
        return {c["name"]: c for c in json.loads(self.h.herd("status", "-o", "json").stdout)}

    def nodes(self):
        return {n["node_id"]: n for n in json.loads(
            self.h.herd("nodes", CLUSTER, "-o", "json").stdout)}

    def job(self, job_id):
        return {j["id"]: j for j in json.loads(
            self.h.herd("queue", CLUSTER, "-o", "json").stdout)}[job_id]

    def worker_pids(self):
        """herdlet's and its supervisor's pids on the worker node (0 for one not running)."""
        p = self.h.ssh(WORKER, "cd .herd/agent && for f in herdlet.pid supervise.pid; do "
                               "p=$(cat $f 2>/dev/null || echo 0); "
                               "if [ -d /proc/$p ] && [ $p != 0 ]; then echo $p; else echo 0; fi; "
                               "done")
        self.assertEqual(p.returncode, 0, p.stderr)
        herdlet, supervisor = (int(x) for x in p.stdout.split())
        return herdlet, supervisor

    def wait(self, what, predicate, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = predicate()
            if got:
                return got
            time.sleep(0.2)
        self.fail(f"{what} not within {timeout} s")

    def bring_back(self):
        p = self.h.herd("start", CLUSTER)
        self.assertIn(f"Cluster {CLUSTER} is UP.", p.stderr.decode())
        c = self.status()[CLUSTER]
        self.assertEqual((c["status"], c["lost_nodes"]), ("UP", []))
        self.assertEqual({n["status"] for n in self.nodes().values()}, {"UP"})

    def test_a_lost_agent_shows_init_refuses_exec_and_herd_start_brings_it_back(self):
        herdlet, supervisor = self.worker_pids()
        self.assertTrue(herdlet and supervisor)
        k = self.h.ssh(WORKER, f"kill -9 {supervisor} {herdlet}")
        self.assertEqual(k.returncode, 0, k.stderr)
        killed_at = time.time()

        c = self.wait("status INIT", lambda: (lambda c: c if c["status"] == "INIT" else None)(
            self.status()[CLUSTER]), NODE_LOST_WITHIN + 5)
        self.assertLess(time.time() - killed_at, NODE_LOST_WITHIN + 3)
        self.assertEqual(c["lost_nodes"], [WORKER])
        self.assertTrue(c["head_answered"])
        table = self.h.herd("status").stdout.decode()
        self.assertRegex(table, rf"\n{CLUSTER} .* INIT .* worker1 lost\s*\n")
        self.assertIn(f"start them again with: herd start {CLUSTER}", table)
        self.assertEqual(self.nodes()[WORKER]["status"], "LOST")

        t0 = time.time()
        p = self.h.herd("exec", CLUSTER, "--num-nodes", "2", "--", "hostname", check=False,
                        timeout=60)
        took = time.time() - t0
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertLess(took, REFUSED_WITHIN, err)
        self.assertRegex(err, rf"the task cannot run now: it needs 2 nodes and only 1 of those "
                              rf"that could hold it is up; {WORKER} is lost \(no message from its "
                              rf"agent for \d+ s\)\. Start its agent again with `herd start "
                              rf"{CLUSTER}`")
        self.assertNotIn("Waiting for task resources", err)
        # A job that fits on the nodes still up runs.
        one = self.h.herd("exec", CLUSTER, "--", "hostname", timeout=60)
        self.assertIn(f"{CLUSTER}-head", one.stdout.decode())

        self.bring_back()
        p = self.h.herd("exec", CLUSTER, "--num-nodes", "2", "--", "hostname", timeout=120)
        out = p.stdout.decode()
        self.assertIn(f"{CLUSTER}-head", out)
        self.assertIn(WORKER, out)

    def test_b_sigterm_shows_stopped_with_the_reason_and_the_restart_command(self):
        herdlet, supervisor = self.worker_pids()
        self.assertTrue(herdlet and supervisor)
        k = self.h.ssh(WORKER, f"kill -TERM {herdlet}")  # an operator's kill of the agent alone
        self.assertEqual(k.returncode, 0, k.stderr)
        node = self.wait("STOPPED", lambda: (lambda n: n if n["status"] == "STOPPED" else None)(
            self.nodes()[WORKER]), 5)
        # Submitted at once (the node may be an agent restarting): queued, not refused.
        p = self.h.herd("exec", CLUSTER, "-d", "--num-nodes", "2", "--", "hostname", timeout=60)
        job = int(re.search(r"Job submitted, ID: (\d+)", p.stderr.decode()).group(1))
        self.assertEqual(node["stopped_reason"], f"herdlet (pid {herdlet}) received SIGTERM")
        self.assertEqual(node["restart_command"], f"herd start {CLUSTER}")
        self.assertFalse(node["alive"])
        table = self.h.herd("nodes", CLUSTER).stdout.decode()
        self.assertRegex(table, rf"{WORKER} .* STOPPED\s*\n")
        self.assertRegex(table, rf"{WORKER} is stopped: herdlet \(pid {herdlet}\) received "
                                rf"SIGTERM \d+ secs ago; nothing restarts it by itself\. Start "
                                rf"its agent again with: herd start {CLUSTER}\n")
        # As herdlet.service's Restart=on-failure: the supervisor does not restart a clean stop.
        self.wait("the supervisor to end", lambda: self.worker_pids() == (0, 0), 10)
        c = self.status()[CLUSTER]
        self.assertEqual((c["status"], c["lost_nodes"]), ("INIT", [WORKER]))
        # Once the node counts as lost, the queued job says what it waits for and how to end that.
        queued = self.wait("the job's waiting message", lambda: (
            lambda j: j if "is waiting" in j["message"] else None)(self.job(job)), NODE_LOST_WITHIN)
        self.assertEqual(queued["status"], "PENDING")
        self.assertIn(f"{WORKER} is stopped (herdlet (pid {herdlet}) received SIGTERM, no "
                      "message from its agent for ", queued["message"])
        self.assertIn(f"Start its agent again with `herd start {CLUSTER}`", queued["message"])
        self.bring_back()
        # ... and runs once the node is back.
        done = self.wait("the job to end", lambda: (
            lambda j: j if j["status"] not in ("PENDING", "SETTING_UP", "RUNNING") else None)(
            self.job(job)), 60)
        self.assertEqual((done["status"], done["message"]), ("SUCCEEDED", ""))
        log = self.h.herd("logs", CLUSTER, str(job)).stdout.decode()
        self.assertIn(f"Job {job} is waiting: it needs 2 nodes", log)
        self.assertRegex(log, rf"\(worker1, rank=1, pid=\d+[^)]*\) {WORKER}\n")

    def test_c_a_crashed_herdlet_is_restarted_by_its_supervisor_never_stopped(self):
        herdlet, supervisor = self.worker_pids()
        self.assertTrue(herdlet and supervisor)
        k = self.h.ssh(WORKER, f"kill -9 {herdlet}")
        self.assertEqual(k.returncode, 0, k.stderr)
        new = self.wait("a new herdlet", lambda: (lambda p: p if p[0] not in (0, herdlet) else None)(
            self.worker_pids()), 10)
        self.assertEqual(new[1], supervisor)
        self.wait("the node UP", lambda: self.nodes()[WORKER]["status"] == "UP", 10)
        self.assertNotIn("stopped_reason", self.nodes()[WORKER])
        self.assertEqual(self.status()[CLUSTER]["status"], "UP")

    def test_d_a_head_that_does_not_answer_costs_status_a_bounded_wait(self):
        p = self.h.ssh(CLUSTER, "cat .herd/agent/herdlet.pid")
        self.assertEqual(p.returncode, 0, p.stderr)
        head_agent = int(p.stdout.strip())
        os.kill(head_agent, signal.SIGSTOP)  # hung: its connections stay open, nothing answers
        try:
            t0 = time.time()
            c = self.status()[CLUSTER]
            took = time.time() - t0
            table = self.h.herd("status").stdout.decode()
        finally:
            os.kill(head_agent, signal.SIGCONT)
        self.assertLess(took, STATUS_HEAD_TIMEOUT + 2)
        self.assertEqual((c["status"], c["head_answered"]), ("INIT", False))
        self.assertIn("did not answer within", c["head_error"])
        self.assertRegex(table, rf"\n{CLUSTER} .* INIT .* head not answering\s*\n")
        # Nothing of the question is left running.
        self.assertEqual(pids_by_cmdline(lambda argv: argv[0].endswith(b"herd") and
                                         b"status" in argv), [])
        self.wait("status UP", lambda: self.status()[CLUSTER]["status"] == "UP", 10)

    def test_e_stop_and_start_are_not_held_up_by_agents_saying_goodbye(self):
        t0 = time.time()
        self.h.herd("stop", CLUSTER)
        took = time.time() - t0
        self.assertEqual(self.status()[CLUSTER]["status"], "STOPPED")
        # Every agent stops on its SIGTERM (Leaving, at most kAgentLeaveTimeout each, in
        # parallel), not on the SIGKILL kAgentStopTimeout later.
        self.assertLess(took, 8)
        self.bring_back()


if __name__ == "__main__":
    unittest.main(verbosity=2)
