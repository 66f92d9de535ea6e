"""Jobs that survive their agents (issue 7): a head and two workers on 127.0.40.1-3 from the real
binaries, driven with the real `herd` CLI. Agent restarts (one of them an in-place upgrade) are
adopted (same pids, every line once), a dropped connection (ss -K) and a stall lose nothing,
a lost node fails its job within limits::kNodeLossReportedWithin naming node and rank, and lines of
local processes sharing one stdout stay whole."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import (HERD, ClusterTestCase, LoopbackCluster, VethNamespace,  # noqa: E402
                              job_id_of, run, write_task)

ADDRS = ["127.0.40.1", "127.0.40.2", "127.0.40.3"]
# Lines of the "nothing lost" job, over both ranks (issue 7 item 4: 1 M lines).
TOTAL_LINES = int(os.environ.get("HERD_SURVIVE_LINES", "1000000"))
# kNodeLossReportedWithin in shared/common/limits.hpp.
NODE_LOSS_REPORTED_WITHIN = 10.0


def count_rank_lines(text, rank, per_rank):
    """Checks that rank's lines are exactly 1..per_rank once each, in order; returns problems."""
    got = []
    for line in text.splitlines():
        m = re.match(r"\(\w+, rank=%d, pid=\d+[^)]*\) r%d (\d+)$" % (rank, rank), line)
        if m:
            got.append(int(m.group(1)))
    if got == list(range(1, per_rank + 1)):
        return None
    seen = set()
    dups = sum(1 for x in got if x in seen or seen.add(x))
    missing = per_rank - len(set(got))
    return f"rank {rank}: {len(got)} lines, {missing} missing, {dups} duplicated"


