"""The SDK through a real team API server: `herd api start` (its own CA, SQLite), a user added by
the admin and logged in with herd.api_login, then the seed's SDK flow on a 2-node local cluster
(namespaces, sshd, herdlet: all real) with no CLI process on the client side ($HERD points
nowhere): launch with a workdir, stream_and_get, tail_logs, exec, queue, status, cancel, down;
then a SkyPilot-style script (`import sky` through `python3 -m herd.sky_shim`) doing
sky.launch / stream_and_get / tail_logs / down on a 1-node cluster.

Needs root and ip netns, HERD (the herd binary) and HERD_API (herd-api); skipped otherwise.

    HERD=build/controller/herd HERD_API=build/controller/server/herd-api \\
        /usr/bin/python3 python/tests/test_sdk_remote_e2e.py
"""

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from contextlib import redirect_stdout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import herd  # noqa: E402

HERD = os.environ.get("HERD", "")
HERD_API = os.environ.get("HERD_API", "")
CLUSTER = "hsdkr1"
SKY_CLUSTER = "hsdkr2"
MANAGED = "hsdkrm"  # managed jobs' name: their clusters are hsdkrm-<id>-<attempt>
TIMEOUT_S = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usable():
    if os.geteuid() != 0 or not (os.path.isfile(HERD) and os.path.isfile(HERD_API)):
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0


def namespaces_of(cluster):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and cluster in
            line.split()[0]]


SKY_SCRIPT = textwrap.dedent("""\
    # The seed's SDK script (SkyPilot quickstart), with a task this machine can run.
    import sky

    minGPT_ddp_task = sky.Task(
        name="minGPT-ddp",
        resources=sky.Resources(cpus=1),
        setup=["echo setting up"],
        run=["echo training on $SKYPILOT_NUM_NODES nodes, rank $SKYPILOT_NODE_RANK"],
    )

    cluster_name = "{cluster}"
    launch_request = sky.launch(task=minGPT_ddp_task, cluster_name=cluster_name)
    job_id, _ = sky.stream_and_get(launch_request)
    code = sky.tail_logs(cluster_name, job_id, follow=True)
    print("SKY-SCRIPT job", job_id, "code", code, "module", sky.__file__)
    sky.down(cluster_name)
    raise SystemExit(code)
    """)


