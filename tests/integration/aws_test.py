"""The `aws` provider through the real CLI against fake_ec2.py, an EC2-shaped server on loopback
that verifies every request's SigV4 signature and hands out network-namespace hosts (made by
herd_test_hosts) as instances. Never contacts AWS: HERD_AWS_ENDPOINT points every call at the
fake. Covers: a 2-node torchrun launched with --infra aws/REGION, exec with the SKYPILOT_*
variables, stop/start (the hosts' processes really end and come back), down leaving nothing in
the fake (instances, security group, key pair); zone failover on InsufficientInstanceCapacity;
the account's instance limit; bad credentials (AuthFailure) and a bad signature refused by the
fake, each with a one-line message, exit code 1 and nothing created. Failover across regions
(issue 23): quota and capacity errors injected per region move a launch to the next cheapest
region of the plan, each attempt printed with its reason; a credential error stops at once;
-r/--retry-until-up retries until the fake has capacity again; a managed job with
EAGER_NEXT_REGION whose instance EC2 takes back is relaunched in another region. Autostop on
AWS (issue 23 item 5): `launch -i 1` and `launch --down`, the head stopping (terminating) its own
instances with the cluster's scoped IAM key while `status` shows AUTOSTOPPING, then STOPPED (the
cluster gone, nothing left, with --down); that key refused on another cluster's instances and on
everything else; `status -r` finding instances stopped or terminated behind herd's back."""

import threading

import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (HerdEnvTestCase, cgroup_scopes_of, netns_available,  # noqa: E402
                      remove_cgroups)
import fake_ec2  # noqa: E402

HOSTS = os.environ.get("TEST_HOSTS", "herd_test_hosts")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "mingpt-ddp")
POOL = "haws0"  # the namespace hosts: netns herd-haws0-<i>
BIND = "127.0.20.1"
REGION = "us-east-1"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
KEY_ID, SECRET = "AKIDHERDTESTKEY00001", "herd/test/secret/key/0000000000000000000"
# Temporary credentials (an STS session): the fake requires the token, signed.
TEMP = {"AWS_ACCESS_KEY_ID": "ASIAHERDTESTKEY00002", "AWS_SECRET_ACCESS_KEY": "temp/secret",
        "AWS_SESSION_TOKEN": "herd-test-session-token"}
UBUNTU = "099720108685"
# More regions for failover; each request is served as the region its signature is scoped to.
MORE_REGIONS = {"us-east-2": ["us-east-2a", "us-east-2b"], "us-west-2": ["us-west-2a"]}
# A catalog that makes the plan's order known: m6i.2xlarge, cheapest in us-east-1.
FAILOVER_CATALOG = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
                    "Region,AvailabilityZone\n"
                    "m6i.2xlarge,,,8,32,0.384,,us-east-1,\n"
                    "m6i.2xlarge,,,8,32,0.40,,us-east-2,\n"
                    "m6i.2xlarge,,,8,32,0.42,,us-west-2,\n")


def has_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          capture_output=True).returncode == 0


