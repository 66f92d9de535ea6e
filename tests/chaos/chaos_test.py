"""Chaos suite (issue 7 item 6): faults injected in a seeded random order into a running cluster,
with the checks a user would make after each one.

A head and two workers from the real binaries, driven with the real `herd` CLI: the head on the
host side of a veth pair, worker1 on 127.0.80.2, worker2 in a network namespace of its own (hch-*)
behind the veth. Each round starts a 3-rank line-counter job, injects one fault while it prints and
then checks: the job ends in the state the fault calls for (SUCCEEDED when it is survived, FAILED
naming node and rank when a node was lost, FAILED_DRIVER naming node, path and error on a full
disk), `herd logs` has every line of every rank exactly once and in order, nothing of a finished job
is left running on any node, and the cluster runs a next `herd exec`.

Replay: the seed is printed; HERD_CHAOS_SEED=N and HERD_CHAOS_ROUNDS=N repeat a run
(HERD_CHAOS_FAULTS=a,b keeps only those faults, to chase one). The suite has a
hard deadline (HERD_CHAOS_BUDGET_S, 240 s): no round starts without time for its worst case, and
every wait is bounded by it."""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from loopback_cluster import (HERD, ClusterTestCase, LoopbackCluster, VethNamespace,  # noqa: E402
                              run)
from survive_test import count_rank_lines  # noqa: E402

# The whole suite, setup included (ctest's TIMEOUT is above it).
BUDGET_S = float(os.environ.get("HERD_CHAOS_BUDGET_S", "240"))
# The longest a round may take on a loaded machine (a long link outage: kNodeLostAfter 8 s, the
# node's return, the checks); no round starts with less than this left.
ROUND_WORST_S = 45.0
# The line-counter job: per rank, LINES lines in bursts of BURST, BURST_SLEEP s apart (~6 s).
LINES, BURST, BURST_SLEEP = 600, 20, 0.2
# The tmpfs that stands for a full disk on a node's log directory.
FULL_DISK_SIZE = "1m"
# kNodeLostAfter in shared/common/limits.hpp (a link flap shorter than this is survived).
NODE_LOST_AFTER = 8.0
NO_SPACE = "No space left on device"

FAULTS = ["kill9_worker_agent", "kill9_head_agent", "link_flap", "head_stop", "client_kill",
          "full_disk", "link_down_long", "combined"]


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("ip") and shutil.which("nsenter"),
                     "needs root, ip and nsenter")
