"""The team API server as its users drive it: `herd api start` (SQLite in its home, its own CA),
an admin adding users, two users logged in from homes of their own, each command of the CLI run
through the server on a 2-node local cluster (namespaces, sshd, herdlet: all real), isolation
between the users, tokens refused for every reason with exit 2, requests (--async, logs, a server
killed with SIGKILL and started again), the audit trail, and logout back to local mode. Needs root
(network namespaces); skipped otherwise."""

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (HERD, HerdEnv, herdlets_in, namespaces_of, netns_available,  # noqa: E402
                      wait_for)

HERD_API = os.environ.get("HERD_API", "")
PG_BIN = "/usr/lib/postgresql/15/bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client(HerdEnv):
    """A user's machine: a HOME and HERD_HOME of its own, logged in to the server."""

    def __init__(self, prefix):
        super().__init__(prefix)
        self.env["HERD_API_BINARY"] = HERD_API

    def out(self, *args, **kw):
        return self.herd(*args, **kw).stdout.decode()

    def close(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipUnless(os.geteuid() == 0 and netns_available() and HERD_API,
                     "needs root, ip netns and HERD_API (the herd-api binary)")
class ApiServerTest(unittest.TestCase):
    CLUSTER = "hapi1"
    DB = None  # a database URL; None: SQLite in the server's home

    @classmethod
    def setUpClass(cls):
        cls.server_dir = tempfile.mkdtemp(prefix="herd-apisrv-")
        cls.home = os.path.join(cls.server_dir, "api")
        cls.port = free_port()
        cls.admin = Client("apiadm")
        cls.alice = Client("apialice")
        cls.bob = Client("apibob")
        try:
            cls.start_server()
            cls.info = json.loads(cls.admin.out("api", "status", "--home", cls.home, "-o", "json"))
            with open(cls.info["admin_token"]) as f:
                token = f.read().strip()
            cls.admin.herd("api", "login", "-e", cls.info["endpoint"], "--token", token,
                           "--ca-cert", cls.info["ca_cert"])
            for c, name in ((cls.alice, "alice"), (cls.bob, "bob")):
                added = json.loads(cls.admin.out("api", "users", "add", name, "-o", "json"))
                c.token = added["token"]
                c.herd("api", "login", "-e", cls.info["endpoint"], "--token", c.token,
                       "--ca-cert", cls.info["ca_cert"])
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start_server(cls, *extra):
        db = ["--db", cls.DB] if cls.DB else []
        cls.admin.herd("api", "start", "--home", cls.home, "--port", str(cls.port), *db, *extra,
                       timeout=60)

    @classmethod
    def tearDownClass(cls):
        try:
            # Through the server, as the user would; then the server goes.
            if hasattr(cls, "info"):
                cls.alice.herd("down", cls.CLUSTER, "-y", check=False, timeout=300)
        finally:
            cls.admin.herd("api", "stop", "--home", cls.home, check=False, timeout=60)
            for c in (cls.admin, cls.alice, cls.bob):
                c.close()
            # The commands the server ran for the users keep their state in its home: a down that
            # failed above is finished here, as that user, locally.
            users = os.path.join(cls.home, "users")
            if os.path.isdir(users):
                for user in os.listdir(users):
                    uhome = os.path.join(users, user)
                    env = dict(os.environ, HOME=uhome, HERD_HOME=os.path.join(uhome, "herd"),
                               HERD_API_SERVER="local")
                    subprocess.run([HERD, "jobs", "cancel", "-a", "-y"], env=env,
                                   capture_output=True, timeout=300)
                    subprocess.run([HERD, "down", cls.CLUSTER, "-y"], env=env,
                                   capture_output=True, timeout=300)
            import shutil
            shutil.rmtree(cls.server_dir, ignore_errors=True)
        assert namespaces_of(cls.CLUSTER) == [], namespaces_of(cls.CLUSTER)
        for pid in getattr(cls, "warm_pids", []):  # warm workers end with their server
            assert not os.path.exists(f"/proc/{pid}"), f"warm worker {pid} outlived the server"
        left = subprocess.run(["pgrep", "-f", cls.home], capture_output=True).stdout.decode()
        assert left.strip() == "", f"processes of the server's home left: {left}"

    # ---- the server itself

    def test_00_status_names_pid_endpoint_ca_and_admin_token(self):
        info = self.info
        self.assertTrue(info["running"])
        self.assertTrue(info["healthy"])
        self.assertEqual(info["endpoint"], f"https://127.0.0.1:{self.port}")
        self.assertTrue(os.path.exists(info["ca_cert"]))
        mode = stat.S_IMODE(os.stat(info["admin_token"]).st_mode)
        self.assertEqual(mode, 0o600)
        os.kill(info["pid"], 0)
        # The client's config keeps the token, readable by its user only.
        cfg = os.path.join(self.alice.env["HERD_HOME"], "config.yaml")
        self.assertEqual(stat.S_IMODE(os.stat(cfg).st_mode), 0o600)

    def test_01_refused_tokens_get_exit_2_and_one_line(self):
        bad = dict(self.alice.env, HERD_API_TOKEN="herd_0123456789abcdef_" + "A" * 43)
        for env in (bad, dict(self.alice.env, HERD_API_TOKEN="not-a-token")):
            p = subprocess.run([HERD, "status"], env=env, capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            lines = p.stderr.decode().strip().splitlines()
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("unauthenticated", lines[0])
        # Expired and revoked tokens say so.
        short = json.loads(self.alice.out("api", "tokens", "create", "--expires", "1s", "-o",
                                          "json"))
        other = json.loads(self.alice.out("api", "tokens", "create", "-o", "json"))
        self.alice.herd("api", "tokens", "revoke", other["id"])
        time.sleep(1.5)
        for token, why in ((short["token"], "expired"), (other["token"], "revoked")):
            p = subprocess.run([HERD, "queue", self.CLUSTER], env=dict(self.alice.env,
                                                                   HERD_API_TOKEN=token),
                               capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(why, p.stderr.decode())
        # A user may not add users.
        p = self.alice.herd("api", "users", "add", "mallory", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("admin", p.stderr.decode())

    # ---- commands through the server

    def test_10_launch_exec_logs_queue_through_the_server(self):
        wd = os.path.join(self.alice.dir, "wd")
        os.makedirs(wd)
        with open(os.path.join(wd, "data.txt"), "w") as f:
            f.write("from-the-laptop\n")
        task = os.path.join(self.alice.dir, "task.yaml")
        with open(task, "w") as f:
            f.write(f"name: apitask\nworkdir: {wd}\nnum_nodes: 2\n"
                    "run: echo rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES $(cat data.txt)\n")
        p = self.alice.herd("launch", "-c", self.CLUSTER, "-y", task, timeout=300)
        out = p.stdout.decode()
        self.assertIn("rank 0 of 2 from-the-laptop", out)
        self.assertIn("rank 1 of 2 from-the-laptop", out)
        self.assertIn("Job finished (status: SUCCEEDED)", p.stderr.decode())

        # The same output, -o json and exit codes as local mode.
        clusters = json.loads(self.alice.out("status", "-o", "json"))
        self.assertEqual([c["name"] for c in clusters], [self.CLUSTER])
        self.assertEqual(clusters[0]["status"], "UP")
        p = self.alice.herd("exec", self.CLUSTER, "-d", "--", "echo", "second")
        self.assertIn("Job submitted, ID: 2", p.stderr.decode())
        p = self.alice.herd("logs", self.CLUSTER, "2")
        self.assertIn("second", p.stdout.decode())
        # Secrets reach the job through the server (in the request body, then the command's
        # stdin), never its argv.
        p = self.alice.herd("exec", self.CLUSTER, "--secret", "API_KEY=s3cr3t", "--",
                            'test "$API_KEY" = s3cr3t && echo secret-ok')
        self.assertIn("secret-ok", p.stdout.decode())
        p = self.alice.herd("exec", self.CLUSTER, "--", "exit 3", check=False)
        self.assertEqual(p.returncode, 100)
        jobs = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        self.assertEqual([j["status"] for j in jobs],
                         ["FAILED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"])
        self.assertEqual({j["user"] for j in jobs}, {"alice"})
        p = self.alice.herd("logs", self.CLUSTER, "99", check=False)
        self.assertEqual(p.returncode, 102)

    def warm_workers(self):
        """pid -> user of the server's warm workers (`herd _serve` children of the server)."""
        workers = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.info["pid"] and argv[1:2] == [b"_serve"]:
                workers[int(pid)] = env.get(b"USER", b"").decode()
        return workers

    def alice_local(self):
        """The environment of local mode on alice's state inside the server's home."""
        return dict(os.environ, HOME=os.path.join(self.home, "users", "alice"),
                    HERD_HOME=os.path.join(self.home, "users", "alice", "herd"),
                    HERD_API_SERVER="local")

    def test_15_reads_run_in_the_users_warm_worker(self):
        # status and queue through the server answer what local mode on the user's state does,
        # from a warm worker of the user's own, the same one read after read.
        local = self.alice_local()
        for args in (("status", "-o", "json"), ("queue", self.CLUSTER, "-o", "json"),
                     ("logs", self.CLUSTER, "1", "--no-follow")):
            remote = self.alice.herd(*args)
            here = subprocess.run([HERD, *args], env=local, capture_output=True, timeout=60)
            self.assertEqual(here.returncode, 0, here.stderr)
            if args[0] == "logs":
                self.assertIn("rank 1 of 2 from-the-laptop", remote.stdout.decode())
                self.assertEqual(remote.stdout, here.stdout)
            else:
                self.assertEqual(json.loads(remote.stdout), json.loads(here.stdout), args)
        workers = self.warm_workers()
        self.assertEqual(sorted(workers.values()), ["alice"], workers)
        for _ in range(3):
            self.alice.out("queue", self.CLUSTER)
        self.assertEqual(self.warm_workers(), workers)  # reused, not replaced
        # The worker keeps its head connection between reads: a head that stopped and started
        # again (a new herdlet, the same jobs) answers the same worker's next read on a new one.
        before = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        head_ns = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                               text=True).stdout.split()
                   if ns.startswith("herd-") and self.CLUSTER in ns and ns.endswith("-0")]
        self.assertEqual(len(head_ns), 1, head_ns)
        agent = herdlets_in(head_ns[0])
        self.assertTrue(agent)
        self.alice.herd("stop", self.CLUSTER, "-y", timeout=180)
        self.alice.herd("start", self.CLUSTER, "-y", timeout=180)
        self.assertNotEqual(herdlets_in(head_ns[0]), agent)
        self.assertTrue(herdlets_in(head_ns[0]))
        after_restart = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        self.assertEqual([(j["id"], j["status"]) for j in after_restart],
                         [(j["id"], j["status"]) for j in before])
        self.assertEqual(self.warm_workers(), workers)
        self.assertEqual(json.loads(self.bob.out("status", "-o", "json")), [])
        after = self.warm_workers()
        self.assertEqual(sorted(after.values()), ["alice", "bob"], after)
        type(self).warm_pids = list(after)
        # A read's exit code and error come back as from a child: an unknown cluster is 102.
        p = self.alice.herd("queue", "no-such-cluster", check=False)
        self.assertEqual(p.returncode, 102, p.stderr)
        self.assertIn("does not exist", p.stderr.decode())

    def restart_server(self, *extra):
        self.admin.herd("api", "stop", "--home", self.home, timeout=60)
        type(self).start_server(*extra)
        type(self).info = json.loads(self.admin.out("api", "status", "--home", self.home, "-o",
                                                    "json"))

    def test_17_without_warm_workers_reads_answer_the_same(self):
        # `herd api start --warm-workers 0`: every read is a `herd` child process of its own; the
        # user sees exactly what the warm workers gave.
        # (Tables say "N ago", which may change between two reads: -o json instead.)
        reads = (("status", "-o", "json"), ("queue", self.CLUSTER, "-o", "json"),
                 ("logs", self.CLUSTER, "1", "--no-follow"), ("queue", "no-such-cluster"))
        warm = [self.alice.herd(*args, check=False) for args in reads]
        self.assertTrue(self.warm_workers())
        self.restart_server("--warm-workers", "0")
        try:
            for args, before in zip(reads, warm):
                p = self.alice.herd(*args, check=False)
                self.assertEqual(p.returncode, before.returncode, (args, p.stderr))
                self.assertEqual(p.stderr, before.stderr, args)
                if args[-1] == "json":
                    self.assertEqual(json.loads(p.stdout), json.loads(before.stdout), args)
                else:
                    self.assertEqual(p.stdout, before.stdout, args)
            self.assertEqual(warm[2].returncode, 0)
            self.assertIn(b"rank 1 of 2 from-the-laptop", warm[2].stdout)
            self.assertEqual(warm[3].returncode, 102)
            # No read started a warm worker.
            self.assertEqual(self.warm_workers(), {})
        finally:
            self.restart_server()

    def test_22_concurrent_reads_share_runs_and_each_gets_its_own_answer(self):
        # Many reads at once: the same words of one user share a run (read_coalescer.hpp), other
        # words and other users never do. Each answer is the one a read alone gets: alice's
        # cluster for alice, nothing for bob, the queue with every job.
        alone = {
            ("alice", "status"): json.loads(self.alice.out("status", "-o", "json")),
            ("alice", "queue"): json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json")),
            ("bob", "status"): json.loads(self.bob.out("status", "-o", "json")),
        }
        self.assertEqual(alone[("bob", "status")], [])
        words = {"status": ["status", "-o", "json"],
                 "queue": ["queue", self.CLUSTER, "-o", "json"]}
        procs = []
        for i in range(30):
            who, what = (("alice", "status"), ("alice", "queue"), ("bob", "status"))[i % 3]
            client = self.alice if who == "alice" else self.bob
            procs.append(((who, what), subprocess.Popen(
                [HERD, *words[what]], env=client.env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)))
        for key, p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, (key, err))
            got = json.loads(out)
            if key[1] == "status":
                self.assertEqual([c["name"] for c in got],
                                 [c["name"] for c in alone[key]], key)
            else:
                self.assertEqual([(j["id"], j["status"]) for j in got],
                                 [(j["id"], j["status"]) for j in alone[key]], key)
        # A read that starts after a change sees it, however many reads of the same words run
        # around it: a job submitted while alice's queue is read over and over is in the queue
        # read right after the submission returns.
        stop = time.time() + 60
        readers_done = []

        def reader():
            while time.time() < stop and not readers_done:
                subprocess.run([HERD, *words["queue"]], env=self.alice.env,
                               capture_output=True, timeout=120)

        import threading
        threads = [threading.Thread(target=reader) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            for _ in range(3):
                p = self.alice.herd("exec", self.CLUSTER, "-d", "--", "true")
                job = int(re.search(r"Job submitted, ID: (\d+)", p.stderr.decode()).group(1))
                ids = [j["id"] for j in json.loads(self.alice.out(*words["queue"]))]
                self.assertIn(job, ids)
        finally:
            readers_done.append(True)
            for t in threads:
                t.join()

    def test_20_another_users_cluster_does_not_exist_for_them(self):
        self.assertEqual(json.loads(self.bob.out("status", "-o", "json")), [])
        for args in (("queue", self.CLUSTER), ("logs", self.CLUSTER, "1"),
                     ("down", self.CLUSTER, "-y"), ("exec", self.CLUSTER, "--", "true")):
            p = self.bob.herd(*args, check=False)
            self.assertEqual(p.returncode, 102, (args, p.stderr))
            self.assertIn("does not exist", p.stderr.decode())
        p = self.bob.herd("launch", "-c", self.CLUSTER, "-y", "--", "true", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("taken", p.stderr.decode())
        # Still alice's, untouched.
        jobs = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        self.assertEqual(len(jobs), 4)

    def test_24_a_long_read_streams_whole(self):
        # A read whose answer outgrows what the server holds back for one write (a frame:
        # kApiMaxFrameBytes, 256 KiB) streams: every byte arrives, in order, as local mode
        # prints it.
        p = self.alice.herd("exec", self.CLUSTER, "-d", "--", "seq 1 60000")
        job = re.search(r"Job submitted, ID: (\d+)", p.stderr.decode()).group(1)
        self.alice.herd("logs", self.CLUSTER, job, timeout=120)  # follows to the job's end
        args = ("logs", self.CLUSTER, job, "--no-follow")
        remote = self.alice.herd(*args)
        here = subprocess.run([HERD, *args], env=self.alice_local(), capture_output=True,
                              timeout=60)
        self.assertEqual(here.returncode, 0, here.stderr)
        self.assertGreater(len(remote.stdout), 256 << 10)
        self.assertEqual(remote.stdout, here.stdout)
        self.assertIn(b"60000", remote.stdout)
        self.assertTrue(self.warm_workers())

    def test_30_requests_async_logs_and_audit(self):
        p = self.alice.herd("--async", "exec", self.CLUSTER, "--", "echo", "async-run")
        req = p.stdout.decode().strip()
        self.assertTrue(req.startswith("req-"), req)
        p = self.alice.herd("api", "logs", req, timeout=120)
        self.assertIn("async-run", p.stdout.decode())
        reqs = json.loads(self.alice.out("api", "requests", "-o", "json"))
        mine = {r["id"]: r for r in reqs}
        self.assertEqual(mine[req]["state"], "SUCCEEDED")
        self.assertEqual(mine[req]["verb"], "exec")
        self.assertEqual({r["user"] for r in reqs}, {"alice"})
        self.assertTrue(any(r["verb"] == "launch" and r["state"] == "SUCCEEDED" for r in reqs))
        # bob does not see alice's requests, nor may he list everyone's; the admin may.
        self.assertEqual(json.loads(self.bob.out("api", "requests", "-o", "json")), [])
        p = self.bob.herd("api", "logs", req, check=False)
        self.assertEqual(p.returncode, 102)
        p = self.bob.herd("api", "requests", "-u", check=False)
        self.assertNotEqual(p.returncode, 0)
        everyone = json.loads(self.admin.out("api", "requests", "-u", "-o", "json"))
        self.assertIn(req, {r["id"] for r in everyone})
        audit = json.loads(self.admin.out("api", "audit", "-o", "json"))
        self.assertTrue(any(a["user"] == "alice" and a["verb"] == "launch" and
                            a["target"] == self.CLUSTER and a["result"] == "ok" for a in audit))
        self.assertTrue(any(a["user"] == "bob" and a["verb"] == "launch" and
                            a["result"].startswith("refused") for a in audit))
        p = self.alice.herd("api", "audit", check=False)
        self.assertNotEqual(p.returncode, 0)

    def test_40_a_killed_server_fails_what_it_was_running_when_it_starts_again(self):
        p = self.alice.herd("--async", "exec", self.CLUSTER, "--", "sleep", "60")
        req = p.stdout.decode().strip()
        wait_for(lambda: {r["id"]: r for r in json.loads(
            self.alice.out("api", "requests", "-o", "json"))}[req]["state"] == "RUNNING")
        os.kill(self.info["pid"], signal.SIGKILL)
        wait_for(lambda: subprocess.run(["kill", "-0", str(self.info["pid"])],
                                        capture_output=True).returncode != 0)
        type(self).start_server()
        type(self).info = json.loads(self.admin.out("api", "status", "--home", self.home, "-o",
                                                    "json"))
        reqs = {r["id"]: r for r in json.loads(self.alice.out("api", "requests", "-o", "json"))}
        self.assertEqual(reqs[req]["state"], "FAILED")
        self.assertIn("server stopped", reqs[req]["message"])
        self.assertFalse(any(r["state"] in ("PENDING", "RUNNING") for r in reqs.values()))
        # The users and their clusters are still there.
        self.assertEqual([c["name"] for c in json.loads(self.alice.out("status", "-o", "json"))],
                         [self.CLUSTER])
        self.alice.herd("cancel", self.CLUSTER, "-a")

    def test_45_a_managed_job_outlives_its_client_and_a_killed_server(self):
        ckpt = os.path.join(self.alice.dir, "ckpt")
        os.makedirs(ckpt)
        name = f"{self.CLUSTER}mj"
        task = os.path.join(self.alice.dir, "mj.yaml")
        with open(task, "w") as f:
            f.write(f"""name: {name}
num_nodes: 2
resources:
  job_recovery:
    strategy: FAILOVER
envs:
  CKPT: {ckpt}
run: |
  d=$CKPT/$SKYPILOT_TASK_ID; mkdir -p $d
  if [ "$SKYPILOT_NODE_RANK" = 0 ]; then
    step=$(cat $d/step 2>/dev/null || echo 0)
    echo "resuming at step $step (attempt $HERD_ATTEMPT)"
    while [ $step -lt 16 ]; do step=$((step + 1)); echo $step > $d/s && mv $d/s $d/step; \
      sleep 0.5; done
  else
    while [ "$(cat $d/step 2>/dev/null || echo 0)" -lt 16 ]; do sleep 0.2; done
  fi
""")
        # Launched through the server and detached: no process of the client side is left.
        p = self.alice.herd("jobs", "launch", "-d", "-y", task, timeout=120)
        job = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        self.assertEqual(subprocess.run(["pgrep", "-f", self.alice.dir],
                                        capture_output=True).stdout, b"")

        def queue():
            return {j["id"]: j for j in json.loads(
                self.alice.out("jobs", "queue", "-o", "json"))}[job]

        def wait(pred, what, timeout=120):
            deadline = time.time() + timeout
            while time.time() < deadline:
                j = queue()
                if pred(j):
                    return j
                time.sleep(0.3)
            self.fail(f"managed job {job}: no {what} within {timeout} s: {queue()}")

        j = wait(lambda j: j["status"] == "RUNNING", "RUNNING")
        first = j["cluster"]
        step = os.path.join(ckpt, j["task_id"], "step")
        deadline = time.time() + 60
        def at_step():
            try:
                with open(step) as f:
                    return int(f.read() or 0)
            except (OSError, ValueError):
                return 0

        while at_step() < 3:
            self.assertLess(time.time(), deadline, "no checkpoint at step 3")
            time.sleep(0.2)
        # The server dies (SIGKILL) and, while it is gone, so does a worker node.
        os.kill(self.info["pid"], signal.SIGKILL)
        wait_for(lambda: subprocess.run(["kill", "-0", str(self.info["pid"])],
                                        capture_output=True).returncode != 0)
        for pid in subprocess.run(["ip", "netns", "pids", f"herd-{first}-1"], capture_output=True,
                                  text=True).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        type(self).start_server()
        type(self).info = json.loads(self.admin.out("api", "status", "--home", self.home, "-o",
                                                    "json"))
        j = wait(lambda j: j["status"] == "SUCCEEDED" or j["recoveries"] >= 1, "recovery")
        j = wait(lambda j: j["status"] not in ("RUNNING", "RECOVERING", "PENDING", "STARTING"),
                 "the end", timeout=180)
        self.assertEqual(j["status"], "SUCCEEDED", j)
        self.assertEqual(j["recoveries"], 1, j)  # no extra recovery for the server's restart
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"])
        logs = self.alice.out("jobs", "logs", str(job), "--no-follow")
        resumed = int(re.search(r"resuming at step (\d+) \(attempt 2\)", logs).group(1))
        self.assertGreaterEqual(resumed, 3)
        self.assertEqual(namespaces_of(first), [])

    def test_50_logout_returns_to_local_mode(self):
        self.bob.herd("api", "logout")
        self.assertEqual(json.loads(self.bob.out("status", "-o", "json")), [])
        self.assertFalse(os.path.exists(os.path.join(self.bob.env["HERD_HOME"], "config.yaml")))


class Postgres:
    """A PostgreSQL 15 of the test's own: a temporary directory owned by postgres, a free loopback
    port, stopped and removed by stop()."""

    def __init__(self):
        import pwd
        self.dir = tempfile.mkdtemp(prefix="herd-apipg-")
        pw = pwd.getpwnam("postgres")
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.started = False

        def run(*argv):
            p = subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True,
                               timeout=120)
            if p.returncode != 0:
                raise AssertionError(f"{argv} exited {p.returncode}: {p.stderr.decode()}")

        try:
            run(f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres")
            run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-o",
                f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "-l",
                os.path.join(self.dir, "log"), "-w", "start")
            self.started = True
        except BaseException:
            self.stop()
            raise
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self):
        import shutil
        if self.started:
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D",
                            self.data, "-m", "immediate", "stop"], capture_output=True,
                           timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipUnless(os.path.exists(f"{PG_BIN}/initdb"), "needs PostgreSQL 15 (postgresql-15)")
class ApiServerPostgresTest(ApiServerTest):
    """The same cases with the server's state in PostgreSQL."""

    CLUSTER = "hapi2"

    @classmethod
    def setUpClass(cls):
        cls.pg = Postgres()
        cls.DB = cls.pg.url
        try:
            super().setUpClass()
        except BaseException:
            cls.pg.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.pg.stop()

    def test_60_the_database_is_postgresql(self):
        self.assertTrue(self.info["db"].startswith("postgresql://postgres@127.0.0.1:"),
                        self.info["db"])
        # Nothing of the server's state in its home's SQLite file.
        self.assertFalse(os.path.exists(os.path.join(self.home, "api.db")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
