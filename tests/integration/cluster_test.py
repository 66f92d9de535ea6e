"""The controller end to end through the `local` provider, as a user drives it: launch a 3-node
cluster, exec on it again and again, queue, logs after Ctrl-C, cancel, stop/start, down; and the
bad inputs a user makes."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (AGENT_CGROUP_SCOPE_FILE, HerdEnvTestCase, namespaces_of,  # noqa: E402
                      netns_available, remove_cgroups)

CLUSTER = "ctest"


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class ClusterTest(HerdEnvTestCase):
    ENV_PREFIX = "cluster"
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        cls.work = os.path.join(cls.h.dir, "work")
        os.makedirs(cls.work)
        with open(os.path.join(cls.work, "train.py"), "w") as f:
            f.write("print('code from the workdir')\n")
        with open(os.path.join(cls.work, ".gitignore"), "w") as f:
            f.write("big.bin\n")
        with open(os.path.join(cls.work, "big.bin"), "w") as f:
            f.write("ignored\n")
        cls.mount = os.path.join(cls.h.dir, "data.txt")
        with open(cls.mount, "w") as f:
            f.write("mounted data\n")
        cls.task = os.path.join(cls.h.dir, "task.yaml")
        with open(cls.task, "w") as f:
            f.write(f"name: first\nnum_nodes: 3\nworkdir: {cls.work}\n"
                    f"file_mounts:\n  ~/data/data.txt: {cls.mount}\n"
                    "setup: |\n  echo setup on $(hostname)\n"
                    "run: |\n  echo \"$(hostname) rank $SKYPILOT_NODE_RANK: $(/usr/bin/python3 train.py)"
                    " $(cat ~/data/data.txt) $(ls big.bin 2>&1 | wc -l)$(test -e big.bin && echo "
                    "present || echo absent)\"\n")

    @classmethod
    def launch_args(cls):
        return ("launch", "-c", CLUSTER, "-y", cls.task)

    @classmethod
    def check_nothing_left(cls):
        # Removed here too: a failing run must not leave them on the machine.
        left = remove_cgroups(getattr(cls, "scopes_after_start", {}).values())
        assert left == [], f"cgroups left after down: {left}"

    def agent_pids(self):
        pids = {}
        for alias in (CLUSTER, f"{CLUSTER}-worker1", f"{CLUSTER}-worker2"):
            p = self.h.ssh(alias, "cat .herd/agent/herdlet.pid")
            self.assertEqual(p.returncode, 0, p.stderr)
            pids[alias] = int(p.stdout.strip())
        return pids

    def test_a_launch_ran_setup_and_run_on_three_nodes(self):
        out = self.launch.stdout.decode()
        err = self.launch.stderr.decode()
        for i, name in enumerate([f"{CLUSTER}-head", f"{CLUSTER}-worker1", f"{CLUSTER}-worker2"]):
            self.assertRegex(out, rf"{name} rank {i}: code from the workdir mounted data 1absent")
            self.assertIn(f"setup on {name}", out)
        self.assertIn("(head, rank=0, pid=", out)
        self.assertIn("(worker2, rank=2, pid=", out)
        self.assertIn("Job finished (status: SUCCEEDED).", err)
        # Not a terminal: progress comes as plain lines, one per step.
        self.assertIn("Provisioning 3 node(s) on local (3/3)\n", err)
        self.assertIn("Agents registered (3/3)\n", err)
        self.assertNotIn("\r", err)
        self.assertIn(f"herd logs {CLUSTER} 1", err)  # the block of useful commands
        self.assertIn(f"ssh {CLUSTER}-worker1", err)
        c = self.h.clusters()[CLUSTER]
        self.assertEqual(c["status"], "UP")
        self.assertEqual(len(c["nodes"]), 3)
        self.assertEqual(len(namespaces_of(CLUSTER)), 4)  # 3 nodes + the bridge's namespace
        # ssh access through the generated config.
        p = self.h.ssh(f"{CLUSTER}-worker2", "hostname")
        self.assertEqual(p.stdout.decode().strip(), f"{CLUSTER}-worker2")

    def test_b_exec_reuses_agents_and_relaunch_uploads_nothing(self):
        before = self.agent_pids()
        for _ in range(2):
            p = self.h.herd("exec", CLUSTER, "--num-nodes", "3", "--", "echo", "again",
                            "$SKYPILOT_NODE_RANK")
            for r in range(3):
                self.assertIn(b"again %d\n" % r, p.stdout)
        self.assertEqual(self.agent_pids(), before)
        relaunch = json.loads(self.h.herd("launch", "-c", CLUSTER, "-y", "-d", "-o", "json",
                                          self.task).stdout)
        self.assertEqual(relaunch["agents_uploaded"], 0)
        self.assertEqual(relaunch["agents_restarted"], 0)
        self.assertEqual(self.agent_pids(), before)

    def test_c_queue_logs_after_ctrl_c_and_cancel(self):
        task = os.path.join(self.h.dir, "ticks.yaml")
        with open(task, "w") as f:
            f.write("name: ticks\nrun: |\n  for i in $(seq 1 15); do echo tick $i; sleep 0.2; done\n")
        proc = self.h.popen("exec", CLUSTER, task)
        first = b""
        while b"tick 3\n" not in first:
            chunk = proc.stdout.read1(4096)
            if not chunk:
                break
            first += chunk
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 101, err)
        self.assertIn(b"Detached from job", err)
        job = int(re.search(rb"Job submitted, ID: (\d+)", err).group(1))
        # The job kept running; logs reattaches and sees it to the end.
        logs = self.h.herd("logs", CLUSTER, str(job))
        self.assertIn(b"tick 15\n", logs.stdout)
        self.assertIn(b"tick 1\n", logs.stdout)
        self.assertEqual(logs.returncode, 0)
        # --tail N: the last N lines only; --sync-down: the whole log into ~/herd_logs.
        tail = self.h.herd("logs", CLUSTER, str(job), "--tail", "3").stdout.decode()
        self.assertEqual(re.findall(r"tick (\d+)$", tail, re.M), ["13", "14", "15"], tail)
        sync = self.h.herd("logs", CLUSTER, str(job), "--sync-down")
        path = os.path.join(self.h.env["HOME"], "herd_logs", CLUSTER, str(job), "run.log")
        self.assertEqual(sync.stdout.decode().strip(), path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), logs.stdout)
        queue = {j["id"]: j for j in json.loads(self.h.herd("queue", CLUSTER, "-o", "json").stdout)}
        self.assertEqual(queue[job]["status"], "SUCCEEDED")
        self.assertEqual(queue[job]["name"], "ticks")
        table = self.h.herd("queue", CLUSTER).stdout.decode()
        self.assertRegex(table, r"ID\s+NAME\s+USER\s+SUBMITTED\s+STARTED\s+DURATION\s+RESOURCES"
                                r"\s+STATUS\s+LOG")
        # A job's RESOURCES read as `herd check` and `herd status` print a task's.
        p = self.h.herd("exec", CLUSTER, "--memory", "1+", "--", "true")
        job = int(re.search(rb"Job submitted, ID: (\d+)", p.stderr).group(1))
        queue = {j["id"]: j for j in json.loads(self.h.herd("queue", CLUSTER, "-o", "json").stdout)}
        self.assertEqual(queue[job]["resources"], "1x(cpus=0.5, mem=1GB+)")
        # cancel
        p = self.h.herd("exec", CLUSTER, "-d", "--", "sleep", "300")
        job = int(re.search(rb"Job submitted, ID: (\d+)", p.stderr).group(1))
        self.h.herd("cancel", CLUSTER, str(job), "-y")
        deadline = time.time() + 20
        while time.time() < deadline:
            st = self.h.herd("logs", CLUSTER, str(job), "--status", check=False)
            if st.returncode == 103:
                break
            time.sleep(0.2)
        self.assertEqual(st.returncode, 103, st.stdout)

    def cgroup_scopes(self):
        """{alias: the cgroup directory its agent puts jobs' cgroups in}, where cgroups are used."""
        scopes = {}
        for alias in (CLUSTER, f"{CLUSTER}-worker1", f"{CLUSTER}-worker2"):
            p = self.h.ssh(alias, "cat " + AGENT_CGROUP_SCOPE_FILE)
            if p.returncode == 0:
                scopes[alias] = p.stdout.decode().strip()
        return scopes

    def test_d_stop_then_start(self):
        # Jobs ran on every node (test_a): each agent's cgroup scope exists, and stop removes it
        # with the node's processes (an agent ended before it removed them left them for good).
        scopes = self.cgroup_scopes()
        if os.path.isdir("/sys/fs/cgroup/unified") or os.path.exists(
                "/sys/fs/cgroup/cgroup.controllers"):
            self.assertEqual(len(scopes), 3, scopes)
        self.addCleanup(remove_cgroups, scopes.values())  # whatever the assertions say
        for alias, scope in scopes.items():
            self.assertTrue(os.path.isdir(scope), (alias, scope))
            # A job's cgroup its agent did not get to remove (it was stopped while the cgroup was
            # being emptied): the agent's own cleanup stops at it, the provider's must not.
            os.mkdir(os.path.join(scope, "job-left-a1"))
        self.h.herd("stop", CLUSTER, "-y")
        for alias, scope in scopes.items():
            self.assertFalse(os.path.exists(scope), (alias, scope))
        self.assertEqual(self.h.clusters()[CLUSTER]["status"], "STOPPED")
        p = self.h.herd("exec", CLUSTER, "--", "true", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"STOPPED", p.stderr)
        self.h.herd("start", CLUSTER, "-y", "-i", "30")
        self.assertEqual(self.h.clusters()[CLUSTER]["status"], "UP")
        self.assertEqual(self.h.clusters()[CLUSTER]["autostop"], 30)  # start -i sets autostop
        self.h.herd("autostop", CLUSTER, "--cancel")
        head_ip = [n["ip"] for n in self.h.clusters()[CLUSTER]["nodes"] if n["is_head"]]
        self.assertEqual(self.h.herd("status", "--ip", CLUSTER).stdout.decode(), head_ip[0] + "\n")
        p = self.h.herd("exec", CLUSTER, "--num-nodes", "3", "--", "cat", "~/data/data.txt")
        self.assertEqual(p.stdout.count(b"mounted data"), 3)  # node files survived the stop
        type(self).scopes_after_start = self.cgroup_scopes()  # tearDownClass: gone after down
        for scope in self.scopes_after_start.values():
            os.mkdir(os.path.join(scope, "job-left-a1"))  # as before the stop above

    def test_e_bad_input(self):
        p = self.h.herd("exec", "nosuch", "--", "true", check=False)
        self.assertEqual(p.returncode, 102)
        self.assertIn(b"cluster nosuch does not exist", p.stderr)
        p = self.h.herd("launch", "-c", "poolless", "--infra", "ssh/nopool", "-y", "--", "true",
                        check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"ssh_node_pools.yaml", p.stderr)
        p = self.h.herd("launch", "-c", "Bad_Name", "-y", "--", "true", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"Bad_Name", p.stderr)
        p = self.h.herd("exec", CLUSTER, "--gpus", "H100:8", "--", "true", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"8 GPU(s) of type H100", p.stderr)
        self.assertIn(b"gpus=0", p.stderr)  # what the nodes have

    def test_g_autostop_stops_or_tears_down_an_idle_cluster(self):
        def wait_for(pred, what, timeout=45):
            deadline = time.time() + timeout
            while time.time() < deadline:
                if pred():
                    return
                time.sleep(0.5)
            self.fail(what)

        try:
            self.h.herd("launch", "-c", "autos", "-y", "--", "echo", "hi")
            # Every cluster's queue at once (SkyPilot's `sky queue` with no cluster), each job
            # with its cluster; or the clusters named, a table each.
            every = json.loads(self.h.herd("queue", "-o", "json").stdout)
            self.assertLessEqual({CLUSTER, "autos"}, {j["cluster"] for j in every})
            self.assertEqual([j["status"] for j in every if j["cluster"] == "autos"],
                             ["SUCCEEDED"])
            self.assertGreater(len([j for j in every if j["cluster"] == CLUSTER]), 3)
            both = self.h.herd("queue", CLUSTER, "autos").stdout.decode()
            self.assertEqual(re.findall(r"^Job queue of cluster (\S+)$", both, re.M),
                             [CLUSTER, "autos"])
            p = self.h.herd("queue", CLUSTER, "nosuch", check=False)
            self.assertEqual((p.returncode, p.stdout), (102, b""), p.stderr)
            self.assertIn(b"nosuch", p.stderr)
            self.h.herd("autostop", "autos", "-i", "0")
            self.assertEqual(self.h.clusters()["autos"]["autostop"], 0)
            wait_for(lambda: self.h.clusters()["autos"]["status"] == "STOPPED",
                     "idle cluster was not stopped")
            self.assertEqual(len(namespaces_of("autos")), 2)  # stopped: machines stay
            p = self.h.herd("queue")  # a stopped cluster has no queue to show: said, not failed
            self.assertIn(b"Cluster autos is STOPPED: no job queue to show", p.stderr)
            self.assertIn(f"Job queue of cluster {CLUSTER}\n".encode(), p.stdout)
            self.assertNotIn(b"Job queue of cluster autos", p.stdout)
            # Launched with -i 0 --down: the head tears its own cluster down when idle.
            self.h.herd("launch", "-c", "autod", "-y", "-i", "0", "--down", "--", "echo", "hi")
            wait_for(lambda: "autod" not in self.h.clusters(), "idle cluster was not torn down")
            self.assertEqual(namespaces_of("autod"), [])
            p = self.h.herd("down", "autos", "-a", "-y", check=False)
            self.assertEqual(p.returncode, 2)
            self.assertIn(b"give cluster names or -a, not both", p.stderr)
        finally:
            # Several at once; one that is gone already does not keep the other from going.
            p = self.h.herd("down", "autod", "autos", "-y", check=False)
        self.assertEqual(p.returncode, 102, p.stderr)
        self.assertIn(b"autod", p.stderr)
        self.assertIn(b"Cluster autos terminated.", p.stderr)
        self.assertEqual(namespaces_of("autos"), [])

    def test_g2_status_refresh_finds_nodes_that_stopped(self):
        # A node whose processes all ended (a machine powered off) without `herd stop`: the head
        # is silent and the record still says UP; `status -r` asks the provider and records it.
        try:
            self.h.herd("launch", "-c", "refr", "-y", "--", "echo", "hi")
            (ns,) = [n for n in namespaces_of("refr") if not n.endswith("-br")]
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            self.assertTrue(pids)
            subprocess.run(["kill", "-KILL", *pids], check=False)
            deadline = time.time() + 30
            while subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                 text=True).stdout.split() and time.time() < deadline:
                time.sleep(0.2)
            self.assertEqual(self.h.clusters()["refr"]["status"], "INIT")
            p = self.h.herd("status", "-r", "refr")
            self.assertRegex(p.stdout.decode(), r"\nrefr +local .* STOPPED ")
            self.assertEqual(self.h.clusters()["refr"]["status"], "STOPPED")
            self.h.herd("start", "refr", "-y")
            self.assertEqual(self.h.clusters()["refr"]["status"], "UP")
        finally:
            self.h.herd("down", "refr", "-y", check=False)
        self.assertEqual(namespaces_of("refr"), [])

    def test_e2_head_refuses_a_client_certificate_of_another_ca(self):
        certs = os.path.join(self.h.env["HERD_HOME"], "clusters", CLUSTER, "certs")
        other = os.path.join(self.h.dir, "other-ca")
        self.h.herd("certs", "init", other, "--cluster", "other")
        saved = {}
        for name in ("client.crt", "client.key"):
            with open(os.path.join(certs, name), "rb") as f:
                saved[name] = f.read()
            with open(os.path.join(other, name), "rb") as f, \
                    open(os.path.join(certs, name), "wb") as g:
                g.write(f.read())
        try:
            t0 = time.time()
            p = self.h.herd("queue", CLUSTER, check=False, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(b"cannot reach the head", p.stderr)
            self.assertLess(time.time() - t0, 20)
        finally:
            for name, data in saved.items():
                with open(os.path.join(certs, name), "wb") as g:
                    g.write(data)
        self.assertEqual(self.h.herd("queue", CLUSTER).returncode, 0)

    def test_f_two_launches_of_one_name_at_once(self):
        results = {}

        def go(i):
            results[i] = self.h.herd("launch", "-c", "twin", "-y", "--", "echo", "twin", str(i),
                                     check=False)
        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            for i in range(2):
                self.assertEqual(results[i].returncode, 0, results[i].stderr)
                self.assertIn(b"twin %d\n" % i, results[i].stdout)
            self.assertEqual(len(namespaces_of("twin")), 2)  # one node + bridge: one cluster
            with open(self.ssh_config("twin")) as f:
                self.assertIn("Host twin\n", f.read())
        finally:
            self.h.herd("down", "twin", "-y", "-q")
        self.assertEqual(namespaces_of("twin"), [])
        self.assertNotIn("twin", self.h.clusters())
        self.assertFalse(os.path.exists(self.ssh_config("twin")))  # `ssh twin` is gone too

    def ssh_config(self, cluster):
        return os.path.join(self.h.env["HERD_HOME"], "ssh", f"{cluster}.config")

    def test_h_quiet_prints_no_progress(self):
        p = self.h.herd("exec", CLUSTER, "-q", "--", "echo", "quiet")
        self.assertIn(b"quiet\n", p.stdout)
        self.assertNotIn(b"Syncing", p.stderr)
        self.assertNotIn(b"(0/", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
