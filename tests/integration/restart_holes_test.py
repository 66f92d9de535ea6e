"""The crash windows of issue 7 that no external fault hits reliably, driven with the test-only
HERD_TEST_CRASH_AT hook (agent/process/crash_point.hpp): an agent _exits at an exact point, is
started again, and the job must end SUCCEEDED with every line once in `herd logs` (a follower
attached across the crash and a fresh one), and nothing left running. A head and a worker on
127.0.100.1-2 from the real binaries, driven with the real `herd` CLI.

- Head crash between the last setup exit and the start of run, after RUNNING was persisted but
  before any run process was journaled, and after journaling the run processes but before the
  last StartProcess was sent: the restarted head starts (or resumes) the run phase.
- Worker crash after its process table says "starting" but before the spawn, after the spawn but
  before the table write, and inside the spawn before the supervisor's "ok": the restarted agent
  finds the supervisor by its registration (or learns nothing was started, and the head sends the
  process again).
- Fencing across a head restart: an agent older than the last one the head accepted for its node
  (a stalled agent whose node was taken over by a new one) is still refused after the head
  restarted (the incarnation is in jobs.db); a newer one is accepted and the node runs jobs."""

import os
import re
import select
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import HERD, HERDLET, ClusterTestCase, run  # noqa: E402

ADDRS = ["127.0.100.1", "127.0.100.2"]
CRASH_EXIT = 86  # kCrashPointExitCode
PER_RANK = 40


def rank_lines(text, rank):
    """(numbers, pids) of rank's "rN i" lines, in order."""
    got, pids = [], set()
    for line in text.splitlines():
        m = re.match(r"\(\w+, rank=%d, pid=(\d+)[^)]*\) r%d (\d+)$" % (rank, rank), line)
        if m:
            pids.add(int(m.group(1)))
            got.append(int(m.group(2)))
    return got, pids


