"""The nodes' bucket key, as a user meets it: the user's own AWS keys (known to a fake IAM and to an
S3 that enforces IAM policies: fake_ec2.py's IAM and its S3 front, forwarding to s3rver) launch
a task that mounts bucket A on a 1-node local cluster. On the node, the key herd put there reads
and writes A and gets AccessDenied on bucket B, which exists; the user's secret is in no file on
the node or of herd, and in no `queue`/`status`/`logs` output; a later launch naming B too widens
the same key's policy, read only since it only COPYs B (the key cannot write or delete there,
and still writes A); a launch that mounts one prefix of a shared bucket gets only that prefix
(the key lists, reads and writes under it, and is refused the bucket's other prefix and its
root); `herd down` deletes the IAM user and the kept key."""

import json
import os
import secrets
import shlex
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import fake_ec2  # noqa: E402
from herd_env import HerdEnvTestCase  # noqa: E402
from s3_server import KEY, BucketSuite, S3Server, needs_bucket_tools  # noqa: E402

CLUSTER = "bkeys"
MINE, THEIRS, SHARED = "herd-bk-mine", "herd-bk-theirs", "herd-bk-shared"
IAM_USER = "herd-buckets-" + CLUSTER
# The user's own credentials: the fake's account keys (IAM and S3 take them for anything).
USER_KEY = "AKIAHERDBKEYSUSER01"
USER_SECRET = secrets.token_urlsafe(30)
NODE_CONF = ".herd/agent/storage/rclone.conf"


