"""Autostop of AWS clusters under a team server, as its user drives it: `herd api start` (on
127.0.245.1) with the server's own AWS credentials in its environment, a user logged in, and
aws_test.py's fake EC2 (on 127.0.244.1) handing out namespace hosts of pool hau0. `launch -i 1`
through the server makes no IAM user and puts no key on the head; once the head has been idle a
minute the server's sweep stops the cluster (StopInstances, never TerminateInstances) while
`herd status` shows AUTOSTOPPING, then STOPPED. `launch --down` (tear down when the job is done)
ends with the instances terminated and nothing of the cluster left. Needs root (network
namespaces) and HERD_API (the herd-api binary); skipped otherwise."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HERD, netns_available  # noqa: E402
import aws_test  # noqa: E402
from aws_test import REGION  # noqa: E402

HERD_API = os.environ.get("HERD_API", "")
SERVER_HOST = "127.0.245.1"
USER = "alice"


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@unittest.skipUnless(netns_available() and HERD_API,
                     "needs root, ip netns and HERD_API (the herd-api binary)")
class AwsServerAutostopTest(aws_test.AwsEnvTestCase):
    ENV_PREFIX = "hau"
    POOL = "hau0"
    BIND = "127.0.244.1"
    HOST_COUNT = 2
    CGROUP_CLUSTERS = ("haua", "haub")

    @classmethod
    def prepare_env(cls):
        super().prepare_env()
        # The server's side: its own home and its own credentials (a credentials file named by
        # its environment; its users' commands get HOME under the server's home), and the SSH
        # user of the fake's hosts in the user's herd home under the server.
        cls.srv_dir = tempfile.mkdtemp(prefix="herd-hau-srv-")
        cls.srv_home = os.path.join(cls.srv_dir, "api")
        cls.srv_env = dict(cls.h.env, HOME=os.path.join(cls.srv_dir, "home"),
                           HERD_HOME=os.path.join(cls.srv_dir, "herd"), HERD_API_BINARY=HERD_API,
                           AWS_SHARED_CREDENTIALS_FILE=os.path.join(cls.h.home, ".aws",
                                                                    "credentials"))
        os.makedirs(cls.srv_env["HOME"])
        cls.srv_herd("api", "start", "--home", cls.srv_home, "--host", SERVER_HOST, "--port",
                     str(free_port(SERVER_HOST)), timeout=60)
        info = json.loads(cls.srv_herd("api", "status", "--home", cls.srv_home, "-o",
                                       "json").stdout)
        with open(info["admin_token"]) as f:
            admin_token = f.read().strip()
        login = ["-e", info["endpoint"], "--ca-cert", info["ca_cert"]]
        cls.srv_herd("api", "login", "--token", admin_token, *login)
        added = json.loads(cls.srv_herd("api", "users", "add", USER, "-o", "json").stdout)
        cls.user_home = os.path.join(cls.srv_home, "users", USER)
        os.makedirs(os.path.join(cls.user_home, "herd"), exist_ok=True)
        with open(os.path.join(cls.user_home, "herd", "config.yaml"), "w") as f:
            f.write("aws:\n  ssh_user: root\n")
        # The test's env is the user's machine: every command goes through the server.
        cls.h.herd("api", "login", "--token", added["token"], *login)

    @classmethod
    def srv_herd(cls, *args, timeout=120):
        p = subprocess.run([HERD, *args], capture_output=True, timeout=timeout, env=cls.srv_env)
        if p.returncode != 0:
            raise AssertionError(f"herd {' '.join(args)} exited {p.returncode}\n"
                                 f"{p.stderr.decode(errors='replace')[-4000:]}")
        return p

    @classmethod
    def close_env(cls):
        try:
            if hasattr(cls, "srv_env"):
                try:  # through the server, as the user would
                    for name in list(cls.h.clusters()):
                        cls.h.herd("down", name, "-y", check=False)
                except AssertionError:
                    pass
                subprocess.run([HERD, "api", "stop", "--home", cls.srv_home],
                               capture_output=True, timeout=60, env=cls.srv_env)
                cls.h.env["HERD_API_SERVER"] = "local"  # the user's own machine holds nothing
                # What a down through the server left is downed here, as the user, locally.
                clusters = os.path.join(cls.user_home, "herd", "clusters")
                env = dict(cls.srv_env, HOME=cls.user_home,
                           HERD_HOME=os.path.join(cls.user_home, "herd"),
                           HERD_API_SERVER="local")
                for name in (os.listdir(clusters) if os.path.isdir(clusters) else []):
                    subprocess.run([HERD, "down", name, "-y"], env=env, capture_output=True,
                                   timeout=300)
                shutil.rmtree(cls.srv_dir, ignore_errors=True)
        finally:
            super().close_env()

    def why_not(self, name):
        with open(os.path.join(self.srv_home, "server.log"), errors="replace") as f:
            return "server.log:\n" + f.read()[-4000:]

    def server_log(self):
        with open(os.path.join(self.srv_home, "server.log"), errors="replace") as f:
            return f.read()

    def assert_no_key_went_to_the_head(self, cluster):
        st = self.state()
        self.assertEqual(st["iam_users"], {})
        self.assertFalse([c for c in st["calls"] if "CreateUser" in c or "AccessKey" in c],
                         st["calls"])
        home = os.path.join(self.head_dir(cluster), "home")
        self.assertFalse(os.path.exists(os.path.join(home, ".herd", "agent", "state",
                                                     "autostop-cloud.key")))
        self.assert_user_secret_nowhere_under(home)

    def test_a_idle_cluster_is_stopped_by_the_server_not_its_head(self):
        self.set_fake(transition_s=6)  # stopping lasts long enough to be seen
        self.addCleanup(self.set_fake, transition_s=0)
        p = self.herd("launch", "-c", "haua", "--infra", f"aws/{REGION}", "-i", "1", "-y", "--",
                      "echo", "done on", "$(hostname)")
        self.assertIn("done on hau0-", p.stdout.decode())
        c = self.h.clusters()["haua"]
        self.assertEqual((c["status"], c["autostop"]), ("UP", 1))
        self.assert_no_key_went_to_the_head("haua")
        # One idle minute later the server stops the instance; status shows it stopping first.
        self.wait_stopped_by_autostop("haua")
        self.assertIn(f"autostop sweep of {USER}: Cluster haua: idle past its autostop; stopped.",
                      self.server_log())
        p = self.herd("status")
        self.assertRegex(p.stdout.decode(), r"\nhaua +aws/us-east-1 .* STOPPED +1m ")
        self.herd("down", "haua", "-y")
        self.assert_nothing_left("haua")

    def test_b_down_alone_terminates_through_the_server_once_the_job_is_done(self):
        self.set_fake(transition_s=6)
        self.addCleanup(self.set_fake, transition_s=0)
        before = len(self.state()["calls"])
        p = self.herd("launch", "-c", "haub", "--infra", f"aws/{REGION}", "--down", "-d", "-y",
                      "--", "echo", "once")
        self.assertIn("Job submitted", p.stdout.decode() + p.stderr.decode())
        self.assert_no_key_went_to_the_head("haub")
        seen = self.watch_status("haub", None, timeout=180)
        self.assertIn("AUTOSTOPPING", seen)
        self.assertEqual(seen[-1], None)
        self.assertEqual({v["state"] for v in self.instances_of("haub").values()},
                         {"terminated"})
        calls = self.state()["calls"][before:]
        self.assertIn("TerminateInstances", calls)
        self.assertNotIn("StopInstances", calls)
        self.assertTrue(re.search(rf"autostop sweep of {USER}: Cluster haub: idle past its "
                                  r"autostop; torn down\.", self.server_log()))
        # Nothing of it left: instances, group, key pair, the user's state under the server.
        self.assert_nothing_left("haub")
        self.assertFalse(os.path.exists(os.path.join(self.user_home, "herd", "clusters", "haub")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