class RestartHolesTest(ClusterTestCase):
    CLUSTER, ADDRS = "hho", ADDRS

    def restart(self, i, crash_at=None):
        """Restarts agent i (0: the head's), with HERD_TEST_CRASH_AT=crash_at if given."""
        c = self.cluster
        if crash_at:
            c.agent_env["HERD_TEST_CRASH_AT"] = crash_at
        try:
            c.restart_head() if i == 0 else c.restart_agent(i)
        finally:
            c.agent_env.pop("HERD_TEST_CRASH_AT", None)
        c.wait_nodes(len(ADDRS), timeout=30)

    def crash_and_recover(self, i, point, tag, body, gate=None, follow_across=True):
        """Arms `point` on agent i, submits, waits for the crash, restarts agent i and returns
        (job, what a `herd logs` following it all along printed). gate: a file the job's setup
        waits for, created once the follower printed both setup lines (so it is attached when
        the head crashes at the end of setup). follow_across=False: the follower starts after the
        restart (the crash comes before a client could attach)."""
        c = self.cluster
        self.restart(i, point)
        try:
            job = self.submit(tag, body)
        except AssertionError as e:
            # A crash inside Submit's scheduling pass can come before the reply left: the job is
            # stored all the same (a user sees the connection close and looks at `herd queue`).
            self.assertFalse(follow_across, e)
            self.assertIn("connection to the head closed", str(e))
            job = None

        def follow():
            return subprocess.Popen([HERD, "logs", *c.target(), str(job)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        follower = follow() if follow_across else None
        seen = b""
        try:
            if gate:
                deadline = time.time() + 60
                while seen.count(b") setup-ok ") < 2 and time.time() < deadline:
                    if select.select([follower.stdout], [], [], 0.5)[0]:
                        chunk = os.read(follower.stdout.fileno(), 65536)
                        if not chunk:
                            break
                        seen += chunk
                self.assertEqual(seen.count(b") setup-ok "), 2, seen)
                open(gate, "w").close()
            c.procs[i].wait(timeout=60)
            self.assertEqual(c.procs[i].returncode, CRASH_EXIT,
                             f"agent {i} did not reach {point}:\n{c.agent_log(i)[-3000:]}")
            t0 = time.time()
            c.restart_head() if i == 0 else c.restart_agent(i)
            if not follower:
                c.wait_nodes(len(ADDRS), timeout=30)
                job = job or max(c.queue())
                follower = follow()
            out, err = follower.communicate(timeout=180)
        finally:
            if follower and follower.poll() is None:
                follower.kill()
                follower.wait()
        info = c.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER",
                                  "CANCELLED"}, timeout=60)
        took = time.time() - t0
        print(f"\n{point}: job {info['status']} {took:.1f} s after the agent was started again",
              file=sys.stderr)
        self.assertEqual(info["status"], "SUCCEEDED",
                         f"{info}\n{c.agent_log(0)[-3000:]}\n{c.agent_log(1)[-3000:]}")
        self.assertEqual(follower.returncode, 0, err.decode(errors="replace")[-2000:])
        return job, (seen + out).decode(errors="replace")

    def check_output(self, job, followed, tag, setup):
        c = self.cluster
        stored = c.herd("logs", "--no-follow", str(job)).stdout.decode(errors="replace")
        for text in (followed, stored):
            for rank in (0, 1):
                got, pids = rank_lines(text, rank)
                self.assertEqual(got, list(range(1, PER_RANK + 1)), f"rank {rank}:\n{text}")
                self.assertEqual(len(pids), 1, f"rank {rank} ran more than once:\n{text}")
            if setup:
                self.assertEqual(sorted(re.findall(r"\) setup-ok (\d)\n", text)), ["0", "1"],
                                 text)
        deadline = time.time() + 10
        while c.leftovers(tag) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(c.leftovers(tag), [])

    RUN = ("run: |\n"
           f"  for i in $(seq 1 {PER_RANK}); do echo r$SKYPILOT_NODE_RANK $i; sleep 0.05; done\n")

    def _head_crash(self, point, tag, gated=True):
        gate = os.path.join(self.tasks, f"{tag}.go")
        if not gated:
            open(gate, "w").close()
        body = ("num_nodes: 2\nsetup: |\n  echo setup-ok $SKYPILOT_SETUP_NODE_RANK\n"
                f"  while [ ! -e {gate} ]; do sleep 0.1; done\n" + self.RUN)
        job, followed = self.crash_and_recover(0, point, tag, body, gate if gated else None,
                                               follow_across=gated)
        self.check_output(job, followed, tag, setup=True)
        log = self.cluster.agent_log(0)
        self.assertIn(f"job {job}: the head restarted", log)

    def test_head_crash_after_setup_journaled_before_sent(self):
        self._head_crash("head-setup-journaled", "hsetupj", gated=False)

    def test_head_crash_while_journaling_setup_fails_clearly(self):
        """A setup record is missing: whether that node got its setup is unknown. The job fails
        FAILED_DRIVER saying why, nothing of it is left, the cluster runs the next job."""
        c = self.cluster
        self.restart(0, "head-setup-partly-journaled")
        body = "num_nodes: 2\nsetup: |\n  echo setup-ok; sleep 1000\n" + self.RUN
        path = os.path.join(self.tasks, "hpartial.yaml")
        with open(path, "w") as f:
            f.write(body)
        run([HERD, "exec", *c.target(), *c.marker_env("hpartial"), "-d", path], check=False)
        c.procs[0].wait(timeout=60)
        self.assertEqual(c.procs[0].returncode, CRASH_EXIT, c.agent_log(0)[-3000:])
        c.restart_head()
        c.wait_nodes(len(ADDRS), timeout=30)
        job = max(c.queue())
        info = c.wait_state(job, {"FAILED", "FAILED_DRIVER", "FAILED_SETUP", "SUCCEEDED"},
                            timeout=30)
        self.assertEqual(info["status"], "FAILED_DRIVER", info)
        self.assertIn("the head restarted while starting its setup (1 of 2 setup processes",
                      info["message"])
        log = c.herd("logs", "--no-follow", str(job), check=False).stdout.decode()
        self.assertIn("the head restarted while starting its setup", log)
        deadline = time.time() + 10
        while c.leftovers("hpartial") and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(c.leftovers("hpartial"), [])
        p = c.herd("exec", "--num-nodes", "2", "--", "echo", "again", "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 1\n", p.stdout)

    def test_head_crash_after_setup_before_run(self):
        self._head_crash("head-setup-done", "hsetup")

    def test_head_crash_after_running_persisted(self):
        self._head_crash("head-run-persisted", "hpersist")

    def test_head_crash_after_run_journaled_before_sent(self):
        self._head_crash("head-run-journaled", "hjournal")

    def _worker_crash(self, point, tag, expect):
        job, followed = self.crash_and_recover(1, point, tag, "num_nodes: 2\n" + self.RUN)
        self.check_output(job, followed, tag, setup=False)
        self.assertIn(expect, self.cluster.agent_log(1))

    def test_worker_crash_before_spawn(self):
        # Nothing was started: the new agent forgets the entry, the head sends the process again.
        self._worker_crash("worker-before-spawn", "wbefore", "which died first")

    def test_worker_crash_after_spawn_before_table(self):
        self._worker_crash("worker-after-spawn", "wafter",
                           "was being started by the previous agent: found pid")

    def test_worker_crash_before_supervisor_report(self):
        self._worker_crash("spawn-before-report", "wreport",
                           "was being started by the previous agent: found pid")


    def start_worker(self):
        """Another herdlet for worker 1 (its config and state), next to whatever runs there."""
        c = self.cluster
        ndir = os.path.join(c.dir, c.node_id(1))
        env = dict(c._agent_env(), HOME=os.path.join(ndir, "home"), CUDA_VISIBLE_DEVICES="0,1")
        with open(os.path.join(ndir, "herdlet.log"), "ab") as log:
            return subprocess.Popen([HERDLET, "--config", os.path.join(ndir, "herdlet.yaml")],
                                    stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)

    def test_stale_agent_refused_after_head_restart(self):
        c = self.cluster
        stale = c.procs[1]
        os.kill(stale.pid, signal.SIGSTOP)  # it hangs; a new agent takes the node over
        try:
            c.procs[1] = self.start_worker()
            deadline = time.time() + 30
            while c.agent_log(0).count("agent hho-worker1 re-registered") == 0:
                self.assertLess(time.time(), deadline,
                                c.agent_log(0)[-3000:] + "\n---\n" + c.agent_log(1)[-3000:])
                time.sleep(0.1)
            # The new agent goes away and the head restarts; the stale agent wakes up and is the
            # first of the node to dial the restarted head.
            os.killpg(c.procs[1].pid, signal.SIGTERM)
            c.procs[1].wait(timeout=10)
            c.restart_head()
            c.wait_nodes(1, timeout=30)
            os.kill(stale.pid, signal.SIGCONT)
            deadline = time.time() + 30
            while "refusing registration of hho-worker1: stale agent" not in c.agent_log(0):
                self.assertLess(time.time(), deadline, c.agent_log(0)[-3000:])
                time.sleep(0.1)
            alive = {n["node_id"]: n["alive"] for n in c.nodes()}
            self.assertFalse(alive["hho-worker1"], alive)
        finally:
            if stale.poll() is None:
                os.kill(stale.pid, signal.SIGCONT)
                os.killpg(stale.pid, signal.SIGKILL)
            stale.wait()
        # A newer agent is accepted and the node runs jobs again.
        c.procs[1] = self.start_worker()
        c.wait_nodes(2, timeout=30)
        p = c.herd("exec", "--num-nodes", "2", "--", "echo", "again", "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 1\n", p.stdout)


    @staticmethod
    def _on_node(pid, node):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            return False
        # Each node's agent (and so its jobs) has a HOME of its own under the node's directory.
        return any(e.startswith(b"HOME=") and (b"/" + node.encode() + b"/") in e for e in env)

    def test_node_back_with_new_incarnation_after_head_restart_fails_its_ranks(self):
        """While the head is down, a worker dies with its processes (kill -9) and its agent comes
        back (a new incarnation); then the head restarts. The job is FAILED naming the node and
        the rank, the other rank is killed, and the node runs jobs again."""
        c = self.cluster
        job = self.submit("newinc",
                          "num_nodes: 2\nrun: |\n  echo up $SKYPILOT_NODE_RANK; sleep 1000\n")
        deadline = time.time() + 30
        while True:
            log = c.herd("logs", "--no-follow", str(job), check=False).stdout
            if b") up 0\n" in log and b") up 1\n" in log:
                break
            self.assertLess(time.time(), deadline, log)
            time.sleep(0.1)
        os.killpg(c.procs[0].pid, signal.SIGTERM)  # the head goes down; jobs keep running
        c.procs[0].wait(timeout=10)
        pids = [p for p in c.leftovers("newinc") if self._on_node(p, "hho-worker1")]
        self.assertTrue(pids)
        os.kill(c.procs[1].pid, signal.SIGKILL)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        c.procs[1].wait()
        c.restart_agent(1)  # a new incarnation, while the head is down
        t0 = time.time()
        c.restart_head()
        c.wait_nodes(2, timeout=30)  # listening again, and the new agent registered
        info = c.wait_state(job, {"FAILED", "FAILED_DRIVER", "SUCCEEDED", "CANCELLED"}, timeout=30)
        print(f"\nnew incarnation after a head restart: job {info['status']} "
              f"{time.time() - t0:.1f} s after the head was started again", file=sys.stderr)
        self.assertEqual(info["status"], "FAILED", info)
        self.assertEqual((info["first_failed_node"], info["first_failed_rank"]), ("hho-worker1", 1))
        self.assertIn("rank 1 on hho-worker1", info["message"])
        deadline = time.time() + 10
        while c.leftovers("newinc") and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(c.leftovers("newinc"), [])
        c.wait_nodes(2, timeout=30)
        p = c.herd("exec", "--num-nodes", "2", "--", "echo", "again", "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 1\n", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