class SignatureVectors(unittest.TestCase):
    """The fake's own SigV4 check against AWS's published vectors, so that it can be trusted to
    judge herd's requests."""

    CREDS = {"AKIDEXAMPLE": ("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "")}
    SCOPE = "AKIDEXAMPLE/20150830/us-east-1/service/aws4_request"

    def check(self, method, query, headers, body, signed, sig):
        auth = (f"AWS4-HMAC-SHA256 Credential={self.SCOPE}, SignedHeaders={signed}, "
                f"Signature={sig}")
        fake_ec2.verify(method, "/", query, headers + [("Authorization", auth)], body, self.CREDS,
                        "us-east-1", "service")
        bad = sig[:-1] + ("0" if sig[-1] != "0" else "1")
        with self.assertRaises(fake_ec2.AuthError) as e:
            fake_ec2.verify(method, "/", query, headers + [("Authorization", auth.replace(sig, bad))],
                            body, self.CREDS, "us-east-1", "service")
        self.assertEqual(e.exception.code, "SignatureDoesNotMatch")

    def test_vectors(self):
        base = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")]
        self.check("GET", "", base, b"", "host;x-amz-date",
                   "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        self.check("GET", "Param2=value2&Param1=value1", base, b"", "host;x-amz-date",
                   "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        self.check("POST", "", base + [("Content-Type", "application/x-www-form-urlencoded")],
                   b"Param1=value1", "content-type;host;x-amz-date",
                   "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a")


class InstanceMetadata(unittest.TestCase):
    """The fake's instance metadata as EC2's IMDSv2 serves it, per instance by the asking node's
    address, and an interruption scheduled through the admin call: in process, on loopback
    (127.0.230.x: 230.1 is the instance's host, 230.3 another node, 230.2 the fake)."""

    def setUp(self):
        cfg = {"region": REGION, "zones": ZONES, "credentials": {}, "images": [],
               "hosts": [{"ip": "127.0.230.1", "dir": "/nonexistent"}]}
        self.ec2 = fake_ec2.Ec2(cfg)
        self.ec2.instances["i-1"] = {"id": "i-1", "host": 0, "spot": True, "state": "running",
                                     "region": REGION}
        self.preempted = []
        self.ec2.preempt = self.preempted.append  # the host is not a real one here
        self.server = fake_ec2.ThreadingHTTPServer(("127.0.230.2", 0), fake_ec2.Handler)
        self.server.daemon_threads = True
        self.server.ec2 = self.ec2
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)

    def ask(self, method, path, headers=None, src="127.0.230.1"):
        import http.client
        c = http.client.HTTPConnection("127.0.230.2", self.server.server_address[1],
                                       source_address=(src, 0), timeout=10)
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def test_token_then_404_then_the_notice_then_the_instance_goes(self):
        action = "/latest/meta-data/spot/instance-action"
        self.assertEqual(self.ask("PUT", "/latest/api/token")[0], 400)  # no TTL header
        status, token = self.ask("PUT", "/latest/api/token",
                                 {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        self.assertEqual(status, 200)
        self.assertEqual(self.ask("GET", action)[0], 401)  # IMDSv2: no token, no answer
        self.assertEqual(self.ask("GET", action, {"X-aws-ec2-metadata-token": token})[0], 404)
        # The token is the asking node's: another address cannot use it.
        self.assertEqual(self.ask("GET", action, {"X-aws-ec2-metadata-token": token},
                                  src="127.0.230.3")[0], 401)
        req = urllib.request.Request(
            f"http://127.0.230.2:{self.server.server_address[1]}/_fake/interrupt",
            json.dumps({"id": "i-1", "lead_s": 0.5}).encode())
        with urllib.request.urlopen(req, timeout=10) as r:
            notice = json.loads(r.read())
        self.assertEqual(notice["action"], "terminate")
        self.assertRegex(notice["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        status, body = self.ask("GET", action, {"X-aws-ec2-metadata-token": token})
        self.assertEqual((status, json.loads(body)), (200, notice))
        deadline = time.monotonic() + 10
        while not self.preempted and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.preempted, ["i-1"])


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class AwsEnvTestCase(HerdEnvTestCase):
    """fake_ec2.py on BIND handing out HOST_COUNT namespace hosts of POOL, the user's AWS
    credentials and config, and the helpers the AWS suites share; no tests of its own."""
    ENV_PREFIX = "aws"
    POOL = POOL
    BIND = BIND
    HOST_COUNT = 3
    # Clusters whose agents' cgroups assert_nothing_left checks; an earlier run's are not this one's.
    CGROUP_CLUSTERS = ("haws3", "haws4", "haws5", "haws6")

    @classmethod
    def prepare_env(cls):
        cls.fake = None
        cls.hosts_state = os.path.join(cls.h.dir, "hosts")
        cls.cgroups_before = {d for c in cls.CGROUP_CLUSTERS for d in cgroup_scopes_of(c)}
        pool_key = os.path.join(cls.h.dir, "pool_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", pool_key], check=True)
        p = subprocess.run([HOSTS, "up", cls.POOL, str(cls.HOST_COUNT), cls.hosts_state,
                            pool_key + ".pub"],
                           capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.pool_ips = p.stdout.split()
        names = [f"{cls.POOL}-head"] + [f"{cls.POOL}-worker{i}" for i in range(1, cls.HOST_COUNT)]
        cls.host_dirs = [os.path.join(cls.hosts_state, "nodes", n) for n in names]
        # The hosts' side of their bridge: where a head reaches the fake (its own EC2 calls).
        node_bind = ".".join(cls.pool_ips[0].split(".")[:3] + ["254"])
        cfg = {
            "bind": cls.BIND, "port_file": os.path.join(cls.h.dir, "fake.port"), "region": REGION,
            "node_bind": node_bind, "node_port_file": os.path.join(cls.h.dir, "fake.node.port"),
            "zones": ZONES, "no_capacity_zones": [], "regions": MORE_REGIONS,
            "credentials": {KEY_ID: {"secret": SECRET},
                            TEMP["AWS_ACCESS_KEY_ID"]: {"secret": TEMP["AWS_SECRET_ACCESS_KEY"],
                                                        "token": TEMP["AWS_SESSION_TOKEN"]}},
            "hosts": [{"ip": ip, "dir": os.path.join(cls.hosts_state, "nodes", n)}
                      for ip, n in zip(cls.pool_ips, names)],
            "test_hosts": HOSTS, "hosts_name": cls.POOL, "hosts_state": cls.hosts_state,
            "images": [
                {"id": "ami-0old", "owner": UBUNTU, "date": "2023-01-01T00:00:00.000Z",
                 "name": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20230101"},
                {"id": "ami-0new", "owner": UBUNTU, "date": "2024-06-01T00:00:00.000Z",
                 "name": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20240601"},
                {"id": "ami-0other", "owner": "111111111111", "date": "2025-01-01T00:00:00.000Z",
                 "name": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20250101"}],
        }
        cfg_file = os.path.join(cls.h.dir, "fake.json")
        with open(cfg_file, "w") as f:
            json.dump(cfg, f)
        cls.fake_log = open(os.path.join(cls.h.dir, "fake.log"), "w")
        cls.fake = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "fake_ec2.py"),
                                     cfg_file], stdout=subprocess.DEVNULL, stderr=cls.fake_log)
        deadline = time.monotonic() + 15
        while not (os.path.exists(cfg["port_file"]) and os.path.exists(cfg["node_port_file"])):
            if time.monotonic() > deadline or cls.fake.poll() is not None:
                raise AssertionError("fake_ec2 did not start")
            time.sleep(0.05)
        with open(cfg["port_file"]) as f:
            cls.endpoint = f"http://{cls.BIND}:{f.read().strip()}"
        with open(cfg["node_port_file"]) as f:
            cls.node_endpoint = f"http://{node_bind}:{f.read().strip()}"
        # The user's side: a credentials profile, the SSH user of the fake's hosts, and every
        # AWS call sent to the fake.
        aws_dir = os.path.join(cls.h.home, ".aws")
        os.makedirs(aws_dir)
        with open(os.path.join(aws_dir, "credentials"), "w") as f:
            f.write(f"[herdtest]\naws_access_key_id = {KEY_ID}\n"
                    f"aws_secret_access_key = {SECRET}\n")
        os.makedirs(cls.h.env["HERD_HOME"], exist_ok=True)
        with open(os.path.join(cls.h.env["HERD_HOME"], "config.yaml"), "w") as f:
            f.write("aws:\n  ssh_user: root\n")
        for k in list(cls.h.env):
            if k.startswith("AWS_"):
                del cls.h.env[k]
        # The fake also serves each node its instance metadata (a spot node's interruption
        # notice), on the same address of the hosts' bridge.
        cls.h.env.update(HERD_AWS_ENDPOINT=cls.endpoint, HERD_AWS_NODE_ENDPOINT=cls.node_endpoint,
                         HERD_AWS_METADATA_ENDPOINT=cls.node_endpoint, AWS_PROFILE="herdtest")

    @classmethod
    def close_env(cls):
        try:
            super().close_env()  # downs every cluster through the fake
        finally:
            if cls.fake is not None:
                cls.fake.send_signal(signal.SIGTERM)
                cls.fake.wait(timeout=10)
                cls.fake_log.close()
            subprocess.run([HOSTS, "down", cls.POOL, cls.hosts_state], timeout=120)

    # ---- helpers ----
    def state(self):
        with urllib.request.urlopen(self.endpoint + "/_fake/state", timeout=10) as r:
            return json.loads(r.read())

    def set_fake(self, **kw):
        req = urllib.request.Request(self.endpoint + "/_fake/config", json.dumps(kw).encode())
        urllib.request.urlopen(req, timeout=10).read()

    def herd(self, *args, env=None, check=True, timeout=300):
        saved = self.h.env
        if env:
            self.h.env = dict(saved, **env)
        try:
            return self.h.herd(*args, check=check, timeout=timeout)
        except subprocess.TimeoutExpired as e:  # say where it stood
            out = (e.stdout or b"").decode(errors="replace")[-4000:]
            err = (e.stderr or b"").decode(errors="replace")[-4000:]
            raise AssertionError(f"herd {' '.join(args)} timed out after {timeout} s\n"
                                 f"stdout:\n{out}\nstderr:\n{err}") from None
        finally:
            self.h.env = saved

    def live(self, st=None):
        st = st or self.state()
        return {k: v for k, v in st["instances"].items() if v["state"] != "terminated"}

    def assert_nothing_left(self, cluster=None):
        st = self.state()
        self.assertEqual(self.live(st), {})
        self.assertEqual(st["groups"], {})
        self.assertEqual(st["keys"], {})
        self.assertEqual(st["iam_users"], {})
        if cluster:  # the instances' agents' cgroups went with them (fake_ec2 stops hosts so)
            made = [d for d in cgroup_scopes_of(cluster) if d not in self.cgroups_before]
            self.assertEqual(remove_cgroups(made), [])

    def refused(self, cluster, env, code, text):
        before = len(self.state()["calls"])
        p = self.herd("launch", "-c", cluster, "--infra", f"aws/{REGION}", "-y", "--", "true",
                      env=env, check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertIn(f"herd: EC2 DescribeInstanceTypes in {REGION}: {code}: {text} (request id ",
                      err)
        self.assertNotIn("<", err)  # no XML
        calls = self.state()["calls"][before:]
        self.assertEqual(calls, [f"refused:{code}"] if code == "SignatureDoesNotMatch"
                         else ["refused:AuthFailure"])
        self.assert_nothing_left()
        # A new cluster that got no nodes is not left listed, and removing it asked EC2 nothing.
        self.assertNotIn(cluster, self.h.clusters())
        self.assertEqual(self.state()["calls"][before + 1:], [])

    # ---- autostop helpers ----
    def status_of(self, name):
        c = self.h.clusters().get(name)
        return c["status"] if c else None

    def watch_status(self, name, until, timeout):
        """The statuses `herd status` shows, each change once, until `until` (None: gone)."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status_of(name)
            if not seen or seen[-1] != st:
                seen.append(st)
            if st == until:
                return seen
            time.sleep(0.5)
        self.fail(f"cluster {name} never {until}: {seen}\n{self.why_not(name)}")

    def why_not(self, name):
        """For a failed watch_status: what did the stopping (the head's autostop.log)."""
        with open(os.path.join(self.head_dir(name), "home", ".herd", "agent", "state",
                               "autostop.log"), errors="replace") as f:
            return "autostop.log:\n" + f.read()[-3000:]

    def head_dir(self, cluster):
        (inst,) = [v for v in self.state()["instances"].values()
                   if v["tags"].get("Name") == cluster + "-head"]
        return self.host_dirs[inst["host"]]

    def assert_user_secret_nowhere_under(self, directory):
        """The user's own AWS secret is in no file under DIRECTORY (a node's home)."""
        for root, _, files in os.walk(directory):
            for name in files:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        self.assertNotIn(SECRET.encode(), f.read(), path)

    def wait_stopped_by_autostop(self, name, timeout=240):
        """Waits for `name` to be stopped by its autostop, as `herd status` shows it: AUTOSTOPPING
        first and never INIT, then STOPPED, its instances stopped, StopInstances called and
        TerminateInstances not meanwhile."""
        before = len(self.state()["calls"])
        seen = self.watch_status(name, "STOPPED", timeout=timeout)
        self.assertIn("AUTOSTOPPING", seen)
        self.assertLess(seen.index("AUTOSTOPPING"), seen.index("STOPPED"))
        self.assertNotIn("INIT", seen)
        self.assertEqual({v["state"] for v in self.instances_of(name).values()}, {"stopped"})
        calls = self.state()["calls"][before:]
        self.assertIn("StopInstances", calls)
        self.assertNotIn("TerminateInstances", calls)

    def instances_of(self, cluster):
        return {k: v for k, v in self.state()["instances"].items()
                if v["tags"].get("herd-cluster") == cluster}

    def ec2_call(self, action, ids=(), user=None, key_file=None, service="ec2",
                 version="2016-11-15", extra=""):
        """One signed Query API call with curl, as the head makes it: (HTTP code, body)."""
        body = f"Action={action}&Version={version}{extra}" + "".join(
            f"&InstanceId.{i + 1}={x}" for i, x in enumerate(ids))
        auth = ["-K", key_file] if key_file else ["--user", user]
        p = subprocess.run(["curl", "-sS", *auth, "--aws-sigv4", f"aws:amz:{REGION}:{service}",
                            "-H", "Content-Type: application/x-www-form-urlencoded; charset=utf-8",
                            "--data", body, "-w", "\n%{http_code}", self.endpoint + "/"],
                           capture_output=True, text=True, timeout=60)
        out, _, code = p.stdout.rpartition("\n")
        return int(code or 0), out


class AwsTest(AwsEnvTestCase):
    ENV_PREFIX = "aws"

    # ---- tests (run in name order; each leaves the fake empty) ----
    def test_0_no_region_plans_over_every_region(self):
        # `--infra aws` without a region: the optimizer picks the cheapest region of the catalog
        # (equal prices: by name), shown by --dryrun without a call to EC2.
        p = self.herd("launch", "-c", "haws0r", "--infra", "aws", "--dryrun", "--", "true")
        self.assertRegex(p.stdout.decode(),
                         r"\naws/us-east-1 +m6i\.2xlarge +8 +32 +- +0\.38 +\u2714\n")
        self.assertEqual(self.state()["calls"], [])
        # An instance type the catalog does not list, with no region configured: EC2 needs one.
        task = os.path.join(self.h.dir, "odd-type.yaml")
        with open(task, "w") as f:
            f.write("resources:\n  infra: aws\n  instance_type: x9z.large\nrun: true\n")
        p = self.herd("launch", "-c", "haws0r", "-y", task, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("herd: no AWS region: give --infra aws/REGION", p.stderr.decode())
        self.assertEqual(self.state()["calls"], [])
        self.assertNotIn("haws0r", self.h.clusters())

    def test_1_unknown_key_is_refused_and_nothing_is_made(self):
        self.refused("haws1", {"AWS_ACCESS_KEY_ID": "AKIDUNKNOWN000000000",
                               "AWS_SECRET_ACCESS_KEY": SECRET}, "AuthFailure",
                     "AWS was not able to validate the provided access credentials")

    def test_2_bad_signature_is_refused(self):
        self.refused("haws2", {"AWS_ACCESS_KEY_ID": KEY_ID,
                               "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
                     "SignatureDoesNotMatch",
                     "The request signature we calculated does not match the signature you "
                     "provided. Check your AWS Secret Access Key and signing method.")

    def test_3_capacity_failover_to_the_next_zone(self):
        # With temporary credentials from the environment (the fake checks the signed token).
        self.set_fake(no_capacity_zones=["us-east-1a"])
        try:
            p = self.herd("launch", "-c", "haws3", "--infra", f"aws/{REGION}", "-y", "--",
                          "echo", "up on", "$(hostname)", env=TEMP)
        finally:
            self.set_fake(no_capacity_zones=[])
        out = p.stdout.decode() + p.stderr.decode()
        self.assertIn("Launching 1x m6i.2xlarge in us-east-1a (1/3)", out)
        self.assertRegex(out, r"us-east-1a: InsufficientInstanceCapacity: We currently do not have "
                              r"sufficient m6i.2xlarge capacity .*; trying the next zone")
        self.assertIn("Launching 1x m6i.2xlarge in us-east-1b (2/3)", out)
        self.assertIn("up on haws0-", out)
        live = self.live()
        self.assertEqual([v["zone"] for v in live.values()], ["us-east-1b"])
        # The record holds the planned aws/us-east-1; `--infra aws` still names this cluster.
        p = self.herd("launch", "-c", "haws3", "--infra", "aws", "-y", "--", "echo", "again",
                      env=TEMP)
        self.assertIn("again", p.stdout.decode())
        self.assertEqual(set(self.live()), set(live))  # no new instances
        self.herd("down", "haws3", "-y", env=TEMP)
        self.assert_nothing_left("haws3")

    def test_4_instance_limit_is_clear_and_nothing_is_left(self):
        p = self.herd("launch", "-c", "haws4", "--infra", f"aws/{REGION}/us-east-1c",
                      "--num-nodes", "4", "-y", "--", "true", check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertIn(f"herd: EC2 RunInstances in {REGION}: InstanceLimitExceeded: You have "
                      f"requested more instances (4) than your current instance limit of 3", err)
        self.assertNotIn("us-east-1a", err)  # a quota is the region's: no zone failover
        self.assertEqual(self.live(), {})
        # What the launch made before RunInstances (its key, its group) went with it.
        self.assertNotIn("haws4", self.h.clusters())
        self.assert_nothing_left("haws4")

    def test_6_spot_instance_type_as_is_cannot_be_stopped(self):
        # What the task says of its resources, given as SkyPilot's launch flags instead.
        task = os.path.join(self.h.dir, "spot.yaml")
        with open(task, "w") as f:
            f.write("resources:\n  infra: aws\nrun: echo spot on $(hostname)\n")
        p = self.herd("launch", "-c", "haws6", "-y", "--zone", "us-east-1c", "--use-spot",
                      "--instance-type", "c6i.large", "--disk-size", "64",
                      "--ports", "8080", "--ports", "9000-9010", task)
        self.assertIn("spot on haws0-", p.stdout.decode())
        (inst,) = self.live().values()
        self.assertEqual((inst["type"], inst["zone"], inst["spot"]),
                         ("c6i.large", "us-east-1c", True))
        # --ports: open to everyone in the cluster's security group, next to SSH.
        rules = [tuple(r) for g in self.state()["groups"].values() for r in g["rules"]
                 if r[3] == "cidr" and r[4] == "0.0.0.0/0"]
        self.assertIn(("tcp", "8080", "8080", "cidr", "0.0.0.0/0"), rules)
        self.assertIn(("tcp", "9000", "9010", "cidr", "0.0.0.0/0"), rules)
        for bad, want in ((["--zone", "us-east-1c", "--region", "us-west-2"],
                           "--zone us-east-1c is not in --region us-west-2"),
                          (["--instance-type", "P5 large"], "--instance-type 'P5 large'"),
                          (["--disk-size", "1TB+"], "a disk has one size"),
                          (["--ports", "70000"], "--ports '70000'")):
            p = self.herd("launch", "-c", "hawsbad", "-y", *bad, task, check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(want, p.stderr.decode())
        self.assertNotIn("hawsbad", self.h.clusters())
        p = self.herd("stop", "haws6", "-y", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("herd: aws cluster haws6 runs on spot instances, which EC2 cannot stop; use "
                      "`herd down haws6`", p.stderr.decode())
        # Refused before anything was touched: the cluster still runs jobs.
        self.assertEqual(self.h.clusters()["haws6"]["status"], "UP")
        p = self.herd("exec", "haws6", "--", "echo", "still", "up")
        self.assertIn("still up", p.stdout.decode())
        self.herd("down", "haws6", "-y")
        self.assert_nothing_left("haws6")

    @unittest.skipUnless(has_torch(), "needs python3-torch")
    def test_5_two_node_torchrun_exec_stop_start_down(self):
        os.chdir(EXAMPLE)  # workdir: . as a user runs it from the example's folder
        p = self.herd("launch", "-c", "haws5", "--infra", f"aws/{REGION}", "-y",
                      "--env", "MAX_EPOCHS=1", "--env", "MAX_ITERS=4",
                      "train-multinode-cpu.yaml", timeout=600)
        out = p.stdout.decode()
        self.assertIn("Job finished (status: SUCCEEDED).", p.stderr.decode())
        self.assertEqual(len(set(re.findall(r"world_size=4 rank=(\d)", out))), 4, out[-3000:])
        c = self.h.clusters()["haws5"]
        self.assertEqual(c["infra"], f"aws/{REGION}")
        ips = [n["ip"] for n in c["nodes"]]
        self.assertEqual(len(ips), 2)
        self.assertTrue(set(ips) <= set(self.pool_ips), ips)
        self.assertIn(f"head node: {ips[0]}", out)
        # What herd made in EC2: 2 tagged instances of the catalog's type for cpus: 2+, the
        # group (SSH from the caller, all within the group) and the cluster key as key pair.
        st = self.state()
        live = self.live(st)
        self.assertEqual(sorted(v["tags"]["Name"] for v in live.values()),
                         ["haws5-head", "haws5-worker1"])
        self.assertTrue(all(v["tags"]["herd-cluster"] == "haws5" and v["type"] == "c6i.large"
                            and v["state"] == "running" for v in live.values()), live)
        (gid, group), = st["groups"].items()
        self.assertEqual(group["name"], "herd-haws5")
        self.assertIn(["-1", None, None, "group", gid], group["rules"])
        self.assertTrue(any(r[:3] == ["tcp", "22", "22"] and r[3] == "cidr"
                            and r[4].endswith("/32") for r in group["rules"]), group["rules"])
        with open(os.path.join(self.h.env["HERD_HOME"], "clusters", "haws5", "ssh",
                               "id_ed25519.pub")) as f:
            self.assertEqual(st["keys"]["herd-haws5"]["material"], f.read().strip())
        self.assertIn("DescribeImages", st["calls"])  # the newest Ubuntu image was looked up

        p = self.herd("exec", "haws5", "--num-nodes", "2", "--",
                      "echo", "rank=$SKYPILOT_NODE_RANK", "n=$SKYPILOT_NUM_NODES",
                      "ips=$(echo $SKYPILOT_NODE_IPS | tr ' ' ,)", "info=$SKYPILOT_CLUSTER_INFO")
        out = p.stdout.decode()
        for rank in (0, 1):
            self.assertIn(f"rank={rank} n=2 ips={ips[0]},{ips[1]} info=", out)
        self.assertIn('"cloud": "aws"'.replace(" ", ""), out.replace(" ", ""))

        self.herd("stop", "haws5", "-y")
        self.assertEqual({v["state"] for v in self.live().values()}, {"stopped"})
        self.assertEqual(self.h.clusters()["haws5"]["status"], "STOPPED")
        # Stopped means the machine's processes are gone: no sshd answers.
        r = self.h.ssh("haws5", "true", timeout=60)
        self.assertNotEqual(r.returncode, 0)

        self.herd("start", "haws5", "-y")
        self.assertEqual({v["state"] for v in self.live().values()}, {"running"})
        p = self.herd("exec", "haws5", "--num-nodes", "2", "--", "echo", "back",
                      "rank=$SKYPILOT_NODE_RANK")
        self.assertIn("back rank=0", p.stdout.decode())
        self.assertIn("back rank=1", p.stdout.decode())

        self.herd("down", "haws5", "-y")
        self.assert_nothing_left("haws5")
        self.assertNotIn("haws5", self.h.clusters())

    # ---- failover across regions ----
    def with_failover_catalog(self):
        path = os.path.join(self.h.env["HERD_HOME"], "catalogs", "aws.csv")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(FAILOVER_CATALOG)
        self.addCleanup(os.remove, path)
        self.addCleanup(self.set_fake, no_capacity_regions=[], quota_regions=[])

    def assert_no_region_holds_anything(self):
        st = self.state()
        self.assertEqual(self.live(st), {})
        for region, store in st["regions"].items():
            self.assertEqual((region, store["groups"], store["keys"]), (region, {}, {}))

    def test_7_quota_and_capacity_fail_over_to_the_next_cheapest_region(self):
        self.with_failover_catalog()
        self.set_fake(quota_regions=["us-east-1"], no_capacity_regions=["us-east-2"])
        p = self.herd("launch", "-c", "haws7", "--infra", "aws", "-y", "--",
                      "echo", "up on", "$(hostname)")
        out = p.stdout.decode()
        err = p.stderr.decode()
        self.assertIn("Attempt 1 failed: aws/us-east-1 m6i.2xlarge ($0.38/hr): EC2 RunInstances "
                      "in us-east-1: VcpuLimitExceeded: You have requested more vCPU capacity",
                      err)
        self.assertIn("  blocked region aws/us-east-1 (VcpuLimitExceeded)", err)
        self.assertIn("Trying aws/us-east-2 m6i.2xlarge ($0.40/hr)", err)
        self.assertIn("Launching 1x m6i.2xlarge in us-east-2b (2/2)", err)
        self.assertIn("Attempt 2 failed: aws/us-east-2 m6i.2xlarge ($0.40/hr): EC2 RunInstances "
                      "in us-east-2: InsufficientInstanceCapacity: no zone has capacity for 1x "
                      "m6i.2xlarge: tried us-east-2a (InsufficientInstanceCapacity), us-east-2b "
                      "(InsufficientInstanceCapacity)", err)
        self.assertIn("  blocked region aws/us-east-2 for m6i.2xlarge (on-demand) "
                      "(InsufficientInstanceCapacity)", err)
        self.assertIn("Trying aws/us-west-2 m6i.2xlarge ($0.42/hr)", err)
        self.assertIn("up on haws0-", out)
        (inst,) = self.live().values()
        self.assertEqual((inst["region"], inst["zone"]), ("us-west-2", "us-west-2a"))
        self.assertEqual(self.h.clusters()["haws7"]["infra"], "aws/us-west-2")
        # What the failed attempts made in their regions was removed before the next.
        st = self.state()
        for region in ("us-east-1", "us-east-2"):
            self.assertEqual((st["regions"][region]["groups"], st["regions"][region]["keys"]),
                             ({}, {}), region)
        self.herd("down", "haws7", "-y")
        self.assert_no_region_holds_anything()

    def test_8_a_credential_error_stops_the_failover_at_once(self):
        self.with_failover_catalog()
        self.set_fake(quota_regions=["us-east-1"])
        before = len(self.state()["calls"])
        p = self.herd("launch", "-c", "haws8", "--infra", "aws", "-y", "--", "true",
                      env={"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": "wrong"},
                      check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("herd: EC2 DescribeInstanceTypes in us-east-1: SignatureDoesNotMatch", err)
        self.assertIn("  blocked cloud aws (SignatureDoesNotMatch)", err)
        self.assertNotIn("Trying", err)
        self.assertEqual(self.state()["calls"][before:], ["refused:SignatureDoesNotMatch"])
        self.assertNotIn("haws8", self.h.clusters())
        self.assert_no_region_holds_anything()

    def test_9_retry_until_up_waits_for_capacity(self):
        self.with_failover_catalog()
        self.set_fake(no_capacity_regions=["us-east-1", "us-east-2", "us-west-2"])
        proc = self.h.popen("launch", "-c", "haws9", "--infra", "aws", "-y", "-r", "--",
                            "echo", "up on", "$(hostname)")
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(
            line.decode(errors="replace") for line in proc.stderr), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 240
            while not any("(--retry-until-up)" in line for line in lines):
                self.assertIsNone(proc.poll(), "".join(lines))
                self.assertLess(time.monotonic(), deadline, "".join(lines))
                time.sleep(0.2)
            self.set_fake(no_capacity_regions=[])
            # stdout on a thread of its own: communicate() would read stderr too, taking lines
            # from the reader above (the "(pass 2)" line went missing that way).
            out_chunks = []
            out_reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()),
                                          daemon=True)
            out_reader.start()
            proc.wait(timeout=300)
            out_reader.join(timeout=10)
            out = b"".join(out_chunks)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
        err = "".join(lines)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("Every candidate failed (aws/us-east-1 m6i.2xlarge ($0.38/hr): "
                      "InsufficientInstanceCapacity; aws/us-east-2 m6i.2xlarge ($0.40/hr): "
                      "InsufficientInstanceCapacity; aws/us-west-2 m6i.2xlarge ($0.42/hr): "
                      "InsufficientInstanceCapacity); retrying in 5 s (--retry-until-up)", err)
        self.assertIn("Trying aws/us-east-1 m6i.2xlarge ($0.38/hr) (pass 2)", err)
        self.assertIn("up on haws0-", out.decode())
        (inst,) = self.live().values()
        self.assertEqual(inst["region"], "us-east-1")
        self.herd("down", "haws9", "-y")
        self.assert_no_region_holds_anything()

    def test_a_eager_next_region_recovers_a_managed_job_in_another_region(self):
        self.with_failover_catalog()
        task = os.path.join(self.h.dir, "eager.yaml")
        with open(task, "w") as f:
            f.write("name: haws10\nresources:\n  infra: aws\n  job_recovery: EAGER_NEXT_REGION\n"
                    "run: |\n  echo attempt $HERD_ATTEMPT on $(hostname)\n"
                    "  if [ \"$HERD_ATTEMPT\" = 1 ]; then sleep 600; fi\n")
        p = self.herd("jobs", "launch", "-d", "-y", task)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))

        def job():
            return {j["id"]: j for j in json.loads(
                self.herd("jobs", "queue", "-o", "json").stdout)}[job_id]

        def wait(pred, what, timeout=180):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                j = job()
                if pred(j):
                    return j
                time.sleep(0.5)
            log = os.path.join(self.h.env["HERD_HOME"], "managed_jobs", str(job_id),
                               "controller.log")
            with open(log) as f:
                self.fail(f"no {what}: {job()}\n{f.read()[-4000:]}")

        try:
            wait(lambda j: j["status"] == "RUNNING", "RUNNING")
            (iid, inst), = self.live().items()
            self.assertEqual(inst["region"], "us-east-1")  # the cheapest
            urllib.request.urlopen(urllib.request.Request(
                self.endpoint + "/_fake/preempt", json.dumps({"id": iid}).encode()),
                timeout=10).read()
            # The second attempt runs `echo` and ends: the job SUCCEEDS after one recovery.
            j = wait(lambda j: j["status"] not in ("PENDING", "STARTING", "RUNNING",
                                                   "RECOVERING"), "the end")
        finally:
            if job()["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                self.herd("jobs", "cancel", str(job_id), check=False)
        self.assertEqual(j["status"], "SUCCEEDED", j)
        self.assertEqual(j["recoveries"], 1)
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"])
        # us-east-1 is still the cheapest and has capacity: EAGER_NEXT_REGION moved on.
        regions = {v["tags"]["herd-cluster"]: v["region"]
                   for v in self.state()["instances"].values()
                   if v["tags"].get("herd-cluster", "").startswith("haws10-")}
        self.assertEqual(regions, {f"haws10-{job_id}-1": "us-east-1",
                                   f"haws10-{job_id}-2": "us-east-2"})
        self.assert_no_region_holds_anything()


    def test_f_spot_interruption_notice_lets_a_managed_job_save_then_recovers(self):
        """EC2 schedules the spot instance's interruption (the fake posts the notice on the
        instance's metadata, 30 s ahead, then really takes it back): the node's agent sees the
        notice, the job's processes get SIGTERM with the grace, the job's trap writes its
        checkpoint and exits 0 before the instance goes, the log says why, and the managed job is
        recovered on a new instance that finds the checkpoint."""
        ckpt = os.path.join(self.h.dir, "spot-ckpt")
        task = os.path.join(self.h.dir, "spot-ckpt.yaml")
        with open(task, "w") as f:
            f.write(f"name: hawsf\nresources:\n  infra: aws/{REGION}\n  use_spot: true\n"
                    "  instance_type: c6i.large\n"
                    f"envs:\n  CKPT: {ckpt}\n"
                    "run: |\n"
                    "  if [ \"$HERD_ATTEMPT\" = 1 ]; then\n"
                    "    trap 'date +%s.%N > $CKPT; echo checkpoint saved; exit 0' TERM\n"
                    "    echo training; sleep 600 & wait\n"
                    "  else\n"
                    "    echo resumed from $(cat $CKPT)\n"
                    "  fi\n")
        p = self.herd("jobs", "launch", "-d", "-y", task)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        job_dir = os.path.join(self.h.env["HERD_HOME"], "managed_jobs", str(job_id))

        def job():
            return {j["id"]: j for j in json.loads(
                self.herd("jobs", "queue", "-o", "json").stdout)}[job_id]

        def attempt_log(n):
            try:
                with open(os.path.join(job_dir, f"attempt-{n}.log"), errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""

        def wait(pred, what, timeout=240):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if pred():
                    return
                time.sleep(0.5)
            with open(os.path.join(job_dir, "controller.log"), errors="replace") as f:
                self.fail(f"no {what}: {job()}\nattempt 1:\n{attempt_log(1)[-3000:]}\n"
                          f"controller.log:\n{f.read()[-4000:]}")

        try:
            wait(lambda: "training" in attempt_log(1), "training in attempt 1")
            (iid, inst), = [(k, v) for k, v in self.live().items()
                            if v["tags"].get("herd-cluster", "").startswith("hawsf-")]
            self.assertTrue(inst["spot"])
            req = urllib.request.Request(self.endpoint + "/_fake/interrupt",
                                         json.dumps({"id": iid, "lead_s": 30}).encode())
            with urllib.request.urlopen(req, timeout=10) as r:
                notice = json.loads(r.read())
            scheduled_at = time.time()
            gone_at = scheduled_at + 30
            wait(lambda: job()["status"] not in ("PENDING", "STARTING", "RUNNING", "RECOVERING"),
                 "end of the job", timeout=300)
        finally:
            if job()["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                self.herd("jobs", "cancel", str(job_id), check=False)
        j = job()
        self.assertEqual(j["status"], "SUCCEEDED", j)
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"], j)
        # The checkpoint was written on SIGTERM, before EC2 took the instance back.
        with open(ckpt) as f:
            saved_at = float(f.read())
        self.assertLess(saved_at, gone_at)
        log1 = attempt_log(1)
        self.assertIn(f"got a spot interruption notice for {notice['time']} (terminate): SIGTERM "
                      f"to every process of job", log1)
        self.assertIn("checkpoint saved", log1)
        self.assertLess(log1.index("spot interruption notice"), log1.index("checkpoint saved"))
        self.assertIn(f"resumed from {saved_at:.9f}"[:len("resumed from ") + 10],
                      attempt_log(2))
        ended = j["attempts"][0]["ended_at_ms"] / 1000
        print(f"\nspot notice: checkpoint {saved_at - scheduled_at:.1f} s after the interruption "
              f"was scheduled (30 s ahead), attempt 1 over {ended - scheduled_at:.1f} s after it; "
              f"attempt 1 log:\n{log1}\nattempt 2 log:\n{attempt_log(2)}", file=sys.stderr)
        calls = self.state()["calls"]
        self.assertIn("imds:token", calls)
        self.assertIn("imds:instance-action", calls)
        self.assert_no_region_holds_anything()

    # ---- autostop on AWS, and status -r ----
    def test_b_autostop_stops_the_cluster_with_its_own_scoped_key(self):
        self.set_fake(transition_s=6)  # stopping lasts long enough to be seen
        self.addCleanup(self.set_fake, transition_s=0)
        p = self.herd("launch", "-c", "hawsb", "--infra", f"aws/{REGION}", "-i", "1", "-y", "--",
                      "echo", "done on", "$(hostname)")
        self.assertIn("done on haws0-", p.stdout.decode())
        c = self.h.clusters()["hawsb"]
        self.assertEqual((c["status"], c["autostop"]), ("UP", 1))
        # The cluster's own IAM user, whose one policy allows stopping or terminating only
        # instances tagged with this cluster, in its region.
        users = self.state()["iam_users"]
        self.assertEqual(list(users), ["herd-autostop-hawsb"])
        (doc,) = users["herd-autostop-hawsb"]["policies"].values()
        (stmt,) = doc["Statement"]
        self.assertEqual((stmt["Effect"], sorted(stmt["Action"]), stmt["Resource"]),
                         ("Allow", ["ec2:StopInstances", "ec2:TerminateInstances"],
                          f"arn:aws:ec2:{REGION}:*:instance/*"))
        self.assertEqual(stmt["Condition"],
                         {"StringEquals": {"ec2:ResourceTag/herd-cluster": "hawsb"}})
        # On the head: that key alone, in a 0600 file; the user's own secret nowhere.
        home = os.path.join(self.head_dir("hawsb"), "home")
        key_file = os.path.join(home, ".herd", "agent", "state", "autostop-cloud.key")
        self.assertEqual(os.stat(key_file).st_mode & 0o777, 0o600)
        with open(key_file) as f:
            self.assertIn(users["herd-autostop-hawsb"]["keys"][0], f.read())
        self.assert_user_secret_nowhere_under(home)
        # One idle minute later the head stops its own instance; status follows EC2.
        self.wait_stopped_by_autostop("hawsb")
        p = self.herd("status")
        self.assertRegex(p.stdout.decode(), r"\nhawsb +aws/us-east-1 .* STOPPED +1m ")
        # Stopped, not gone: down removes the instances, group, key pair and the IAM user.
        self.herd("down", "hawsb", "-y")
        self.assert_nothing_left("hawsb")

    def test_c_down_alone_terminates_once_the_job_is_done(self):
        self.set_fake(transition_s=6)
        self.addCleanup(self.set_fake, transition_s=0)
        # Detached: with -i 0 the head may end the cluster while a following launch is still
        # connecting to read the (already finished) job's log.
        p = self.herd("launch", "-c", "hawsc", "--infra", f"aws/{REGION}", "--down", "-d", "-y",
                      "--", "echo", "once")
        self.assertIn("Job submitted", p.stdout.decode() + p.stderr.decode())
        seen = self.watch_status("hawsc", None, timeout=180)
        self.assertIn("AUTOSTOPPING", seen)
        self.assertEqual(seen[-1], None)
        self.assertEqual({v["state"] for v in self.instances_of("hawsc").values()},
                         {"terminated"})
        self.assertIn("TerminateInstances", self.state()["calls"])
        # Nothing of it left: instances, group, key pair, IAM user, local state.
        self.assert_nothing_left("hawsc")
        self.assertFalse(os.path.exists(os.path.join(self.h.env["HERD_HOME"], "clusters",
                                                     "hawsc")))

    def test_d_the_scoped_key_cannot_touch_another_cluster(self):
        try:
            self.herd("launch", "-c", "hawsd1", "--infra", f"aws/{REGION}", "-i", "60", "-y",
                      "--", "true")
            self.herd("launch", "-c", "hawsd2", "--infra", f"aws/{REGION}", "-y", "--", "true")
            key_file = os.path.join(self.head_dir("hawsd1"), "home", ".herd", "agent", "state",
                                    "autostop-cloud.key")
            (mine,) = self.instances_of("hawsd1")
            (other,) = self.instances_of("hawsd2")
            before = len(self.state()["calls"])
            for action, ids in (("StopInstances", [other]), ("TerminateInstances", [other]),
                                ("StopInstances", [mine, other]), ("StartInstances", [mine]),
                                ("DescribeInstances", []), ("RunInstances", [])):
                code, body = self.ec2_call(action, ids, key_file=key_file)
                self.assertEqual(code, 403, (action, body))
                self.assertIn("<Code>UnauthorizedOperation</Code>", body)
            code, body = self.ec2_call("CreateUser", key_file=key_file, service="iam",
                                       version="2010-05-08", extra="&UserName=escalate")
            self.assertEqual(code, 403, body)
            self.assertIn("<Code>AccessDenied</Code>", body)
            calls = self.state()["calls"][before:]
            self.assertEqual(calls, ["denied:StopInstances", "denied:TerminateInstances",
                                     "denied:StopInstances", "denied:StartInstances",
                                     "denied:DescribeInstances", "denied:RunInstances",
                                     "denied:iam:CreateUser"])
            self.assertEqual({v["state"] for v in self.live().values()}, {"running"})
            self.assertEqual(list(self.state()["iam_users"]), ["herd-autostop-hawsd1"])
            self.assertEqual(self.status_of("hawsd2"), "UP")
        finally:
            self.herd("down", "hawsd1", "-y", check=False)
            self.herd("down", "hawsd2", "-y", check=False)
        self.assert_nothing_left()

    def test_e_status_refresh_asks_ec2(self):
        p = self.herd("launch", "-c", "hawse", "--infra", f"aws/{REGION}", "-y", "--", "true")
        (iid,) = self.instances_of("hawse")
        admin = f"{KEY_ID}:{SECRET}"
        # Stopped behind herd's back (the console, another tool): the head is silent, the record
        # still says UP; only -r asks EC2.
        self.assertEqual(self.ec2_call("StopInstances", [iid], user=admin)[0], 200)
        self.assertEqual(self.status_of("hawse"), "INIT")
        self.assertEqual(self.h.clusters()["hawse"]["head_answered"], False)
        p = self.herd("status", "-r")
        self.assertRegex(p.stdout.decode(), r"\nhawse +aws/us-east-1 .* STOPPED ")
        self.assertEqual(self.status_of("hawse"), "STOPPED")  # the record was updated
        # Terminated behind herd's back: -r removes what is left and the record.
        self.assertEqual(self.ec2_call("TerminateInstances", [iid], user=admin)[0], 200)
        p = self.herd("status", "--refresh")
        self.assertIn("Cluster hawse: its machines are gone", p.stdout.decode())
        self.assertNotIn("hawse", self.h.clusters())
        self.assert_nothing_left("hawse")
        # Bad input, refused before anything is made (exit 2).
        for args in (["launch", "-c", "hawsbad", "-i", "-1", "-y", "--", "true"],
                     ["launch", "-c", "hawsbad", "-i", "x", "-y", "--", "true"],
                     ["autostop", "hawsbad", "-i", "-5"],
                     ["launch", "-c", "hawsbad", "--infra", f"aws/{REGION}", "--use-spot", "-i",
                      "5", "-y", "--", "true"],
                     ["autostop", "hawsbad"]):
            p = self.herd(*args, check=False)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
        self.assertNotIn("hawsbad", self.h.clusters())
        self.assertEqual(self.live(), {})


if __name__ == "__main__":
    unittest.main(verbosity=2)