@unittest.skipUnless(usable(), "needs root, ip netns, HERD and HERD_API (binaries)")
class SdkThroughApiServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="herd-sdk-api-")
        os.chmod(cls.dir, 0o700)
        cls.server_home = os.path.join(cls.dir, "server")
        cls.saved_env = {k: os.environ.get(k) for k in (
            "HERD", "HERD_HOME", "HOME", "HERD_API_SERVER", "HERD_API_TOKEN", "HERD_API_CA_CERT")}
        cls.admin_env = dict(os.environ, HERD_HOME=os.path.join(cls.dir, "admin", "herd"),
                             HOME=os.path.join(cls.dir, "admin"), HERD_API_BINARY=HERD_API)
        for k in ("HERD_API_SERVER", "HERD_API_TOKEN", "HERD_API_CA_CERT"):
            cls.admin_env.pop(k, None)
        os.makedirs(cls.admin_env["HOME"])
        try:
            cls.admin("api", "start", "--home", cls.server_home, "--port", str(free_port()))
            cls.info = json.loads(cls.admin("api", "status", "--home", cls.server_home, "-o",
                                            "json"))
            with open(cls.info["admin_token"]) as f:
                cls.admin("api", "login", "-e", cls.info["endpoint"], "--token",
                          f.read().strip(), "--ca-cert", cls.info["ca_cert"])
            cls.token = json.loads(cls.admin("api", "users", "add", "carol", "-o",
                                             "json"))["token"]
            # The SDK's user: a home of their own, and no CLI at all.
            user_home = os.path.join(cls.dir, "carol")
            os.makedirs(user_home)
            os.environ.update(HOME=user_home, HERD_HOME=os.path.join(user_home, "herd"),
                              HERD=os.path.join(cls.dir, "no-herd-cli-here"))
            for k in ("HERD_API_SERVER", "HERD_API_TOKEN", "HERD_API_CA_CERT"):
                os.environ.pop(k, None)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def admin(cls, *args):
        p = subprocess.run([HERD, *args], env=cls.admin_env, capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"herd {' '.join(args)} exited {p.returncode}: {p.stderr}")
        return p.stdout

    @classmethod
    def tearDownClass(cls):
        try:
            if hasattr(cls, "token"):
                for name in (CLUSTER, SKY_CLUSTER):
                    try:
                        if herd.status(name):
                            herd.down(name)
                    except herd.HerdError as e:
                        print(f"cleanup: down {name}: {e}", file=sys.stderr)
        finally:
            subprocess.run([HERD, "api", "stop", "--home", cls.server_home], env=cls.admin_env,
                           capture_output=True, timeout=120)
            # What a failed down left: finished locally, as the user, in the server's home.
            users = os.path.join(cls.server_home, "users")
            if os.path.isdir(users):
                for user in os.listdir(users):
                    uhome = os.path.join(users, user)
                    env = dict(os.environ, HOME=uhome, HERD_HOME=os.path.join(uhome, "herd"),
                               HERD_API_SERVER="local")
                    subprocess.run([HERD, "jobs", "cancel", "-a", "-y"], env=env,
                                   capture_output=True, timeout=TIMEOUT_S)
                    for name in (CLUSTER, SKY_CLUSTER):
                        subprocess.run([HERD, "down", name, "-y"], env=env, capture_output=True,
                                       timeout=TIMEOUT_S)
            for k, v in cls.saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            shutil.rmtree(cls.dir, ignore_errors=True)
        left = namespaces_of("hsdkr")
        deadline = time.time() + 60  # a cancelled managed job's controller tears its cluster down
        while left and time.time() < deadline:
            time.sleep(0.5)
            left = namespaces_of("hsdkr")
        assert left == [], left

    def test_1_login(self):
        who = herd.api_login(self.info["endpoint"], self.token, ca_cert=self.info["ca_cert"])
        self.assertEqual(who["name"], "carol")
        self.assertEqual(herd.api_info()["endpoint"], self.info["endpoint"])
        self.assertEqual(herd.status(), [])

    def test_2_seed_flow_on_two_nodes(self):
        wd = os.path.join(self.dir, "wd")
        os.makedirs(wd, exist_ok=True)
        with open(os.path.join(wd, "data.txt"), "w") as f:
            f.write("from-the-laptop\n")
        task = herd.Task(name="sdkremote", num_nodes=2, workdir=wd,
                         resources=herd.Resources(cpus=1),
                         envs={"GREETING": "hello"},
                         setup="echo setup on $SKYPILOT_NODE_RANK",
                         run=["echo rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES "
                              "$(cat data.txt) $GREETING"])
        progress = io.StringIO()
        job_id, handle = herd.stream_and_get(herd.launch(task, CLUSTER), output=progress)
        self.assertEqual(job_id, 1)
        self.assertEqual(handle.cluster_name, CLUSTER)
        self.assertTrue(handle.head_ip)
        out = io.StringIO()
        with redirect_stdout(out):
            code = herd.tail_logs(CLUSTER, job_id, follow=True)
        self.assertEqual(code, herd.JOB_SUCCEEDED, out.getvalue())
        for rank in (0, 1):
            # The workdir was uploaded and synced.
            self.assertIn(f"rank {rank} of 2 from-the-laptop hello", out.getvalue())

        (cluster,) = herd.status(CLUSTER)
        self.assertEqual(cluster["status"], "UP")
        job_id2, _ = herd.get(herd.exec("exit 3", CLUSTER))
        self.assertEqual(job_id2, 2)
        with redirect_stdout(io.StringIO()):
            self.assertEqual(herd.tail_logs(CLUSTER, job_id2), herd.JOB_FAILED)
            self.assertEqual(herd.tail_logs(CLUSTER, 99, follow=False), herd.JOB_NOT_FOUND)
        job_id3, _ = herd.get(herd.exec("sleep 300", CLUSTER))
        herd.cancel(CLUSTER, job_id3)
        with redirect_stdout(io.StringIO()):
            self.assertEqual(herd.tail_logs(CLUSTER, job_id3), herd.JOB_CANCELLED)
        jobs = herd.queue(CLUSTER)
        self.assertEqual({j["id"]: j["status"] for j in jobs},
                         {1: "SUCCEEDED", 2: "FAILED", 3: "CANCELLED"})
        self.assertEqual(herd.job_status(CLUSTER, [1, 4]), {1: "SUCCEEDED", 4: None})
        herd.down(CLUSTER)
        self.assertEqual(herd.status(CLUSTER), [])
        with self.assertRaises(herd.HerdError) as e:
            herd.queue(CLUSTER)
        self.assertEqual(e.exception.returncode, 102)

    def test_3_secrets_reach_the_job_and_no_output(self):
        task = herd.Task(run="echo secret length ${#TOKEN_X}", secrets={"TOKEN_X": "shh"})
        job_id, _ = herd.stream_and_get(herd.launch(task, SKY_CLUSTER), output=io.StringIO())
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(herd.tail_logs(SKY_CLUSTER, job_id), herd.JOB_SUCCEEDED)
        self.assertIn("secret length 3", out.getvalue())
        self.assertNotIn("shh", out.getvalue())
        herd.down(SKY_CLUSTER)

    def wait_managed(self, job_id, states, timeout=180):
        deadline = time.time() + timeout
        while True:
            (job,) = [j for j in herd.jobs.queue() if j["id"] == job_id]
            if job["status"] in states or time.time() > deadline:
                return job
            time.sleep(0.5)

    def test_5_managed_jobs(self):
        done = herd.jobs.launch(herd.Task(name=MANAGED, run="echo managed-ok"))
        job = self.wait_managed(done, ("SUCCEEDED", "FAILED", "FAILED_SETUP",
                                       "FAILED_NO_RESOURCE", "FAILED_CONTROLLER", "CANCELLED"))
        self.assertEqual(job["status"], "SUCCEEDED", job)
        long = herd.jobs.launch(herd.Task(name=MANAGED, run="sleep 300"))
        self.assertGreater(long, done)
        self.assertEqual(self.wait_managed(long, ("RUNNING",))["status"], "RUNNING")
        self.assertEqual([j["id"] for j in herd.jobs.queue(skip_finished=True)], [long])
        herd.jobs.cancel(long)
        job = self.wait_managed(long, ("CANCELLED",))
        self.assertEqual(job["status"], "CANCELLED", job)
        self.assertEqual(herd.jobs.queue(skip_finished=True), [])

    def test_4_sky_script_through_the_shim(self):
        script = os.path.join(self.dir, "train.py")
        with open(script, "w") as f:
            f.write(SKY_SCRIPT.format(cluster=SKY_CLUSTER))
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        p = subprocess.run([sys.executable, "-m", "herd.sky_shim", script], env=env,
                           capture_output=True, text=True, timeout=TIMEOUT_S, cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("training on 1 nodes, rank 0", p.stdout)
        self.assertIn("SKY-SCRIPT job 1 code 0 module " +
                      os.path.join(REPO, "python", "herd", "sky_compat"), p.stdout)
        self.assertEqual(herd.status(SKY_CLUSTER), [])
        # The server ran it all: launch and down are the user's requests there.
        admin_requests = json.loads(self.admin("api", "requests", "--all-users", "-o", "json"))
        verbs = {(r["verb"], r["state"]) for r in admin_requests if r["user"] == "carol"}
        self.assertIn(("launch", "SUCCEEDED"), verbs)
        self.assertIn(("down", "SUCCEEDED"), verbs)


if __name__ == "__main__":
    unittest.main()
