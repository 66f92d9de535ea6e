"""`herd down` while `herd exec` and `herd logs` follow a job of the cluster, as a user sees it on
a 1-node local cluster (name `hdn1`): both followers (one through the cluster's mux, one dialled
directly) end within seconds of the down with exit 103 and a line that says the cluster was taken
down; the down leaves no file of the cluster in /tmp or HERD_HOME and no process of it (mux,
ssh ControlMaster with its forward); a new cluster of the same name launches and runs a job. A
follower whose head agent is killed and restarted still redials and resumes, as before."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnv, namespaces_of, netns_available, pids_by_cmdline  # noqa: E402

CLUSTER = "hdn1"
HERD = os.environ.get("HERD", "herd")
# How long after `herd down` returned a follower may still run: it learns at its first redial
# (kReconnectBackoffInitial, 100 ms, after the drop) that the cluster is going away.
FOLLOWER_ENDS_WITHIN = 2.0
GONE_LINE = f"herd: cluster {CLUSTER} was taken down (`herd down`) while job "
# Files of the controller's state that every cluster shares.
SHARED = {"state.db", "state.db-wal", "state.db-shm", os.path.join("locks", "_ssh_config.lock")}


def files_under(root):
    """Every file and directory under root, relative to it."""
    found = set()
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(d, name), root))
    return found


def pids_mentioning(*markers):
    """Processes whose command line contains one of markers (a path of the cluster)."""
    return pids_by_cmdline(lambda argv: any(m.encode() in b"\0".join(argv) for m in markers))


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class DownWhileFollowingTest(unittest.TestCase):
    def setUp(self):
        self.h = HerdEnv("hdn")
        self.home = self.h.env["HERD_HOME"]
        self.mux_sock = os.path.join(self.home, "clusters", CLUSTER, "mux.sock")
        self.control_dir = None
        self.followers = []

    def tearDown(self):
        for p in self.followers:
            if p.poll() is None:
                p.kill()
            p.communicate()
        try:
            self.h.close()
        finally:
            # What a failed `herd down` (or a follower after it) left: processes, then files.
            markers = [self.mux_sock] + ([self.control_dir] if self.control_dir else [])
            for pid in pids_mentioning(*markers):
                os.kill(pid, signal.SIGKILL)
            if self.control_dir:
                shutil.rmtree(self.control_dir, ignore_errors=True)
        self.assertEqual(namespaces_of(CLUSTER), [])

    def launch(self):
        self.h.herd("launch", "-c", CLUSTER, "--num-nodes", "1", "-y")
        with open(os.path.join(self.home, "ssh", f"{CLUSTER}.config")) as f:
            m = re.search(r"ControlPath (\S+)/%C", f.read())
        self.assertIsNotNone(m, "the generated ssh config names no ControlPath")
        self.control_dir = m.group(1)

    def follow(self, *args, env=None):
        p = subprocess.Popen([HERD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(env or self.h.env, HERD_TRACE="1"))
        self.followers.append(p)
        first = p.stdout.readline().decode()
        self.assertIn("started", first, p.stderr.read().decode() if not first else first)
        return p

    def test_down_ends_its_followers_at_once_and_leaves_nothing(self):
        self.launch()
        # A first command starts the cluster's mux for the ones after it.
        self.h.herd("exec", CLUSTER, "--", "true")
        self.assertTrue(pids_mentioning(self.mux_sock), "no mux started")
        via_mux = self.follow("exec", CLUSTER, "--", "echo started; sleep 600")
        jobs = json.loads(self.h.herd("queue", CLUSTER, "-o", "json").stdout)
        job = [j["id"] for j in jobs if j["status"] == "RUNNING"]
        self.assertEqual(len(job), 1, jobs)
        direct = self.follow("logs", CLUSTER, str(job[0]), env=dict(self.h.env, HERD_MUX="0"))

        # What the cluster made on this machine while it runs a job.
        made_home = files_under(self.home) - SHARED
        made_tmp = files_under(self.control_dir)
        self.assertIn("head.port", made_tmp)
        self.assertIn(os.path.join("locks", f"{CLUSTER}.lock"), made_home)
        self.assertTrue(pids_mentioning(self.control_dir), "no ssh ControlMaster")

        start = time.monotonic()
        self.h.herd("down", CLUSTER, "-y")
        down_took = time.monotonic() - start
        ended = {}
        deadline = time.monotonic() + 40  # past kClientReconnectWindow: see how long it takes
        while len(ended) < 2 and time.monotonic() < deadline:
            for name, p in (("exec", via_mux), ("logs", direct)):
                if name not in ended and p.poll() is not None:
                    ended[name] = time.monotonic() - start
            time.sleep(0.05)
        results = {}
        for name, p in (("exec", via_mux), ("logs", direct)):
            if p.poll() is None:
                p.kill()
            out, err = p.communicate()
            results[name] = (p.returncode, err.decode(errors="replace"))
        print(f"\ndown took {down_took:.2f} s; followers ended at "
              f"{ {k: round(v, 2) for k, v in ended.items()} } s after it started",
              file=sys.stderr)

        problems = []
        for name, (code, err) in results.items():
            when = ended.get(name)
            if when is None or when > down_took + FOLLOWER_ENDS_WITHIN:
                problems.append(f"herd {name} ended {when} s after the down started "
                                f"(the down took {down_took:.2f} s)")
            if code != 103:
                problems.append(f"herd {name} exited {code}, not 103: {err[-1500:]}")
            gone = [line for line in err.splitlines() if line.startswith(GONE_LINE)]
            if gone != [f"{GONE_LINE}{job[0]} was running"]:
                problems.append(f"herd {name} did not say the cluster was taken down: "
                                f"{err[-1500:]}")
        self.assertIn("head connected (through the mux)", results["exec"][1])
        self.assertIn("head connected (TCP, TLS, websocket)", results["logs"][1])
        self.assertNotIn("through the mux", results["logs"][1])

        # Nothing of the cluster is left, also after its followers ended.
        if os.path.exists(self.control_dir):
            problems.append(f"{self.control_dir} is left: {sorted(files_under(self.control_dir))}")
        left_home = files_under(self.home) - SHARED
        for path in sorted(left_home & made_home):
            if not os.path.isdir(os.path.join(self.home, path)) or CLUSTER in path:
                problems.append(f"$HERD_HOME/{path} is left")
        for path in sorted(left_home - made_home):
            problems.append(f"$HERD_HOME/{path} was made after the down")
        for pid in pids_mentioning(self.mux_sock, self.control_dir):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().replace(b"\0", b" ").decode(errors="replace")
                problems.append(f"process {pid} is left: {argv}")
            except OSError:
                pass
        self.maxDiff = None
        self.assertEqual(problems, [])

        # The name is free again: a new cluster of it launches and runs a job.
        p = self.h.herd("launch", "-c", CLUSTER, "--num-nodes", "1", "-y", "--", "echo again")
        self.assertIn("again", p.stdout.decode())
        self.h.herd("down", CLUSTER, "-y")
        self.assertFalse(os.path.exists(self.control_dir))
        self.assertFalse(os.path.exists(os.path.join(self.home, "locks", f"{CLUSTER}.lock")))

    def test_a_follower_whose_head_restarts_still_resumes(self):
        self.launch()
        p = self.follow("exec", CLUSTER, "--", "echo started; sleep 5; echo done")
        # The head's agent dies (its supervisor starts it again); the job's process lives on.
        ns = f"herd-{CLUSTER}-0"
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        heads = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "herdlet":
                        heads.append(int(pid))
            except OSError:
                pass
        self.assertEqual(len(heads), 1, pids)
        os.kill(heads[0], signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        err = err.decode(errors="replace")
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual([re.sub(r"^\([^)]*\) ", "", x) for x in out.decode().splitlines()],
                         ["done"])
        self.assertNotIn("taken down", err)
        self.assertGreaterEqual(err.count("head connected"), 2, err)  # it redialed


if __name__ == "__main__":
    unittest.main()