class ChaosTest(ClusterTestCase):
    """setUpClass makes its own cluster (one worker behind a veth); submit() is the base's."""

    @classmethod
    def setUpClass(cls):
        cls.t0 = time.time()
        cls.deadline = cls.t0 + BUDGET_S
        cls.cluster = cls.net = None
        cls.mounts = []
        cls.tasks = tempfile.mkdtemp(prefix="herd-hch-tasks-")
        try:
            cls.net = VethNamespace("hch")
            cls.head_ip, cls.node_ip = cls.net.host_ip, cls.net.node_ip
            cls.cluster = LoopbackCluster("hch", [cls.head_ip, "127.0.80.2", cls.node_ip],
                                          wrappers={2: cls.net.wrapper})
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for m in cls.mounts:
            subprocess.run(["umount", "-l", m], capture_output=True)
        if cls.cluster:
            for p in cls.cluster.procs:  # a stopped head must not keep close() waiting
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
            cls.cluster.close()
        if cls.net:
            cls.net.close()
        shutil.rmtree(cls.tasks, ignore_errors=True)
        print(f"\nchaos suite: {time.time() - cls.t0:.1f} s in all", file=sys.stderr)

    # ---- helpers ------------------------------------------------------------------------------

    def left(self):
        return self.deadline - time.time()

    def bounded(self, seconds):
        """A wait of `seconds`, cut to the suite's deadline (a hang fails, never outlives it)."""
        left = self.left()
        if left <= 0:
            self.fail("the chaos suite's hard deadline passed")
        return min(seconds, left)

    def submit_counter(self, tag):
        return self.submit(tag, (
            "num_nodes: 3\nrun: |\n"
            f"  for i in $(seq 1 {LINES}); do\n"
            "    echo \"r$SKYPILOT_NODE_RANK $i\"\n"
            f"    if [ $((i % {BURST})) = 0 ]; then sleep {BURST_SLEEP}; fi\n"
            "  done\n"))

    def log(self, job):
        return self.cluster.herd("logs", "--no-follow", str(job), check=False).stdout.decode(
            errors="replace")

    def wait_log(self, job, pattern, timeout=30):
        deadline = time.time() + self.bounded(timeout)
        while time.time() < deadline:
            if re.search(pattern, self.log(job)):
                return
            time.sleep(0.1)
        self.fail(f"{pattern!r} not in the log of job {job}:\n{self.log(job)[-2000:]}")

    def wait_state(self, job, states, timeout=60):
        return self.cluster.wait_state(job, states, timeout=self.bounded(timeout))

    def follow(self, job, timeout=90):
        """`herd logs JOB` attached until the job ends, as a user reattaches."""
        return subprocess.run([HERD, "logs", *self.cluster.target(), str(job)],
                              capture_output=True, timeout=self.bounded(timeout))

    def wait_no_leftovers(self, tags, timeout=10):
        deadline = time.time() + self.bounded(timeout)
        while time.time() < deadline:
            left = [p for t in tags for p in self.cluster.leftovers(t)]
            if not left:
                return
            time.sleep(0.1)
        self.fail(f"processes of finished jobs still run: {left}")

    def logs_dir(self, node):
        return os.path.join(self.cluster.dir, self.cluster.node_id(node), "state", "logs")

    def mount_full_disk(self, node):
        d = self.logs_dir(node)
        os.makedirs(d, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", f"size={FULL_DISK_SIZE}", "herd-chaos-full", d])
        type(self).mounts.append(d)
        return d

    def unmount(self, d):
        run(["umount", "-l", d])
        type(self).mounts.remove(d)

    def link(self, state):
        self.net.set_link(state)

    def check_counter(self, job, text):
        for rank in range(3):
            self.assertIsNone(count_rank_lines(text, rank, LINES), f"job {job}")

    def check_usable(self):
        """The cluster runs a next job on all three nodes."""
        self.cluster.wait_nodes(3, timeout=self.bounded(40))
        p = self.cluster.herd("exec", "--num-nodes", "3", "--", "echo", "next",
                              "$SKYPILOT_NODE_RANK", timeout=self.bounded(60))
        for r in range(3):
            self.assertIn(b"next %d\n" % r, p.stdout)

    # ---- the full disk, on its own ------------------------------------------------------------

    def full_disk(self, node, tag, second=False):
        """Fills `node`'s log directory (a 1 MiB tmpfs over it) with a job that prints fast on that
        node. Returns the seconds from submit to the job's end."""
        name = self.cluster.node_id(node)
        d = self.mount_full_disk(node)
        try:
            t0 = time.time()
            job = self.submit(tag, (
                "num_nodes: 3\nrun: |\n"
                f"  case \"$HOME\" in */{name}/*) yes 'a line of a job that fills the disk' ;;\n"
                "    *) sleep 1000 ;;\n  esac\n"))
            info = self.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER", "CANCELLED"},
                                   timeout=30)
            detected = time.time() - t0
            self.assertEqual(info["status"], "FAILED_DRIVER", info)
            msg = self.full_disk_message = info["message"]
            self.assertIn(NO_SPACE, msg)
            self.assertIn(d, msg)  # the path (the head's run.log or the node-local log)
            if node == 0:
                self.assertIn(name, msg)
            else:
                self.assertRegex(msg, rf"node {name} \(rank \d\) could not store its output")
                # `herd logs` says it too (the head's run.log is on another disk).
                self.assertIn(f"cannot write {d}/", self.log(job))
                self.assertIn(NO_SPACE, self.log(job))
            # The agent is up and heartbeating (still alive after more than kNodeLostAfter).
            self.assertIsNone(self.cluster.procs[node].poll())
            self.wait_no_leftovers([tag])
            if second:
                # While the disk is still full, the next job fails at once too (at spawn, where
                # the exit record's reserve does not fit, or at its first write), naming the node.
                job2 = self.submit(tag + "again-", "num_nodes: 3\nrun: echo hello\n")
                info2 = self.wait_state(job2, {"SUCCEEDED", "FAILED", "FAILED_DRIVER"},
                                        timeout=30)
                print(f"\nnext job on the still-full disk: {info2['status']}: {info2['message']}",
                      file=sys.stderr)
                self.assertIn(info2["status"], {"FAILED", "FAILED_DRIVER"}, info2)
                self.assertIn(name, info2["message"])
                self.assertIn(NO_SPACE, self.log(job2))
                self.wait_no_leftovers([tag + "again-"])
        finally:
            self.unmount(d)
        time.sleep(self.bounded(max(0.0, NODE_LOST_AFTER + 1 - (time.time() - t0))))
        self.assertIsNone(self.cluster.procs[node].poll())
        self.assertTrue(any(n["alive"] for n in self.cluster.nodes() if n["node_id"] == name),
                        self.cluster.nodes())
        return detected

    def test_a_full_disk_fails_the_job_and_the_agent_runs_the_next(self):
        detected = self.full_disk(1, "-fulldisk-", second=True)
        print(f"\nfull disk on hch-worker1: FAILED_DRIVER {detected:.1f} s after submit",
              file=sys.stderr)
        self.check_usable()

    # ---- the loop -----------------------------------------------------------------------------

    def test_b_chaos_loop(self):
        seed = int(os.environ.get("HERD_CHAOS_SEED", str(int(time.time() * 1000) % 1000000)))
        rounds = int(os.environ.get("HERD_CHAOS_ROUNDS", str(2 * len(FAULTS))))
        rng = random.Random(seed)
        # HERD_CHAOS_FAULTS=a,b: only these (to chase one).
        faults = [f for f in os.environ.get("HERD_CHAOS_FAULTS", "").split(",") if f] or FAULTS
        self.assertEqual(set(faults) - set(FAULTS), set())
        order = rng.sample(faults, len(faults))
        while len(order) < rounds:
            order.append(rng.choice(faults))
        order = order[:rounds]
        print(f"\nchaos: HERD_CHAOS_SEED={seed} HERD_CHAOS_ROUNDS={rounds}: {order}",
              file=sys.stderr)
        done = []
        for n, fault in enumerate(order):
            if self.left() < ROUND_WORST_S:
                print(f"chaos: out of time after {len(done)} rounds", file=sys.stderr)
                break
            t0 = time.time()
            note = self.round(n, fault, rng)
            done.append(fault)
            print(f"chaos round {n} {fault}: {note} ({time.time() - t0:.1f} s)", file=sys.stderr)
        self.assertGreater(len(done), 0)

    def round(self, n, fault, rng):
        c = self.cluster
        tag = f"-r{n:02d}-{fault}-"
        t_submit = time.time()
        job = self.submit_counter(tag)
        for r in range(3):
            self.wait_log(job, rf"rank={r}, pid=\d+[^)]*\) r{r} 1\n")
        t_printing = time.time()
        expect, note, extra_tags = "SUCCEEDED", "", []
        time.sleep(rng.uniform(0.0, 3.0))  # early, midway or late in the job
        t_inject = time.time()
        if fault == "kill9_worker_agent":
            i = rng.choice([1, 2])
            c.restart_agent(i, sig=signal.SIGKILL)
            note = f"herdlet of {c.node_id(i)} SIGKILLed and started again"
        elif fault == "kill9_head_agent":
            c.restart_head(sig=signal.SIGKILL)
            c.wait_nodes(3, timeout=self.bounded(30))  # it serves again (a client can attach)
            note = "the head's herdlet SIGKILLed and started again"
        elif fault == "link_flap":
            down = rng.uniform(0.5, 3.0)
            self.link("down")
            try:
                time.sleep(down)
            finally:
                self.link("up")
            note = f"worker2's link down {down:.1f} s"
        elif fault == "head_stop":
            stop = rng.uniform(3.0, 12.0)
            os.kill(c.procs[0].pid, signal.SIGSTOP)
            try:
                time.sleep(stop)
            finally:
                os.kill(c.procs[0].pid, signal.SIGCONT)
            note = f"head SIGSTOPped {stop:.1f} s"
        elif fault == "client_kill":
            kills = rng.randint(2, 4)
            for _ in range(kills):
                p = subprocess.Popen([HERD, "logs", *c.target(), str(job)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.1, 1.0))
                p.kill()
                p.wait()
            note = f"`herd logs` killed {kills} times"
        elif fault == "full_disk":
            node = rng.choice([0, 1, 2])
            extra_tags.append(tag + "fill-")
            detected = self.full_disk(node, tag + "fill-")
            note = (f"{c.node_id(node)}'s log dir full: FAILED_DRIVER {detected:.1f} s after submit"
                    f" ({self.full_disk_message})")
        elif fault == "combined":
            # Several at once, in the job's lifetime: both workers' agents SIGKILLed (one of them
            # twice), worker2's link flapping meanwhile, the head SIGKILLed, clients killed.
            p = subprocess.Popen([HERD, "logs", *c.target(), str(job)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            c.restart_agent(1, sig=signal.SIGKILL)
            self.link("down")
            try:
                c.restart_agent(2, sig=signal.SIGKILL)
                time.sleep(rng.uniform(0.2, 1.5))
            finally:
                self.link("up")
            p.kill()
            p.wait()
            c.restart_head(sig=signal.SIGKILL)
            c.restart_agent(1, sig=signal.SIGKILL)
            c.wait_nodes(3, timeout=self.bounded(30))
            note = "worker agents, the head and a client killed, worker2's link flapping"
        elif fault == "link_down_long":
            t0 = time.time()
            self.link("down")
            try:
                info = self.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER"}, timeout=30)
            finally:
                self.link("up")
            expect = "FAILED"
            lost = re.search(r"node hch-worker2 \(rank (\d)\) was lost", info["message"])
            self.assertTrue(lost, info)
            note = f"worker2's link down until the job failed ({time.time() - t0:.1f} s)"
        else:
            raise AssertionError(fault)
        t_fault = time.time()
        final = self.follow(job)
        note += (f"; printing {t_printing - t_submit:.1f} s after submit,"
                 f" injected in {t_fault - t_inject:.1f} s, job ended {time.time() - t_fault:.1f} s"
                 " after")
        info = self.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER", "CANCELLED"})
        self.assertEqual(info["status"], expect, f"round {n} {fault}: {info}")
        if expect == "SUCCEEDED":
            self.assertEqual(final.returncode, 0, final.stderr[-2000:])
            # Once in the attached client and once more in a fresh read of the whole log.
            for text in (final.stdout.decode(errors="replace"), self.log(job)):
                self.check_counter(job, text)
        else:
            self.assertEqual((info["first_failed_node"], info["first_failed_rank"]),
                             ("hch-worker2", int(lost.group(1))))
        t_checks = time.time()
        self.wait_no_leftovers([tag, *extra_tags])
        t_leftovers = time.time()
        self.check_usable()
        return note + (f"; leftovers gone in {t_leftovers - t_checks:.1f} s, next exec in "
                       f"{time.time() - t_leftovers:.1f} s")


if __name__ == "__main__":
    unittest.main(verbosity=2)