class SurviveTest(ClusterTestCase):
    CLUSTER, ADDRS = "hadp", ADDRS

    def log(self, job):
        return self.cluster.herd("logs", "--no-follow", str(job), check=False).stdout.decode(
            errors="replace")

    def wait_log(self, job, pattern, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.log(job))
            if m:
                return m
            time.sleep(0.1)
        self.fail(f"{pattern!r} not in the log of job {job}:\n{self.log(job)[-2000:]}")

    def drop_connections(self, worker_addr):
        """Aborts every TCP connection between the worker's address and the head's port."""
        head, port = ADDRS[0], str(self.cluster.port)
        run(["ss", "-K", "src", worker_addr, "dst", head, "dport", "=", port])
        run(["ss", "-K", "src", head, "sport", "=", port, "dst", worker_addr])

    def test_nothing_lost_across_agent_restarts_client_reattach_and_a_stall(self):
        per_rank = TOTAL_LINES // 2
        batches = 10
        size = per_rank // batches
        job = self.submit("lossless", (
            "num_nodes: 2\nrun: |\n"
            f"  for b in $(seq 0 {batches - 1}); do\n"
            f"    seq $((b*{size}+1)) $((b*{size}+{size})) | sed \"s/^/r$SKYPILOT_NODE_RANK /\"\n"
            "    sleep 0.5\n"
            "  done\n"
            "  printf \"unterminated r$SKYPILOT_NODE_RANK\"\n"))
        t0 = time.time()
        m = self.wait_log(job, r"rank=1, pid=(\d+)[^)]*\) r1 1\n")
        pid = int(m.group(1))
        clients = []
        try:
            # Clients come and go while it runs (each killed, a new one attached).
            for _ in range(3):
                c = subprocess.Popen([HERD, "logs", *self.cluster.target(), str(job)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                clients.append(c)
                time.sleep(0.3)
                c.kill()
            self.cluster.restart_agent(1)  # the worker agent, twice
            self.assertIn(pid, self.cluster.leftovers("lossless"))  # adopted, not restarted
            time.sleep(1)
            # The second restart is an in-place upgrade: another herdlet binary takes over.
            upgraded = os.path.join(self.tasks, "herdlet-upgraded")
            shutil.copy2(shutil.which(os.environ.get("HERDLET", "herdlet")), upgraded)
            self.cluster.restart_agent(1, binary=upgraded)
            # Its link drops: both ends of its connection to the head are aborted (ss -K), three
            # times; the agent redials and the head fetches what it missed.
            for _ in range(3):
                self.drop_connections(ADDRS[1])
                time.sleep(0.5)
            # The worker stalls (SIGSTOP: no FIN, no heartbeat) for less than kNodeLostAfter.
            os.kill(self.cluster.procs[1].pid, signal.SIGSTOP)
            time.sleep(2)
            os.kill(self.cluster.procs[1].pid, signal.SIGCONT)
            final = subprocess.run([HERD, "logs", *self.cluster.target(), str(job)],
                                   capture_output=True, timeout=240)
        finally:
            os.kill(self.cluster.procs[1].pid, signal.SIGCONT)
            for c in clients:
                c.wait()
        elapsed = time.time() - t0
        print(f"\n{TOTAL_LINES} lines over 2 ranks with 2 agent restarts: {elapsed:.1f} s",
              file=sys.stderr)
        self.assertEqual(final.returncode, 0, final.stderr[-2000:])
        self.assertEqual(self.cluster.queue()[job]["status"], "SUCCEEDED")
        for text in (final.stdout.decode(errors="replace"), self.log(job)):
            for rank in (0, 1):
                self.assertIsNone(count_rank_lines(text, rank, per_rank))
                # The last, unterminated line, delivered (ended with a newline by the head).
                self.assertEqual(text.count(f"unterminated r{rank}\n"), 1)
        self.assertEqual(self.cluster.agent_log(1).count(", 1 adopted"), 2)  # both restarts
        # The dropped connections were noticed (and the agent came back each time).
        self.assertIn("connection to head lost", self.cluster.agent_log(1).split(", 1 adopted")[-1])

    def test_head_stopped_for_20_s_loses_nothing(self):
        """Chaos (issue 7 item 6): the head's herdlet is SIGSTOPped for 20 s while a 2-node job
        prints. The agents' connections time out meanwhile; after SIGCONT the head must not take
        its own silence for lost nodes (limits::kHeadStallAfter): the agents re-register and the
        job ends SUCCEEDED with every line once."""
        self.cluster.wait_nodes(3, timeout=30)
        per_rank = 60
        job = self.submit("headstall", (
            "num_nodes: 2\nrun: |\n"
            f"  for i in $(seq 1 {per_rank}); do echo r$SKYPILOT_NODE_RANK $i; sleep 0.5; done\n"))
        self.wait_log(job, r"rank=1, pid=\d+[^)]*\) r1 1\n")
        head = self.cluster.procs[0].pid
        os.kill(head, signal.SIGSTOP)
        try:
            time.sleep(20)
        finally:
            os.kill(head, signal.SIGCONT)
        final = subprocess.run([HERD, "logs", *self.cluster.target(), str(job)],
                               capture_output=True, timeout=120)
        self.assertEqual(final.returncode, 0, final.stderr[-2000:])
        self.assertEqual(self.cluster.queue()[job]["status"], "SUCCEEDED")
        text = final.stdout.decode(errors="replace")
        for rank in (0, 1):
            self.assertIsNone(count_rank_lines(text, rank, per_rank))
        self.assertIn("the head did not run for", self.cluster.agent_log(0))

    def _node_loss(self, tag, inject, recover):
        job = self.submit(tag, "num_nodes: 3\nrun: |\n  echo up $SKYPILOT_NODE_RANK; sleep 1000\n")
        for r in range(3):
            self.wait_log(job, f"\\) up {r}\n")
        t0 = inject()
        job_info = self.cluster.wait_state(job, {"FAILED", "FAILED_DRIVER", "SUCCEEDED"},
                                           timeout=30)
        detected = time.time() - t0
        print(f"\n{tag}: job FAILED {detected:.1f} s after the fault", file=sys.stderr)
        self.assertEqual(job_info["status"], "FAILED")
        # `herd queue` names the node and the rank too.
        self.assertEqual((job_info["first_failed_node"], job_info["first_failed_rank"]),
                         ("hadp-worker2", 2))
        self.assertIn("hadp-worker2 (rank 2) was lost", job_info["message"])
        self.assertLess(detected, NODE_LOSS_REPORTED_WITHIN)
        log = self.log(job)
        self.assertIn("node hadp-worker2 (rank 2) was lost", log)
        # The ranks on the other nodes are killed.
        deadline = time.time() + 5

        def others():
            return [p for p in self.cluster.leftovers(tag) if not self._on_node(p, "hadp-worker2")]
        while others() and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(others(), [])
        recover()
        # The node is usable again (a new incarnation, or the same agent re-registered) and what
        # it still ran of the failed job is killed.
        self.cluster.wait_nodes(3, timeout=30)
        deadline = time.time() + 10
        while self.cluster.leftovers(tag) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.cluster.leftovers(tag), [])
        p = self.cluster.herd("exec", "--num-nodes", "3", "--", "echo", "again",
                              "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 2\n", p.stdout)

    def test_node_stopped_fails_its_job_naming_node_and_rank(self):
        agent = self.cluster.procs[2]

        def inject():
            os.kill(agent.pid, signal.SIGSTOP)  # the machine stops: no FIN, just silence
            return time.time()

        self._node_loss("stopped", inject, lambda: os.kill(agent.pid, signal.SIGCONT))

    def test_agent_killed_with_its_processes_fails_its_job(self):
        def inject():
            # kill -9 of the agent and of every process of the job on that node (its supervisors
            # included): what a crashing machine does, without the agent coming back.
            pids = [p for p in self.cluster.leftovers("killed9")
                    if self._on_node(p, "hadp-worker2")]
            os.kill(self.cluster.procs[2].pid, signal.SIGKILL)
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            self.cluster.procs[2].wait()
            return time.time()

        self._node_loss("killed9", inject, lambda: self.cluster.restart_agent(2))

    def test_cancel_while_an_agent_is_away_ends_cancelled_and_its_rank_dies_on_return(self):
        tag = "awaycancel"
        job = self.submit(tag, "num_nodes: 3\nrun: |\n  echo up $SKYPILOT_NODE_RANK; sleep 1000\n")
        for r in range(3):
            self.wait_log(job, f"\\) up {r}\n")
        # Worker 2's agent dies alone: its rank runs on under its supervisor, unreported.
        os.kill(self.cluster.procs[2].pid, signal.SIGKILL)
        self.cluster.procs[2].wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(
                n["alive"] for n in self.cluster.nodes() if n["node_id"] == "hadp-worker2"):
            time.sleep(0.1)
        t0 = time.time()
        self.cluster.herd("cancel", str(job))
        job_info = self.cluster.wait_state(job, {"CANCELLED", "FAILED", "FAILED_DRIVER"},
                                           timeout=30)
        # The user's decision stands: CANCELLED, at once, not FAILED once the node is lost.
        self.assertEqual(job_info["status"], "CANCELLED", job_info)
        self.assertLess(time.time() - t0, 5.0)
        away = [p for p in self.cluster.leftovers(tag) if self._on_node(p, "hadp-worker2")]
        self.assertNotEqual(away, [], "the away node's rank should still run until its agent "
                            "returns")
        self.cluster.restart_agent(2)
        self.cluster.wait_nodes(3, timeout=30)
        deadline = time.time() + 10
        while self.cluster.leftovers(tag) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.cluster.leftovers(tag), [])

    @staticmethod
    def _on_node(pid, node):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            return False
        # Every node's agent (and so its jobs) has a HOME of its own under the node's directory.
        return any(e.startswith(b"HOME=") and (b"/" + node.encode() + b"/") in e for e in env)

    def test_local_processes_sharing_stdout_keep_lines_whole(self):
        # Four python processes of one rank share its stdout, as torchrun's local ranks do.
        script = write_task(self.tasks, "ranks.py", (
            "import sys\nr = sys.argv[1]\n"
            "for i in range(10000):\n    print(f'DDPCHECK rank={r} i={i} node=1')\n"))
        job = self.submit("integrity", (
            "run: |\n"
            f"  for r in 0 1 2 3; do /usr/bin/python3 {script} $r & done; wait\n"))
        self.assertEqual(self.cluster.wait_state(job, {"SUCCEEDED", "FAILED"}, timeout=120)["status"],
                         "SUCCEEDED")
        next_i = {str(r): 0 for r in range(4)}
        bad = []
        for line in self.log(job).splitlines():
            m = re.fullmatch(r"\(task, pid=\d+\) DDPCHECK rank=(\d) i=(\d+) node=1", line)
            if not m:
                if "DDPCHECK" in line:
                    bad.append(line)
                continue
            self.assertEqual(int(m.group(2)), next_i[m.group(1)])
            next_i[m.group(1)] += 1
        self.assertEqual(bad, [])
        self.assertEqual(next_i, {str(r): 10000 for r in range(4)})


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("ip"), "needs root and ip")
class LinkDownTest(unittest.TestCase):
    """A worker in a network namespace of its own, linked to the head by a veth pair: its link
    goes down while a job runs, then comes back."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.net = None
        try:
            cls.net = VethNamespace("hadp")
            cls.cluster = LoopbackCluster("hadpns", [cls.net.host_ip, cls.net.node_ip],
                                          wrappers={1: ["ip", "netns", "exec", cls.net.ns]})
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.close()
        if cls.net:
            cls.net.close()

    def test_link_down_fails_the_job_and_the_node_returns(self):
        c = self.cluster
        task = write_task(tempfile.gettempdir(), f"hadp-link-{os.getpid()}.yaml",
                          "num_nodes: 2\nrun: |\n  echo up $SKYPILOT_NODE_RANK; sleep 1000\n")
        try:
            p = run([HERD, "exec", *c.target(), *c.marker_env("link"), "-d", task])
        finally:
            os.unlink(task)
        job = job_id_of(p.stderr)
        deadline = time.time() + 30
        while time.time() < deadline:
            log = c.herd("logs", "--no-follow", str(job), check=False).stdout
            if b") up 0\n" in log and b") up 1\n" in log:
                break
            time.sleep(0.1)
        t0 = time.time()
        self.net.set_link("down")
        try:
            info = c.wait_state(job, {"FAILED", "FAILED_DRIVER", "SUCCEEDED"}, timeout=30)
            detected = time.time() - t0
        finally:
            self.net.set_link("up")
        print(f"\nlink down: job FAILED {detected:.1f} s after the fault", file=sys.stderr)
        self.assertEqual(info["status"], "FAILED")
        self.assertLess(detected, NODE_LOSS_REPORTED_WITHIN)
        self.assertIn("hadpns-worker1 (rank 1) was lost", info["message"])
        # The link is back: the same agent registers again and its leftover rank is killed.
        c.wait_nodes(2, timeout=40)
        deadline = time.time() + 10
        while c.leftovers("link") and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(c.leftovers("link"), [])
        p = c.herd("exec", "--num-nodes", "2", "--", "echo", "again", "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 1\n", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
