"""Managed jobs under team servers (controller/server/job_keeper.hpp): the server supervises each
job's controller. A controller SIGKILLed alone is resumed by its server and follows the same
cluster job to the end (one attempt, no recovery, no line of its log lost or doubled). Two servers
on one PostgreSQL with one shared --state-dir (and one TLS certificate) both serve every request;
SIGKILL the server that runs a job's controller and the other one resumes it within
limits::kManagedTakeoverWithin (15 s), with nothing relaunched. 1-node local clusters named
hha*; servers on 127.0.150.1. Needs root (network namespaces) and PostgreSQL 15."""

import json
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
from herd_env import HERD, netns_available, wait_for  # noqa: E402
from api_server_test import HERD_API, PG_BIN, Client, Postgres, free_port  # noqa: E402

HOST = "127.0.150.1"
TAKEOVER_WITHIN = 15  # limits::kManagedTakeoverWithin


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def argv0(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0]
    except OSError:
        return b""


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@unittest.skipUnless(os.geteuid() == 0 and netns_available() and HERD_API and
                     os.path.exists(f"{PG_BIN}/initdb"),
                     "needs root, ip netns, HERD_API (herd-api) and PostgreSQL 15")
class ApiHaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="herd-apiha-")
        cls.state = os.path.join(cls.dir, "state")  # the "shared filesystem"
        cls.homes = [os.path.join(cls.dir, "a"), os.path.join(cls.dir, "b")]
        cls.ports = [free_port(), free_port()]
        cls.admin = Client("hhaadm")
        cls.alice = [Client("hhaalice0"), Client("hhaalice1")]  # one per server
        cls.pg = None
        try:
            cls.pg = Postgres()
            cls.start_server(0)
            cls.info = [cls.status(0), None]
            # The second server: the same database, state and certificate (a load balancer's
            # pair), another home and port.
            cls.start_server(1, *cls.same_cert())
            cls.info[1] = cls.status(1)
            with open(cls.info[0]["admin_token"]) as f:
                token = f.read().strip()
            ca = cls.info[0]["ca_cert"]
            cls.admin.herd("api", "login", "-e", cls.info[0]["endpoint"], "--token", token,
                           "--ca-cert", ca)
            added = json.loads(cls.admin.out("api", "users", "add", "alice", "-o", "json"))
            for i, c in enumerate(cls.alice):
                c.herd("api", "login", "-e", cls.info[i]["endpoint"], "--token",
                       added["token"], "--ca-cert", ca)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start_server(cls, i, *extra):
        cls.admin.herd("api", "start", "--home", cls.homes[i], "--host", HOST, "--port",
                       str(cls.ports[i]), "--db", cls.pg.url, "--state-dir", cls.state, *extra,
                       timeout=60)

    @classmethod
    def same_cert(cls):
        """The first server's certificate, key and CA: what the second one serves."""
        tls = os.path.join(cls.homes[0], "tls")
        return ("--cert", os.path.join(tls, "server.crt"), "--key",
                os.path.join(tls, "server.key"), "--ca-cert", os.path.join(tls, "ca.crt"))

    @classmethod
    def status(cls, i):
        return json.loads(cls.admin.out("api", "status", "--home", cls.homes[i], "-o", "json"))

    @classmethod
    def tearDownClass(cls):
        try:
            for home in cls.homes:
                cls.admin.herd("api", "stop", "--home", home, check=False, timeout=60)
            users = os.path.join(cls.state, "users")
            if os.path.isdir(users):
                for user in os.listdir(users):
                    uhome = os.path.join(users, user)
                    env = dict(os.environ, HOME=uhome, HERD_HOME=os.path.join(uhome, "herd"),
                               HERD_API_SERVER="local")
                    subprocess.run([HERD, "jobs", "cancel", "-a", "-y"], env=env,
                                   capture_output=True, timeout=300)
                    listed = subprocess.run([HERD, "status", "-o", "json"], env=env,
                                            capture_output=True, timeout=120).stdout
                    for c in json.loads(listed or b"[]"):
                        subprocess.run([HERD, "down", c["name"], "-y"], env=env,
                                       capture_output=True, timeout=300)
        finally:
            for c in [cls.admin, *cls.alice]:
                c.close()
            if cls.pg:
                cls.pg.stop()
            shutil.rmtree(cls.dir, ignore_errors=True)
        left_ns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                             text=True).stdout.split() if n.startswith("herd-hha")]
        assert left_ns == [], left_ns
        left = subprocess.run(["pgrep", "-f", cls.dir], capture_output=True).stdout.decode()
        assert left.strip() == "", f"processes of the servers' homes left: {left}"

    # ---- helpers

    def write_task(self, name, steps):
        task = os.path.join(self.alice[0].dir, f"{name}.yaml")
        with open(task, "w") as f:
            f.write(f"""name: {name}
num_nodes: 1
run: |
  for i in $(seq 1 {steps}); do echo "step $i"; sleep 0.5; done
""")
        return task

    def sql(self, query):
        p = subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/psql", "-h", "127.0.0.1",
                            "-p", str(self.pg.port), "-U", "postgres", "-d", "postgres", "-tAc",
                            query], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [line.split("|") for line in p.stdout.splitlines() if line]

    def job(self, client, job_id):
        return {j["id"]: j for j in json.loads(client.out("jobs", "queue", "-o", "json"))}[job_id]

    def wait_job(self, client, job_id, pred, what, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.job(client, job_id)
            if pred(j):
                return j
            time.sleep(0.3)
        self.fail(f"managed job {job_id}: no {what} within {timeout} s: "
                  f"{self.job(client, job_id)}")

    def check_one_attempt(self, client, job_id, first):
        j = self.wait_job(client, job_id, lambda j: j["status"] not in (
            "PENDING", "STARTING", "RUNNING", "RECOVERING", "CANCELLING"), "end")
        self.assertEqual(j["status"], "SUCCEEDED", j)
        self.assertEqual(j["recoveries"], 0, j)
        self.assertEqual(len(j["attempts"]), 1, j)
        self.assertEqual(j["attempts"][0]["cluster_job_id"], first["attempts"][0]["cluster_job_id"])
        self.assertEqual(j["attempts"][0]["cluster"], first["attempts"][0]["cluster"])
        return j

    def check_log(self, client, job_id, steps):
        logs = client.out("jobs", "logs", str(job_id), "--no-follow")
        got = re.findall(r"\bstep (\d+)\r?$", logs, re.M)
        self.assertEqual(got, [str(i) for i in range(1, steps + 1)], logs[-2000:])

    # ---- cases

    def test_a_a_killed_controller_is_resumed_by_its_server(self):
        steps = 30
        task = self.write_task("hhaone", steps)
        c = self.alice[0]
        secret = "s3cret-" + os.urandom(6).hex()
        p = c.herd("jobs", "launch", "-d", "-y", "--secret", f"HHA_TOKEN={secret}", task,
                   timeout=120)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        first = self.wait_job(c, job_id, lambda j: j["status"] == "RUNNING" and
                              j["attempts"] and j["attempts"][0]["cluster_job_id"] > 0, "RUNNING")
        pid = first["controller_pid"]
        self.assertTrue(alive(pid))
        # The job's secrets are sealed in the database under its user, for its controllers; its
        # lease names the server that runs the controller.
        sealed = self.sql("SELECT owner, name, sealed FROM secrets")
        self.assertEqual([(o, n.startswith("managed_")) for o, n, _ in sealed], [("alice", True)])
        self.assertNotIn(secret, sealed[0][2])
        leases = self.sql(f"SELECT name, holder FROM leases WHERE name = 'managed/alice/{job_id}'")
        self.assertEqual(len(leases), 1, leases)
        # The controller is a child of a server (it dies with it), not of a command.
        self.assertIn(parent_of(pid), (self.info[0]["pid"], self.info[1]["pid"]))
        time.sleep(2)
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(wait_for(lambda: not alive(pid), 10))
        # While it is gone: not FAILED_CONTROLLER; then a new controller follows the same job.
        j = self.job(c, job_id)
        self.assertNotIn(j["status"], ("FAILED_CONTROLLER",), j)
        self.wait_job(c, job_id, lambda j: j["controller_pid"] not in (0, pid) and
                      alive(j["controller_pid"]), "resumed controller", timeout=30)
        self.check_one_attempt(c, job_id, first)
        self.check_log(c, job_id, steps)
        # Over: its secrets and its lease are gone.
        self.assertTrue(wait_for(lambda: self.sql("SELECT name FROM secrets") == [] and self.sql(
            f"SELECT name FROM leases WHERE name = 'managed/alice/{job_id}'") == [], 20))

    def test_c_a_silent_head_is_waited_for_not_declared_lost(self):
        """The resumed controller finds the head silent (its agent stopped for 8 s or more, its
        machine's sshd up): it waits for it (a connect or a stream that does not answer is asked
        again, the machine probed) instead of declaring the attempt lost."""
        steps = 40
        task = self.write_task("hhasil", steps)
        c = self.alice[0]
        p = c.herd("jobs", "launch", "-d", "-y", task, timeout=120)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        first = self.wait_job(c, job_id, lambda j: j["status"] == "RUNNING" and
                              j["attempts"] and j["attempts"][0]["cluster_job_id"] > 0, "RUNNING")
        head_ns = f"herd-{first['attempts'][0]['cluster']}-0"
        agents = [int(x) for x in subprocess.run(["ip", "netns", "pids", head_ns],
                                                 capture_output=True, text=True).stdout.split()
                  if b"herdlet" in argv0(int(x))]
        self.assertTrue(agents, f"no herdlet in {head_ns}")
        for a in agents:
            os.kill(a, signal.SIGSTOP)
        try:
            pid = first["controller_pid"]
            os.kill(pid, signal.SIGKILL)
            self.assertTrue(wait_for(lambda: not alive(pid), 10))
            # A new controller starts and keeps asking the silent head.
            self.wait_job(c, job_id, lambda j: j["controller_pid"] not in (0, pid) and
                          alive(j["controller_pid"]), "resumed controller", timeout=30)
            time.sleep(8)
        finally:
            for a in agents:
                os.kill(a, signal.SIGCONT)
        self.check_one_attempt(c, job_id, first)
        self.check_log(c, job_id, steps)
        log = os.path.join(self.state, "users", "alice", "herd", "managed_jobs", str(job_id),
                           "controller.log")
        with open(log) as f:
            seen = [line for line in f if "cannot reach" in line or "again" in line]
        print("".join(seen), file=sys.stderr)
        self.assertTrue(any("following cluster job" in line for line in seen), seen)

    def test_b_two_servers_share_state_and_take_over_a_dead_ones_jobs(self):
        steps = 50
        task = self.write_task("hhatwo", steps)
        c0, c1 = self.alice
        p = c0.herd("jobs", "launch", "-d", "-y", task, timeout=120)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        first = self.wait_job(c1, job_id, lambda j: j["status"] == "RUNNING" and
                              j["attempts"] and j["attempts"][0]["cluster_job_id"] > 0, "RUNNING")
        # Every request through either server sees the same clusters and jobs.
        cluster = first["attempts"][0]["cluster"]
        for c in self.alice:
            self.assertIn(cluster, [x["name"] for x in json.loads(c.out("status", "-o", "json"))])
            self.assertEqual(self.job(c, job_id)["task_id"], first["task_id"])
        # The server that runs the controller dies (SIGKILL), and its controller with it.
        pid = first["controller_pid"]
        holder = [i for i in (0, 1) if parent_of(pid) == self.info[i]["pid"]]
        self.assertEqual(len(holder), 1, (pid, parent_of(pid), self.info))
        dead, other = holder[0], 1 - holder[0]
        time.sleep(2)
        os.kill(self.info[dead]["pid"], signal.SIGKILL)
        killed_at = time.time()
        self.assertTrue(wait_for(lambda: not alive(self.info[dead]["pid"]) and not alive(pid), 10))
        survivor = self.alice[other]
        j = self.wait_job(survivor, job_id, lambda j: j["controller_pid"] not in (0, pid) and
                          alive(j["controller_pid"]), "controller on the other server",
                          timeout=TAKEOVER_WITHIN + 10)
        took = time.time() - killed_at
        self.assertLess(took, TAKEOVER_WITHIN, j)
        self.assertEqual(parent_of(j["controller_pid"]), self.info[other]["pid"])
        print(f"takeover in {took:.1f} s", file=sys.stderr)
        self.check_one_attempt(survivor, job_id, first)
        self.check_log(survivor, job_id, steps)
        # The dead server starts again and serves as before (its jobs are the other's now).
        type(self).start_server(dead, *(() if dead == 0 else self.same_cert()))
        type(self).info[dead] = self.status(dead)
        self.assertEqual(self.job(self.alice[dead], job_id)["status"], "SUCCEEDED")

    def test_d_a_dashboard_login_on_one_server_is_a_session_on_both(self):
        # Behind a load balancer the browser's requests land on either server: the one-time code
        # one server issued opens a session on the other, the cookie works on both, and a logout
        # on one ends it on both (the sessions live in the database, not a server's memory).
        import http.client
        import ssl
        import urllib.parse
        ctx = ssl.create_default_context(cafile=self.info[0]["ca_cert"])

        def request(i, method, target, headers=None):
            conn = http.client.HTTPSConnection(HOST, self.ports[i], context=ctx, timeout=30)
            try:
                conn.request(method, target, headers=headers or {})
                r = conn.getresponse()
                return r.status, r.getheader("Set-Cookie") or "", r.read()
            finally:
                conn.close()

        url = json.loads(self.alice[0].out("dashboard", "--no-open", "-o", "json"))["url"]
        parts = urllib.parse.urlsplit(url)
        self.assertEqual(parts.port, self.ports[0])
        status, cookie, _ = request(1, "GET", f"{parts.path}?{parts.query}")
        self.assertEqual(status, 303)
        m = re.match(r"herd_session=([0-9a-f]+);", cookie)
        self.assertTrue(m, cookie)
        session = {"Cookie": f"herd_session={m.group(1)}"}
        for i in (0, 1):
            status, _, body = request(i, "GET", "/dashboard/api/me", session)
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["name"], "alice")
        # Spent on both.
        self.assertEqual(request(0, "GET", f"{parts.path}?{parts.query}")[0], 401)
        origin = f"https://{HOST}:{self.ports[0]}"
        status, _, body = request(0, "POST", "/dashboard/logout", dict(session, Origin=origin))
        self.assertEqual(status, 200, body)
        for i in (0, 1):
            status, _, body = request(i, "GET", "/dashboard/api/me", session)
            self.assertEqual(status, 401, body)


if __name__ == "__main__":
    unittest.main(verbosity=2)