@needs_bucket_tools
class BucketKeysTest(BucketSuite, HerdEnvTestCase):
    ENV_PREFIX = "bkeys"
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        cls.s3 = cls.servers = None
        path = os.path.join(cls.h.dir, "plain.yaml")
        with open(path, "w") as f:
            f.write("run: echo up\n")
        cls.plain = path

    @classmethod
    def launch_args(cls):
        # The cluster first: the S3 front listens on the host's address of its bridge.
        return ("launch", "-c", CLUSTER, "-y", cls.plain)

    @classmethod
    def after_launch(cls):
        cls.s3 = S3Server(os.path.join(cls.h.dir, "s3rver-data"))
        cls.s3.start("127.0.238.1")
        cls.ec2 = fake_ec2.Ec2({"region": "us-east-1", "zones": [], "hosts": [],
                                "credentials": {USER_KEY: {"secret": USER_SECRET}}})
        iam = fake_ec2.ThreadingHTTPServer(("127.0.238.1", 0), fake_ec2.Handler)
        iam.daemon_threads = True
        iam.ec2 = cls.ec2
        bridge = cls.h.clusters()[CLUSTER]["nodes"][0]["ip"].rsplit(".", 1)[0] + ".254"
        front = fake_ec2.s3_front(cls.ec2, bridge, cls.s3.endpoint, (KEY, KEY))
        cls.servers = [iam, front]
        for server in cls.servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        cls.front = f"http://{bridge}:{front.server_address[1]}"
        # Bucket B exists, with data, but is not the task's.
        # A shared bucket: the task mounts team-a's prefix only.
        for args, text in ((("mkdir", f"t:{THEIRS}"), None),
                           (("rcat", f"t:{THEIRS}/private.txt"), "not for the task\n"),
                           (("mkdir", f"t:{SHARED}"), None),
                           (("rcat", f"t:{SHARED}/team-a/a.txt"), "team a's\n"),
                           (("rcat", f"t:{SHARED}/team-b/b.txt"), "team b's\n")):
            p = cls.s3.rclone(*args, input=text)
            assert p.returncode == 0, p.stderr
        cls.s3.use_in(cls.h.env)
        cls.h.env.update(AWS_ACCESS_KEY_ID=USER_KEY, AWS_SECRET_ACCESS_KEY=USER_SECRET,
                         AWS_ENDPOINT_URL_S3=cls.front,
                         AWS_ENDPOINT_URL_IAM=f"http://127.0.238.1:{iam.server_address[1]}")

    @classmethod
    def close_env(cls):
        try:
            if getattr(cls, "launch", None) is not None:
                cls.h.herd("down", CLUSTER, "-y", check=False)
        finally:
            try:
                for server in cls.servers or []:
                    server.shutdown()
                    server.server_close()
                if cls.s3 is not None:
                    cls.s3.stop()
            finally:
                super().close_env()

    def on_node(self, command, stdin=""):
        """rclone on the node with the config herd put there (the node's key), given `stdin`."""
        p = self.h.ssh(CLUSTER, f"printf %s {shlex.quote(stdin)} | env -u AWS_CA_BUNDLE rclone --config "
                                f"{NODE_CONF} --retries 1 --low-level-retries 1 {command}",
                       timeout=120)
        return p.returncode, (p.stdout + p.stderr).decode(errors="replace")

    def iam_user(self):
        return self.ec2.snapshot()["iam_users"].get(IAM_USER)

    def policy_resources(self):
        doc = self.iam_user()["policies"]["herd-buckets"]
        return sorted({r for s in doc["Statement"] for r in s["Resource"]})

    def statement_on(self, resource):
        """The one statement of the key's policy whose resources include `resource`."""
        doc = self.iam_user()["policies"]["herd-buckets"]
        found = [st for st in doc["Statement"] if resource in st["Resource"]]
        self.assertEqual(len(found), 1, doc)
        return found[0]

    def assert_refused(self, command, stdin=""):
        rc, out = self.on_node(command, stdin)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("AccessDenied", out, command)

    def node_conf(self):
        p = self.h.ssh(CLUSTER, f"cat {NODE_CONF}")
        self.assertEqual(p.returncode, 0, p.stderr)
        return dict(line.split(" = ", 1) for line in p.stdout.decode().splitlines()
                    if " = " in line)

    def test_a_the_node_key_reaches_only_the_tasks_bucket(self):
        task = self.write("mine.yaml", f"""name: mine
file_mounts:
  ~/mine:
    name: {MINE}
    mode: MOUNT
run: |
  echo "written on the node" > ~/mine/note.txt
  cat ~/mine/note.txt
""")
        p = self.h.herd("launch", "-c", CLUSTER, "-y", task)
        self.assertIn(b"written on the node", p.stdout)
        self.assertEqual(self.s3.objects(MINE), ["note.txt"])
        # One IAM user for the cluster, its policy on exactly the task's bucket, one key.
        user = self.iam_user()
        self.assertIsNotNone(user, self.ec2.snapshot()["iam_users"])
        self.assertEqual(user["tags"], {"herd-cluster": CLUSTER})
        self.assertEqual(self.policy_resources(), [f"arn:aws:s3:::{MINE}",
                                                   f"arn:aws:s3:::{MINE}/*"])
        self.assertEqual(len(user["keys"]), 1)
        conf = self.node_conf()
        self.assertEqual(conf["access_key_id"], user["keys"][0])
        self.assertNotEqual(conf["secret_access_key"], USER_SECRET)
        # The node's key reads and writes the task's bucket...
        rc, out = self.on_node(f"cat herd-s3:{MINE}/note.txt")
        self.assertEqual((rc, out), (0, "written on the node\n"))
        rc, out = self.on_node(f"rcat herd-s3:{MINE}/r.txt", "from rclone\n")
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.s3.objects(MINE), ["note.txt", "r.txt"])
        self.assertEqual(self.s3.rclone("cat", f"t:{MINE}/r.txt").stdout, "from rclone\n")
        # ...and is refused on the other bucket, which exists: list, read and write.
        for command in (f"lsf herd-s3:{THEIRS}", f"cat herd-s3:{THEIRS}/private.txt"):
            rc, out = self.on_node(command)
            self.assertNotEqual(rc, 0, out)
            self.assertIn("AccessDenied", out)
        rc, out = self.on_node(f"rcat herd-s3:{THEIRS}/x.txt", "x\n")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("AccessDenied", out)
        self.assertEqual(self.s3.objects(THEIRS), ["private.txt"])
        calls = self.ec2.snapshot()["calls"]
        self.assertIn(f"denied:s3:ListBucket:arn:aws:s3:::{THEIRS}", calls)
        self.assertIn(f"denied:s3:GetObject:arn:aws:s3:::{THEIRS}/private.txt", calls)
        self.assertIn(f"denied:s3:PutObject:arn:aws:s3:::{THEIRS}/x.txt", calls)
        # The user's secret is in no file on the node (its home, the mount aside) nor of herd on
        # this machine, where the node key is kept sealed only.
        grep = self.h.ssh(CLUSTER, f"cd ~ && grep -rlsF --exclude-dir=mine -e {USER_SECRET} "
                                   f"-e {conf['secret_access_key']} .")
        self.assertEqual(grep.stdout.decode().split(), ["./" + NODE_CONF])
        self.assertEqual(self.h.ssh(CLUSTER, f"stat -c %a {NODE_CONF}").stdout, b"600\n")
        grep = self.h.ssh(CLUSTER, f"cd ~ && grep -rlsF --exclude-dir=mine -e {USER_SECRET} .")
        self.assertEqual(grep.stdout, b"")
        for root, _, files in os.walk(self.h.dir):
            for name in files:
                path = os.path.join(root, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                self.assertNotIn(USER_SECRET.encode(), data, path)
                if not path.endswith(NODE_CONF):  # a node's home may be under the test's dir
                    self.assertNotIn(conf["secret_access_key"].encode(), data, path)
        outputs = {("launch",): p.stdout + p.stderr}
        for args in (("queue", CLUSTER, "-o", "json"), ("status", "-o", "json"),
                     ("logs", CLUSTER)):
            out = self.h.herd(*args)
            outputs[args] = out.stdout + out.stderr
        for args, out in outputs.items():
            for secret in (USER_SECRET, conf["secret_access_key"]):
                self.assertNotIn(secret.encode(), out, args)

    def test_b_a_later_launch_naming_another_bucket_widens_the_same_key(self):
        key = self.node_conf()["access_key_id"]
        task = self.write("both.yaml", f"""name: both
file_mounts:
  ~/theirs: s3://{THEIRS}
run: cat ~/theirs/private.txt ~/mine/note.txt
""")
        p = self.h.herd("launch", "-c", CLUSTER, "-y", task)
        self.assertIn(b"not for the task", p.stdout)
        self.assertIn(b"written on the node", p.stdout)
        self.assertEqual(self.policy_resources(), sorted([
            f"arn:aws:s3:::{MINE}", f"arn:aws:s3:::{MINE}/*", f"arn:aws:s3:::{THEIRS}",
            f"arn:aws:s3:::{THEIRS}/*"]))
        self.assertEqual(self.iam_user()["keys"], [key])
        self.assertEqual(self.node_conf()["access_key_id"], key)
        rc, out = self.on_node(f"lsf herd-s3:{THEIRS}")
        self.assertEqual((rc, out), (0, "private.txt\n"))
        # B is only COPYed: the key reads it and may not write, overwrite or delete there.
        self.assertEqual(self.statement_on(f"arn:aws:s3:::{THEIRS}/*")["Action"],
                         ["s3:GetObject"])
        self.assert_refused(f"rcat herd-s3:{THEIRS}/y.txt", "y\n")
        self.assert_refused(f"rcat herd-s3:{THEIRS}/private.txt", "overwritten\n")
        self.assert_refused(f"deletefile herd-s3:{THEIRS}/private.txt")
        self.assertEqual(self.s3.objects(THEIRS), ["private.txt"])
        self.assertEqual(self.s3.rclone("cat", f"t:{THEIRS}/private.txt").stdout,
                         "not for the task\n")
        calls = self.ec2.snapshot()["calls"]
        self.assertIn(f"denied:s3:PutObject:arn:aws:s3:::{THEIRS}/y.txt", calls)
        self.assertIn(f"denied:s3:DeleteObject:arn:aws:s3:::{THEIRS}/private.txt", calls)
        # A, which the first launch MOUNTs, stays writable with the same key.
        rc, out = self.on_node(f"rcat herd-s3:{MINE}/later.txt", "later\n")
        self.assertEqual(rc, 0, out)
        self.assertIn("later.txt", self.s3.objects(MINE))

    def test_c_a_prefix_mount_reaches_only_that_prefix(self):
        task = self.write("prefix.yaml", f"""name: prefix
file_mounts:
  ~/teama:
    source: s3://{SHARED}/team-a
    mode: MOUNT
run: |
  cat ~/teama/a.txt
  echo "from the run" > ~/teama/run.txt
""")
        p = self.h.herd("launch", "-c", CLUSTER, "-y", task)
        self.assertIn(b"team a's", p.stdout)
        self.assertEqual(self.s3.objects(SHARED),
                         ["team-a/a.txt", "team-a/run.txt", "team-b/b.txt"])
        # The policy: objects under the prefix only; the bucket listed only under it.
        self.assertIn(f"arn:aws:s3:::{SHARED}/team-a/*", self.policy_resources())
        self.assertNotIn(f"arn:aws:s3:::{SHARED}/*", self.policy_resources())
        listing = [st for st in self.iam_user()["policies"]["herd-buckets"]["Statement"]
                   if st.get("Condition")]
        self.assertEqual(len(listing), 1, listing)
        self.assertEqual(listing[0]["Resource"], [f"arn:aws:s3:::{SHARED}"])
        self.assertEqual(listing[0]["Action"], ["s3:ListBucket"])
        self.assertEqual(listing[0]["Condition"],
                         {"StringLike": {"s3:prefix": ["team-a/*", "team-a"]}})
        # On the node: team-a is listed, read and written...
        rc, out = self.on_node(f"lsf herd-s3:{SHARED}/team-a")
        self.assertEqual((rc, sorted(out.split())), (0, ["a.txt", "run.txt"]))
        rc, out = self.on_node(f"rcat herd-s3:{SHARED}/team-a/node.txt", "node\n")
        self.assertEqual(rc, 0, out)
        # ...and team-b and the bucket's root are refused: list, read, write.
        self.assert_refused(f"lsf herd-s3:{SHARED}/team-b")
        self.assert_refused(f"lsf herd-s3:{SHARED}")
        self.assert_refused(f"cat herd-s3:{SHARED}/team-b/b.txt")
        self.assert_refused(f"rcat herd-s3:{SHARED}/team-b/x.txt", "x\n")
        self.assert_refused(f"rcat herd-s3:{SHARED}/root.txt", "x\n")
        self.assertEqual(self.s3.objects(SHARED),
                         ["team-a/a.txt", "team-a/node.txt", "team-a/run.txt", "team-b/b.txt"])
        calls = self.ec2.snapshot()["calls"]
        self.assertIn(f"denied:s3:ListBucket:arn:aws:s3:::{SHARED}", calls)
        self.assertIn(f"denied:s3:GetObject:arn:aws:s3:::{SHARED}/team-b/b.txt", calls)
        self.assertIn(f"denied:s3:PutObject:arn:aws:s3:::{SHARED}/team-b/x.txt", calls)
        # The earlier launches' scopes stay: A read-write, B read only.
        self.assertIn("s3:PutObject", self.statement_on(f"arn:aws:s3:::{MINE}/*")["Action"])
        self.assertEqual(self.statement_on(f"arn:aws:s3:::{THEIRS}/*")["Action"],
                         ["s3:GetObject"])

    def test_z_down_deletes_the_iam_user_and_the_kept_key(self):
        self.assertTrue(os.path.exists(os.path.join(self.h.env["HERD_HOME"], "storage_keys",
                                                    CLUSTER)))
        self.h.herd("down", CLUSTER, "-y")
        self.assertEqual(self.ec2.snapshot()["iam_users"], {})
        self.assertFalse(os.path.exists(os.path.join(self.h.env["HERD_HOME"], "storage_keys",
                                                     CLUSTER)))
        self.assertIn("iam:DeleteUser", self.ec2.snapshot()["calls"])
        ls = {b["name"]: b for b in json.loads(self.h.herd("storage", "ls", "-o", "json").stdout)}
        self.assertEqual(ls[MINE]["clusters"], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
