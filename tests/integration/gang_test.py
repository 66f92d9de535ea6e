"""The agent core end to end on one machine: a head and three workers on 127.0.0.2-5 with real
mutual TLS, jobs submitted with the real `herd` CLI, and the checks a user would make."""

import json
import os
import re
import ssl
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from loopback_cluster import (HERD, ClusterTestCase, LoopbackCluster, job_id_of, run,  # noqa: E402
                              write_task)

ADDRS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]

PRINT_ENV = r"""
for v in SKYPILOT_NODE_RANK SKYPILOT_NUM_NODES SKYPILOT_NUM_GPUS_PER_NODE SKYPILOT_TASK_ID \
         SKYPILOT_CLUSTER_INFO SKYPILOT_USER HERD_NODE_RANK HERD_NUM_NODES PYTHONUNBUFFERED \
         MY_VAR CUDA_VISIBLE_DEVICES; do
  echo "$v=${!v-<unset>}"
done
echo "IPS=$(echo "$SKYPILOT_NODE_IPS" | paste -sd, -)"
echo "HERD_IPS=$(echo "$HERD_NODE_IPS" | paste -sd, -)"
"""

SETUP_ENV = r"""
echo "SETUP_RANK=$SKYPILOT_SETUP_NODE_RANK"
echo "SETUP_IPS=$(echo "$SKYPILOT_SETUP_NODE_IPS" | paste -sd, -)"
echo "SETUP_NUM_NODES=$SKYPILOT_NUM_NODES"
echo "SETUP_GPUS=$SKYPILOT_SETUP_NUM_GPUS_PER_NODE"
echo "SETUP_CUDA=${CUDA_VISIBLE_DEVICES-<unset>}"
"""


def block(script, indent="  "):
    return "\n".join(indent + line for line in script.strip("\n").splitlines()) + "\n"


