"""What an attacker who holds one node's files, or any certificate of the wrong kind, can do to a
running cluster: nothing that changes a node. A head and a worker started from the real binaries
with real certificates (LoopbackCluster, on 127.0.41.x), probed by a herdlet run with stolen
certificates and a forged config, by certificates from another CA, expired or not yet valid, and by
a hand-written websocket client (wsprobe) that sends forged and replayed registrations and
oversized and malformed frames at both of the head's endpoints. After every probe the cluster still
has exactly its two real nodes and runs a 2-node job on them."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import herd_env  # noqa: E402
import wsprobe  # noqa: E402
from loopback_cluster import HERD, HERDLET, LoopbackCluster, run  # noqa: E402

NAME = "hsec"
ADDRS = ["127.0.41.1", "127.0.41.2"]
ROGUE_ADDR = "127.0.41.9"
FAR_FUTURE_INCARNATION = 9000000000000000000
MAX_FRAME = 4 << 20  # limits::kMaxFrameBytes


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(what, fn, timeout=20):
    """herd_env.wait_for, failing the test with what it waited for."""
    got = herd_env.wait_for(fn, timeout)
    if not got:
        raise AssertionError(f"timed out waiting for {what}")
    return got


class TrustTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="herd-hsec-")
        os.chmod(cls.tmp, 0o700)
        cls.cluster = LoopbackCluster(NAME, ADDRS, gpus_per_node=0, cpus=2)
        cls.head_node = cls.cluster.node_id(0)
        cls.worker_node = cls.cluster.node_id(1)
        cls.worker_certs = os.path.join(cls.cluster.dir, cls.worker_node, "certs")

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "cluster", None):
            cls.cluster.close()
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def setUp(self):
        self.rogues = []

    def tearDown(self):
        for p in self.rogues:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    # ---- helpers ----

    def head_log(self):
        return self.cluster.agent_log(0)

    def start_rogue(self, tag, node_id, certs, incarnation=None):
        """A herdlet with a config of the attacker's choosing and the given certificate files: what
        anyone holding those files can run. Returns (process, path of its log)."""
        d = os.path.join(self.tmp, tag)
        os.makedirs(os.path.join(d, "state"))
        if incarnation is not None:
            with open(os.path.join(d, "state", "incarnation"), "w") as f:
                f.write(f"{incarnation}\n")
        cfg = {"role": "worker", "cluster": NAME, "node_id": node_id, "address": ROGUE_ADDR,
               "certs": certs, "state_dir": os.path.join(d, "state"), "cpus": 2,
               "head": f"{ADDRS[0]}:{self.cluster.port}"}
        path = os.path.join(d, "herdlet.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        log_path = os.path.join(d, "herdlet.log")
        env = dict(os.environ, HOME=d)
        env.pop("PYTHONUNBUFFERED", None)
        with open(log_path, "wb") as log:
            p = subprocess.Popen([HERDLET, "--config", path], stdout=log,
                                 stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.rogues.append(p)
        return p, log_path

    def issue(self, tag, ca_dir, node, *extra, trust=False):
        """An agent certificate for node from the CA in ca_dir. trust: the files then trust this
        cluster's CA (public, on every node), so that the rogue accepts the real head and the head
        is the one that judges the certificate."""
        out = os.path.join(self.tmp, tag + "-certs")
        run([HERD, "certs", "issue", ca_dir, "--node", node, "--ip", ROGUE_ADDR, "--out", out,
             *extra])
        if trust:
            shutil.copyfile(os.path.join(self.cluster.certs, "ca.crt"), os.path.join(out, "ca.crt"))
        return out

    def assert_cluster_intact(self):
        """Exactly the two real nodes, at their real addresses, alive; a 2-node job runs on them."""
        nodes = {n["node_id"]: n for n in self.cluster.nodes()}
        self.assertEqual(sorted(nodes), sorted([self.head_node, self.worker_node]))
        for i, node_id in enumerate([self.head_node, self.worker_node]):
            self.assertEqual(nodes[node_id]["address"], ADDRS[i])
            self.assertTrue(nodes[node_id]["alive"], nodes[node_id])
        p = self.cluster.herd("exec", "--num-nodes", "2", "--",
                              'echo "rank=$SKYPILOT_NODE_RANK ips=$(echo $SKYPILOT_NODE_IPS)"',
                              timeout=90)
        out = p.stdout.decode()
        self.assertIn(f"rank=0 ips={ADDRS[0]} {ADDRS[1]}", out)
        self.assertIn(f"rank=1 ips={ADDRS[0]} {ADDRS[1]}", out)

    # ---- the tests ----

    def test_a_worker_certificate_registers_as_no_other_node(self):
        """Worker 1's certificate, a forged config and an incarnation from the far future: as the
        head node (whose place would give it rank 0 and lock the real agent out) and as a node that
        does not exist. Both refused, logged with both identities, and nothing of the cluster
        changes: a restarted head-node agent (a lower incarnation than the forged one) is still
        accepted."""
        for node_id in (self.head_node, f"{NAME}-phantom"):
            with self.subTest(node_id=node_id):
                rogue, log_path = self.start_rogue(f"as-{node_id}", node_id, self.worker_certs,
                                                   incarnation=FAR_FUTURE_INCARNATION)
                wait_for("the head's refusal", lambda: f"refusing registration as node {node_id}"
                         in self.head_log())
                self.assertIn(f"its certificate proves node {self.worker_node} of cluster {NAME}, "
                              f"not node {node_id} of cluster {NAME}", self.head_log())
                wait_for("the rogue to be told", lambda: "head refused registration"
                         in read(log_path))
                self.assert_cluster_intact()
        self.cluster.restart_head()
        self.cluster.wait_nodes(2, timeout=30)
        self.assert_cluster_intact()

    def test_certificates_the_head_refuses_and_says_why(self):
        """Another CA (even one made for a cluster of the same name), an expired certificate and one
        not valid yet: each refused in the TLS handshake, the head's log naming why."""
        other_ca = os.path.join(self.tmp, "other-ca")
        run([HERD, "certs", "init", other_ca, "--cluster", NAME])
        cases = [
            ("other-ca", self.issue("other-ca", other_ca, self.worker_node, trust=True),
             ("certificate signature failure", "unable to get local issuer certificate")),
            ("expired", self.issue("expired", self.cluster.certs, self.worker_node, "--days", "1",
                                   "--starts-in-days", "-10"),
             ("certificate has expired",)),
            ("not-yet-valid", self.issue("later", self.cluster.certs, self.worker_node, "--days",
                                         "30", "--starts-in-days", "2"),
             ("certificate is not yet valid",)),
        ]
        for tag, certs, reasons in cases:
            with self.subTest(tag):
                before = len(self.head_log())
                self.start_rogue(tag, self.worker_node, certs)
                seen = wait_for(f"a refusal naming one of {reasons}",
                                lambda: [r for r in reasons if f"(peer certificate: {r})"
                                         in self.head_log()[before:]])
                self.assertTrue(seen)
                self.assertNotIn("registered from " + ROGUE_ADDR, self.head_log()[before:])
        self.assert_cluster_intact()

    def test_a_worker_dials_only_its_head_node(self):
        """Worker 1's stolen certificate serving as a head (a machine that took the head's address
        on the cluster network): a new node's agent, told its head is the head node, refuses it
        and never registers there, so the impostor can start nothing on it."""
        d = os.path.join(self.tmp, "fake-head")
        os.makedirs(os.path.join(d, "state"))
        cfg = {"role": "head", "cluster": NAME, "node_id": self.head_node, "address": ROGUE_ADDR,
               "listen": f"{ROGUE_ADDR}:0", "port_file": os.path.join(d, "port"),
               "certs": self.worker_certs, "state_dir": os.path.join(d, "state"), "cpus": 2}
        with open(os.path.join(d, "herdlet.yaml"), "w") as f:
            json.dump(cfg, f)
        with open(os.path.join(d, "herdlet.log"), "wb") as log:
            fake = subprocess.Popen([HERDLET, "--config", os.path.join(d, "herdlet.yaml")],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, HOME=d))
        self.rogues.append(fake)
        port = wait_for("the fake head's port", lambda: os.path.exists(os.path.join(d, "port"))
                        and read(os.path.join(d, "port")).strip())
        victim_node = f"{NAME}-worker2"
        certs = self.issue("victim", self.cluster.certs, victim_node)
        v = os.path.join(self.tmp, "victim")
        os.makedirs(os.path.join(v, "state"))
        cfg = {"role": "worker", "cluster": NAME, "node_id": victim_node, "address": ROGUE_ADDR,
               "head": f"{ROGUE_ADDR}:{port}", "head_node": self.head_node, "certs": certs,
               "state_dir": os.path.join(v, "state"), "cpus": 2}
        with open(os.path.join(v, "herdlet.yaml"), "w") as f:
            json.dump(cfg, f)
        with open(os.path.join(v, "herdlet.log"), "wb") as log:
            victim = subprocess.Popen([HERDLET, "--config", os.path.join(v, "herdlet.yaml")],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, env=dict(os.environ, HOME=v))
        self.rogues.append(victim)
        wait_for("the victim's refusal of the fake head", lambda: (
            f"is not node {self.head_node} of cluster {NAME}: its certificate proves node "
            f"{self.worker_node} of cluster {NAME}") in read(os.path.join(v, "herdlet.log")))
        self.assertNotIn("registered", read(os.path.join(d, "herdlet.log")).replace(
            f"node {self.head_node} registered", ""))
        self.assert_cluster_intact()

    def test_each_role_only_at_its_endpoint(self):
        ca = os.path.join(self.cluster.certs, "ca.crt")
        worker = (os.path.join(self.worker_certs, "agent.crt"),
                  os.path.join(self.worker_certs, "agent.key"))
        client = (os.path.join(self.cluster.certs, "client.crt"),
                  os.path.join(self.cluster.certs, "client.key"))
        for path, (cert, key) in (("/v1/client", worker), ("/v1/agent", client),
                                  ("/v1/admin", client)):
            with self.subTest(path=path, cert=cert):
                with self.assertRaises(wsprobe.Refused) as refused:
                    wsprobe.WsClient(ADDRS[0], self.cluster.port, path, ca, cert, key)
                self.assertEqual(refused.exception.status, 403)
        self.assert_cluster_intact()

    def agent_probe(self):
        return wsprobe.WsClient(ADDRS[0], self.cluster.port, "/v1/agent",
                                os.path.join(self.worker_certs, "ca.crt"),
                                os.path.join(self.worker_certs, "agent.crt"),
                                os.path.join(self.worker_certs, "agent.key"))

    def test_replayed_and_forged_registrations_on_the_wire(self):
        # An old registration of worker 1 replayed with its own certificate: stale, refused.
        ws = self.agent_probe()
        ws.send_frame(wsprobe.register(self.worker_node, ADDRS[1], 1))
        accepted, reason = wsprobe.register_ack(ws.recv_message())
        self.assertFalse(accepted)
        self.assertIn("stale agent: incarnation 1 <", reason)
        self.assertTrue(ws.closed_within(5))
        ws.close()
        # Worker 1's certificate registering as the head node on the wire.
        ws = self.agent_probe()
        ws.send_frame(wsprobe.register(self.head_node, ROGUE_ADDR, FAR_FUTURE_INCARNATION))
        accepted, reason = wsprobe.register_ack(ws.recv_message())
        self.assertFalse(accepted)
        self.assertIn(f"proves node {self.worker_node}", reason)
        self.assertTrue(ws.closed_within(5))
        ws.close()
        # A report before any registration.
        ws = self.agent_probe()
        ws.send_frame(wsprobe.field_varint(1, 1) + wsprobe.field_bytes(3, b""))  # a heartbeat
        self.assertTrue(ws.closed_within(5))
        ws.close()
        self.assert_cluster_intact()

    def test_oversized_and_malformed_frames_at_both_endpoints(self):
        ca = os.path.join(self.cluster.certs, "ca.crt")
        client = (os.path.join(self.cluster.certs, "client.crt"),
                  os.path.join(self.cluster.certs, "client.key"))
        endpoints = {
            "/v1/agent": self.agent_probe,
            "/v1/client": lambda: wsprobe.WsClient(ADDRS[0], self.cluster.port, "/v1/client",
                                                   ca, *client),
        }
        for path, dial in endpoints.items():
            with self.subTest(path=path, frame="over the limit"):
                ws = dial()
                # Announced one byte over the limit; the head must not wait for (or buffer) it.
                ws.send_frame(b"x" * 1024, declared_length=MAX_FRAME + 1)
                self.assertTrue(ws.closed_within(5))
                ws.close()
            with self.subTest(path=path, frame="not protobuf"):
                ws = dial()
                ws.send_frame(b"\xff\xff\xff\xff not a protobuf envelope")
                self.assertTrue(ws.closed_within(5))
                ws.close()
            with self.subTest(path=path, frame="a text frame"):
                ws = dial()
                ws.send_frame(b"hello", opcode=0x1)
                self.assertTrue(ws.closed_within(5))
                ws.close()
        # A client request still works on a fresh connection: the head only dropped the bad ones.
        ws = endpoints["/v1/client"]()
        ws.send_frame(wsprobe.nodes_request(7))
        reply = dict(wsprobe.parse_fields(ws.recv_message()))
        self.assertEqual(reply.get(2), 7)
        ws.close()
        self.assert_cluster_intact()


if __name__ == "__main__":
    unittest.main(verbosity=2)
