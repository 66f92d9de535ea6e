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
EAGER_NEXT_REGION whose instance EC2 takes back is relaunched in another region."""

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


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class AwsTest(HerdEnvTestCase):
    ENV_PREFIX = "aws"

    @classmethod
    def prepare_env(cls):
        cls.fake = None
        cls.hosts_state = os.path.join(cls.h.dir, "hosts")
        # An earlier run's are not this one's.
        cls.cgroups_before = {d for c in ("haws3", "haws4", "haws5", "haws6")
                              for d in cgroup_scopes_of(c)}
        pool_key = os.path.join(cls.h.dir, "pool_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", pool_key], check=True)
        p = subprocess.run([HOSTS, "up", POOL, "3", cls.hosts_state, pool_key + ".pub"],
                           capture_output=True, text=True, timeout=180)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.pool_ips = p.stdout.split()
        names = [f"{POOL}-head", f"{POOL}-worker1", f"{POOL}-worker2"]
        cfg = {
            "bind": BIND, "port_file": os.path.join(cls.h.dir, "fake.port"), "region": REGION,
            "zones": ZONES, "no_capacity_zones": [], "regions": MORE_REGIONS,
            "credentials": {KEY_ID: {"secret": SECRET},
                            TEMP["AWS_ACCESS_KEY_ID"]: {"secret": TEMP["AWS_SECRET_ACCESS_KEY"],
                                                        "token": TEMP["AWS_SESSION_TOKEN"]}},
            "hosts": [{"ip": ip, "dir": os.path.join(cls.hosts_state, "nodes", n)}
                      for ip, n in zip(cls.pool_ips, names)],
            "test_hosts": HOSTS, "hosts_name": POOL, "hosts_state": cls.hosts_state,
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
        while not os.path.exists(cfg["port_file"]):
            if time.monotonic() > deadline or cls.fake.poll() is not None:
                raise AssertionError("fake_ec2 did not start")
            time.sleep(0.05)
        with open(cfg["port_file"]) as f:
            cls.endpoint = f"http://{BIND}:{f.read().strip()}"
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
        cls.h.env.update(HERD_AWS_ENDPOINT=cls.endpoint, AWS_PROFILE="herdtest")

    @classmethod
    def close_env(cls):
        try:
            super().close_env()  # downs every cluster through the fake
        finally:
            if cls.fake is not None:
                cls.fake.send_signal(signal.SIGTERM)
                cls.fake.wait(timeout=10)
                cls.fake_log.close()
            subprocess.run([HOSTS, "down", POOL, cls.hosts_state], timeout=120)

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
        self.herd("down", cluster, "-y")
        self.assertEqual(self.state()["calls"][before + 1:], [])  # nothing to tear down

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
        self.herd("down", "haws0r", "-y")

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

    def test_4_instance_limit_is_clear_and_down_cleans_up(self):
        p = self.herd("launch", "-c", "haws4", "--infra", f"aws/{REGION}/us-east-1c",
                      "--num-nodes", "4", "-y", "--", "true", check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertIn(f"herd: EC2 RunInstances in {REGION}: InstanceLimitExceeded: You have "
                      f"requested more instances (4) than your current instance limit of 3", err)
        self.assertNotIn("us-east-1a", err)  # a quota is the region's: no zone failover
        self.assertEqual(self.live(), {})
        self.herd("down", "haws4", "-y")
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
        self.herd("down", "haws8", "-y")
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
            out, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=10)
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