class GangTest(ClusterTestCase):
    CLUSTER, ADDRS = "gang", ADDRS

    def exec_task(self, task_path, *flags, timeout=120):
        return run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env(), *flags,
                    task_path], timeout=timeout, check=False)

    def test_nodes_registered_in_cluster_order(self):
        nodes = self.cluster.nodes()
        self.assertEqual([n["address"] for n in nodes], ADDRS)
        self.assertTrue(nodes[0]["is_head"])
        self.assertTrue(all(n["alive"] for n in nodes))
        self.assertEqual({n["gpus"] for n in nodes}, {2})
        self.assertEqual({n["gpu_source"] for n in nodes}, {"declared"})

    def test_two_node_job_environment_and_prefixes(self):
        task = write_task(self.tasks, "env.yaml", (
            "name: envcheck\nnum_nodes: 2\nresources:\n  accelerators: L4:0.5\n"
            "envs:\n  MY_VAR: from-yaml\n"
            "setup: |\n" + block(SETUP_ENV) + "run: |\n" + block(PRINT_ENV)))
        p = self.exec_task(task, "--env", "MY_VAR=from-flag")
        out = p.stdout.decode()
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 0, out + err)
        job = job_id_of(p.stderr)
        self.assertIn("Waiting for task resources on 2 node(s).", err)
        self.assertIn("Job started. Streaming logs...", err)
        self.assertIn("Job finished (status: SUCCEEDED).", err)

        by_rank = {0: {}, 1: {}}
        pid_re = r"pid=(\d+)"
        for line in out.splitlines():
            m = re.match(r"^\(head, rank=0, " + pid_re + r"\) (\w+)=(.*)$", line)
            if m:
                by_rank[0][m.group(2)] = m.group(3)
                continue
            m = re.match(r"^\(worker1, rank=1, " + pid_re + r", ip=127\.0\.0\.3\) (\w+)=(.*)$",
                         line)
            if m:
                by_rank[1][m.group(2)] = m.group(3)
        for rank in (0, 1):
            env = by_rank[rank]
            self.assertEqual(env.get("SKYPILOT_NODE_RANK"), str(rank), out)
            self.assertEqual(env["HERD_NODE_RANK"], str(rank))
            self.assertEqual(env["IPS"], "127.0.0.2,127.0.0.3")
            self.assertEqual(env["HERD_IPS"], "127.0.0.2,127.0.0.3")
            self.assertEqual(env["SKYPILOT_NUM_NODES"], "2")
            self.assertEqual(env["HERD_NUM_NODES"], "2")
            self.assertEqual(env["SKYPILOT_NUM_GPUS_PER_NODE"], "1")  # 0.5 rounded up
            self.assertRegex(env["SKYPILOT_TASK_ID"],
                             r"^sky-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d-\d{6}_gang_%d$" % job)
            info = json.loads(env["SKYPILOT_CLUSTER_INFO"])
            self.assertEqual(info["cluster_name"], "gang")
            self.assertEqual(set(info), {"cluster_name", "cloud", "region", "zone"})
            self.assertEqual(env["SKYPILOT_USER"], os.environ.get("USER", "root"))
            # stdout is a pty, so Python line-buffers; herd does not force unbuffered output.
            self.assertEqual(env["PYTHONUNBUFFERED"], "<unset>")
            self.assertEqual(env["MY_VAR"], "from-flag")  # --env beats the YAML
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"], "0")  # its share of GPU 0 (L4:0.5)
        # Setup ran on every node of the cluster, each with its cluster rank, CUDA unset.
        setup = {}
        for line in out.splitlines():
            m = re.match(r"^\(setup pid=\d+(?:, ip=(127\.0\.0\.\d))?\) (\w+)=(.*)$", line)
            if m:
                setup.setdefault(m.group(1) or "127.0.0.2", {})[m.group(2)] = m.group(3)
        self.assertEqual(sorted(setup), ADDRS, out)
        for i, addr in enumerate(ADDRS):
            self.assertEqual(setup[addr]["SETUP_RANK"], str(i))
            self.assertEqual(setup[addr]["SETUP_IPS"], ",".join(ADDRS))
            self.assertEqual(setup[addr]["SETUP_NUM_NODES"], "4")
            self.assertEqual(setup[addr]["SETUP_GPUS"], "1")
            self.assertEqual(setup[addr]["SETUP_CUDA"], "<unset>")
        # The merged log on the head holds the same bytes the client printed.
        logs = self.cluster.herd("logs", "--no-follow", str(job))
        self.assertEqual(logs.stdout.decode(), out)
        self.assertEqual(logs.returncode, 0)

    def test_subset_of_nodes_is_renumbered(self):
        # Occupy both GPUs of the head; a 2-node job then runs on workers 1 and 2 as ranks 0, 1.
        blocker = self.cluster.herd("exec", *self.cluster.marker_env(), "--gpus", "L4:2", "-d",
                                    "--", "sleep", "60")
        blocker_id = job_id_of(blocker.stderr)
        try:
            self.cluster.wait_state(blocker_id, {"RUNNING"})
            task = write_task(self.tasks, "subset.yaml", (
                "num_nodes: 2\nresources:\n  accelerators: L4:1\n"
                "run: |\n" + block(PRINT_ENV)))
            p = self.exec_task(task)
            out = p.stdout.decode()
            self.assertEqual(p.returncode, 0, out + p.stderr.decode())
            self.assertRegex(out, r"\(head, rank=0, pid=\d+\) SKYPILOT_NODE_RANK=0\n")
            self.assertRegex(out, r"\(worker1, rank=1, pid=\d+, ip=127\.0\.0\.4\) "
                                  r"SKYPILOT_NODE_RANK=1\n")
            self.assertIn("IPS=127.0.0.3,127.0.0.4", out)
            job = self.cluster.queue()[job_id_of(p.stderr)]
            self.assertEqual(job["nodes"], ["gang-worker1", "gang-worker2"])
        finally:
            self.cluster.herd("cancel", str(blocker_id))
        self.assertEqual(self.cluster.wait_state(blocker_id, {"CANCELLED"})["status"], "CANCELLED")

    def test_fail_fast_kills_other_ranks(self):
        task = write_task(self.tasks, "failfast.yaml", (
            "num_nodes: 2\nrun: |\n"
            "  if [ \"$SKYPILOT_NODE_RANK\" = 1 ]; then sleep 1; echo failing; exit 3; fi\n"
            "  echo waiting; sleep 60; echo never\n"))
        t0 = time.time()
        p = self.exec_task(task)
        elapsed = time.time() - t0
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 100, out + p.stderr.decode())
        self.assertIn("Job finished (status: FAILED).", p.stderr.decode())
        # rank 1 fails after ~1 s; rank 0 must be dead within 2 s of that.
        self.assertLess(elapsed, 1 + 2 + 1.5, "other rank not killed quickly")
        self.assertNotIn("never", out)
        job = self.cluster.queue()[job_id_of(p.stderr)]
        self.assertEqual(job["status"], "FAILED")
        self.assertEqual(job["exit_codes"], [137, 3])
        self.assertEqual(job["first_failed_rank"], 1)
        self.assertEqual(job["first_failed_node"], "gang-worker1")
        self.assertIn("ERROR: Job %d failed with return code list: [137, 3]" % job["id"], out)

    def test_failing_setup_never_runs(self):
        marker = os.path.join(self.tasks, "run-started")
        task = write_task(self.tasks, "badsetup.yaml", (
            "num_nodes: 2\n"
            "setup: |\n  echo setting up\n  if [ \"$SKYPILOT_SETUP_NODE_RANK\" = 2 ]; then exit 7; fi\n"
            "run: |\n  touch %s\n" % marker))
        p = self.exec_task(task)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 100, out + p.stderr.decode())
        self.assertIn("Job finished (status: FAILED_SETUP).", p.stderr.decode())
        self.assertRegex(out, r"ERROR: Job \d+'s setup failed")
        self.assertFalse(os.path.exists(marker), "run started after a failed setup")
        self.assertEqual(self.cluster.queue()[job_id_of(p.stderr)]["status"], "FAILED_SETUP")

    def test_cancel_kills_setsid_children(self):
        task = write_task(self.tasks, "escape.yaml", (
            "num_nodes: 2\nrun: |\n"
            "  setsid sleep 1000 < /dev/null > /dev/null 2>&1 &\n"
            "  setsid bash -c 'sleep 1000' &\n"
            "  nohup sleep 1000 > /dev/null 2>&1 &\n"
            "  echo children started\n"
            "  sleep 1000\n"))
        p = run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env("cancel"), "-d",
                 task])
        job = job_id_of(p.stderr)
        self.cluster.wait_state(job, {"RUNNING"})
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.cluster.herd("logs", "--no-follow", str(job),
                                 check=False).stdout.count(b"children started") == 2:
                break
            time.sleep(0.1)
        # 2 nodes x (bash + 3 escapes (+ setsid's bash) + sleep) are alive now.
        self.assertGreaterEqual(len(self.cluster.leftovers("cancel")), 8)
        c = self.cluster.herd("cancel", str(job))
        self.assertIn(b"Cancelling job(s): %d" % job, c.stdout)
        self.assertEqual(self.cluster.wait_state(job, {"CANCELLED"})["status"], "CANCELLED")
        deadline = time.time() + 5
        while self.cluster.leftovers("cancel") and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.cluster.leftovers("cancel"), [], "processes survived cancel")
        status = self.cluster.herd("logs", "--status", str(job), check=False)
        self.assertEqual(status.returncode, 103)

    def test_many_lines_in_order_with_resume(self):
        n = 100000
        task = write_task(self.tasks, "lines.yaml", (
            "num_nodes: 2\nrun: |\n"
            "  seq -f \"r${SKYPILOT_NODE_RANK} %%g\" 1 %d\n"
            "  printf 'r%%s-last-no-newline' \"$SKYPILOT_NODE_RANK\"\n" % n))
        proc = subprocess.Popen([HERD, "exec", *self.cluster.target(),
                                 *self.cluster.marker_env(), task],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            first = b""
            while len(first) < 1_000_000:  # about a third of the stream, then drop the client
                chunk = proc.stdout.read1(65536)
                if not chunk:
                    break
                first += chunk
            proc.kill()
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        job = job_id_of(err)
        # Resume from the last byte received, following to the end.
        rest = run([HERD, "logs", *self.cluster.target(), "--offset", str(len(first)), str(job)],
                   timeout=120)
        self.assertEqual(rest.returncode, 0)
        whole = first + rest.stdout
        full = self.cluster.herd("logs", "--no-follow", str(job)).stdout
        self.assertEqual(whole, full)
        ranks = {0: [], 1: []}
        for line in full.decode().splitlines():
            m = re.match(r"^\((head|worker1), rank=(\d), pid=\d+(?:, ip=[\d.]+)?\) (.*)$", line)
            if m:
                ranks[int(m.group(2))].append(m.group(3))
        for r in (0, 1):
            want = ["r%d %d" % (r, i) for i in range(1, n + 1)] + ["r%d-last-no-newline" % r]
            self.assertEqual(len(ranks[r]), len(want))
            self.assertEqual(ranks[r], want)

    def test_bad_client_certificates_are_refused(self):
        # No certificate at all: the TLS handshake fails.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(os.path.join(self.cluster.certs, "ca.crt"))
        ctx.check_hostname = False
        with socket.create_connection((ADDRS[0], self.cluster.port), timeout=5) as raw:
            with self.assertRaises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                with ctx.wrap_socket(raw) as tls:
                    tls.sendall(b"GET /v1/client HTTP/1.1\r\nHost: x\r\n\r\n")
                    if not tls.recv(100):
                        raise ConnectionResetError("closed")
        # A certificate from another CA.
        other = os.path.join(self.tasks, "other-ca")
        run([HERD, "certs", "init", other, "--cluster", "other"])
        p = self.cluster.herd("queue", certs=other, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"cannot reach the head", p.stderr)
        # An agent's certificate cannot act as a client.
        agent_as_client = os.path.join(self.tasks, "agent-as-client")
        os.makedirs(agent_as_client, exist_ok=True)
        node_certs = os.path.join(self.cluster.dir, "gang-worker1", "certs")
        for src, dst in (("ca.crt", "ca.crt"), ("agent.crt", "client.crt"),
                         ("agent.key", "client.key")):
            with open(os.path.join(node_certs, src), "rb") as f, \
                    open(os.path.join(agent_as_client, dst), "wb") as g:
                g.write(f.read())
        p = run([HERD, "cancel", *self.cluster.target(agent_as_client), "-a"], check=False)
        self.assertNotEqual(p.returncode, 0)
        # The head is still up and serving the real client.
        self.assertEqual(len(self.cluster.nodes()), 4)

    def test_garbage_frame_drops_only_that_peer(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(os.path.join(self.cluster.certs, "ca.crt"))
        ctx.load_cert_chain(os.path.join(self.cluster.certs, "client.crt"),
                            os.path.join(self.cluster.certs, "client.key"))
        ctx.check_hostname = False
        with socket.create_connection((ADDRS[0], self.cluster.port), timeout=10) as raw:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"GET /v1/client HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                            b"Sec-WebSocket-Version: 13\r\n\r\n")
                reply = b""
                while b"\r\n\r\n" not in reply:
                    reply += tls.recv(4096)
                self.assertIn(b"101", reply.split(b"\r\n")[0])
                payload = b"\xff\xfe not a protobuf envelope \x00\x01" * 3
                mask = b"\x01\x02\x03\x04"
                frame = bytes([0x82, 0x80 | len(payload)]) + mask + bytes(
                    b ^ mask[i % 4] for i, b in enumerate(payload))
                tls.sendall(frame)
                data = b""
                deadline = time.time() + 10
                while time.time() < deadline:
                    try:
                        chunk = tls.recv(4096)
                    except (ssl.SSLError, ConnectionResetError, TimeoutError):
                        break
                    if not chunk:
                        break
                    data += chunk
                    if data[0] & 0x0F == 0x8:
                        break  # the head's close frame; it then waits for our close reply
                # The head answers with a websocket close (opcode 8) or just drops the socket.
                self.assertTrue(data == b"" or data[0] & 0x0F == 0x8, data)
        self.assertIn("dropping client", self.cluster.agent_log(0))
        self.assertEqual(len(self.cluster.nodes()), 4)  # the head serves on

    def test_restarted_worker_agent_adopts_its_processes(self):
        task = write_task(self.tasks, "adopt.yaml",
                          "num_nodes: 2\nrun: |\n  echo started $SKYPILOT_NODE_RANK\n"
                          "  for i in $(seq 1 40); do echo tick $SKYPILOT_NODE_RANK $i; sleep 0.1;"
                          " done\n")
        p = run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env("adopt"), "-d",
                 task])
        job = job_id_of(p.stderr)
        self.cluster.wait_state(job, {"RUNNING"})
        deadline = time.time() + 20
        pid = None
        while time.time() < deadline and pid is None:
            out = self.cluster.herd("logs", "--no-follow", str(job), check=False).stdout.decode()
            m = re.search(r"rank=1, pid=(\d+)[^)]*\) started 1", out)
            pid = int(m.group(1)) if m else None
            time.sleep(0.1)
        self.assertIsNotNone(pid)
        self.cluster.restart_agent(1)  # rank 1 runs on worker 1
        # The job's process runs on under the new agent (same pid), never started twice.
        self.assertIn(pid, self.cluster.leftovers("adopt"))
        self.assertEqual(self.cluster.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER"},
                                                 timeout=60)["status"], "SUCCEEDED")
        log = self.cluster.herd("logs", "--no-follow", str(job)).stdout.decode()
        for rank in (0, 1):
            self.assertEqual(log.count(f"started {rank}\n"), 1, log)
            ticks = [int(line.rsplit(" ", 1)[1]) for line in log.splitlines()
                     if f"tick {rank} " in line]
            self.assertEqual(ticks, list(range(1, 41)), log)  # each once, in order
            pids = set(re.findall(r"rank=%d, pid=(\d+)" % rank, log))
            self.assertEqual(len(pids), 1, log)
        self.assertIn("1 adopted", self.cluster.agent_log(1))

    def test_zz_workers_reregister_after_head_restart(self):
        task = write_task(self.tasks, "longrun.yaml",
                          "num_nodes: 2\nrun: |\n  for i in $(seq 1 50); do "
                          "echo line $SKYPILOT_NODE_RANK $i; sleep 0.1; done\n")
        p = run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env("orphan"), "-d",
                 task])
        job = job_id_of(p.stderr)
        self.cluster.wait_state(job, {"RUNNING"})
        # A client following the job reattaches across the head's restart.
        follower = subprocess.Popen([HERD, "logs", *self.cluster.target(), str(job)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            time.sleep(1)
            self.cluster.restart_head()
            self.cluster.wait_nodes(4, timeout=30)
            # The job the old head ran goes on under the new one and succeeds.
            self.assertEqual(self.cluster.wait_state(job, {"SUCCEEDED", "FAILED", "FAILED_DRIVER"},
                                                     timeout=60)["status"], "SUCCEEDED")
            out, err = follower.communicate(timeout=60)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        self.assertEqual(follower.returncode, 0, err)
        for text in (out.decode(), self.cluster.herd("logs", "--no-follow", str(job)).stdout.decode()):
            for rank in (0, 1):
                got = [int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if f") line {rank} " in line]
                self.assertEqual(got, list(range(1, 51)), text)  # each line once, in order
        self.assertEqual(self.cluster.leftovers("orphan"), [])
        log = self.cluster.agent_log(1)
        self.assertIn("connection to head lost", log)
        self.assertIn("registered with head", log.split("connection to head lost")[-1])
        # And the re-formed cluster runs gangs again.
        p = self.cluster.herd("exec", "--num-nodes", "4", "--", "echo", "rank", "$SKYPILOT_NODE_RANK")
        for r in range(4):
            self.assertIn(b"rank %d\n" % r, p.stdout)

    @unittest.skipUnless(os.environ.get("FAKE_NVML"), "FAKE_NVML not set")
    def test_herdlet_probe_gpus_through_nvml(self):
        env = dict(os.environ, FAKE_NVML_GPUS="NVIDIA H200,NVIDIA H200")
        p = run([os.environ.get("HERDLET", "herdlet"), "--probe-gpus", "--nvml-library",
                 os.environ["FAKE_NVML"]], env=env)
        self.assertEqual(json.loads(p.stdout), {"source": "nvml", "count": 2,
                                                "names": ["NVIDIA H200", "NVIDIA H200"]})

    def test_empty_answers(self):
        other = LoopbackCluster("empty", ["127.0.0.6"])
        try:
            self.assertEqual(other.queue(), {})  # no job yet: an empty table, not an error
            p = other.herd("cancel", "-a")
            self.assertIn(b"No job to cancel.", p.stdout)
        finally:
            other.close()

    def test_missing_job_exit_code(self):
        p = self.cluster.herd("logs", "--no-follow", "9999", check=False)
        self.assertEqual(p.returncode, 102, p.stderr)
        self.assertIn(b"job 9999 not found", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
