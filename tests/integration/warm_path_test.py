"""The warm path of `herd exec` on a 2-node local cluster, as a user sees it: once a command has
reached the head, the next ones reach it through the kept SSH port-forward without starting any
ssh process; a dead ControlMaster, a stale or hijacked recorded port and a master killed while a
job streams its log are all repaired by the next command (or the stream itself)."""

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, netns_available  # noqa: E402

CLUSTER = "hprfw"


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class WarmPathTest(HerdEnvTestCase):
    ENV_PREFIX = "warm"
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        # Our own copy of the agent binary, so a test can make it look rebuilt (touch).
        herd = os.environ.get("HERD", "herd")
        src = os.environ.get("HERDLET_UPLOAD") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(shutil.which(herd) or herd))),
            "agent", "herdlet.upload")
        cls.herdlet = os.path.join(cls.h.dir, "herdlet")
        shutil.copy(src, cls.herdlet)
        cls.h.env["HERDLET_BINARY"] = cls.herdlet

    @classmethod
    def launch_args(cls):
        return ("launch", "-c", CLUSTER, "--num-nodes", "2", "-y")

    @classmethod
    def after_launch(cls):
        cfg = os.path.join(cls.h.env["HERD_HOME"], "ssh", f"{CLUSTER}.config")
        with open(cfg) as f:
            m = re.search(r"ControlPath (\S+)/%C", f.read())
        assert m, "the generated ssh config names no ControlPath"
        cls.control_dir = m.group(1)
        cls.port_record = os.path.join(cls.control_dir, "head.port")
        # A fake `ssh` first on PATH that logs every call, then runs the real one.
        cls.bin = os.path.join(cls.h.dir, "bin")
        os.makedirs(cls.bin)
        cls.ssh_log = os.path.join(cls.h.dir, "ssh-calls.log")
        fake = os.path.join(cls.bin, "ssh")
        with open(fake, "w") as f:
            f.write(f"#!/bin/sh\necho \"ssh $*\" >> {cls.ssh_log}\nexec /usr/bin/ssh \"$@\"\n")
        os.chmod(fake, stat.S_IRWXU)

    def exec_true(self, *extra, env=None):
        p = subprocess.run([os.environ.get("HERD", "herd"), "exec", CLUSTER, *extra, "--", "true"],
                           capture_output=True, timeout=120, env=env or self.h.env)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertIn("Job finished (status: SUCCEEDED).", p.stderr.decode())
        return p

    def logged_env(self):
        if os.path.exists(self.ssh_log):
            os.unlink(self.ssh_log)
        return dict(self.h.env, PATH=self.bin + ":" + self.h.env["PATH"])

    def ssh_calls(self):
        if not os.path.exists(self.ssh_log):
            return []
        with open(self.ssh_log) as f:
            return f.read().splitlines()

    def kill_master(self):
        cfg = os.path.join(self.h.home, ".ssh", "config")
        p = subprocess.run(["ssh", "-F", cfg, "-O", "exit", CLUSTER], capture_output=True,
                           timeout=30, env=self.h.env)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))

    def recorded_port(self):
        with open(self.port_record) as f:
            return int(f.read().strip())

    def test_a_warm_exec_starts_no_ssh(self):
        self.exec_true("--num-nodes", "2")  # warms: master and forward exist afterwards
        env = self.logged_env()
        for n in ("1", "2"):
            self.exec_true("--num-nodes", n, env=env)
        self.assertEqual(self.ssh_calls(), [])
        # queue and logs take the same way.
        p = subprocess.run([os.environ.get("HERD", "herd"), "queue", CLUSTER], capture_output=True,
                           timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertEqual(self.ssh_calls(), [])

    def test_b_dead_master_is_replaced_by_the_next_command(self):
        self.exec_true()
        before = self.recorded_port()
        self.kill_master()
        env = self.logged_env()
        self.exec_true(env=env)
        calls = self.ssh_calls()
        self.assertTrue(any("-O forward" in c for c in calls), calls)
        self.assertNotEqual(self.recorded_port(), 0)
        # Warm again: the renewed forward is reused.
        env = self.logged_env()
        self.exec_true(env=env)
        self.assertEqual(self.ssh_calls(), [])
        self.assertIsInstance(before, int)

    def test_c_recorded_port_taken_by_another_program(self):
        self.exec_true()
        # Something else answers on the recorded port (after the forward went away with its
        # master): herd must not talk to it, and must repair the record.
        self.kill_master()
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            squatter.bind(("127.0.0.1", self.recorded_port()))
        except OSError:
            squatter.close()
            self.skipTest("the old port is in use by something else already")
        squatter.listen(8)
        seen = []

        def serve():
            squatter.settimeout(0.2)
            end = time.time() + 60
            while time.time() < end and squatter.fileno() >= 0:
                try:
                    conn, _ = squatter.accept()
                except (socket.timeout, OSError):
                    continue
                seen.append(1)
                conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nnot a herd head\n")
                conn.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            old = self.recorded_port()
            self.exec_true()
            self.assertNotEqual(self.recorded_port(), old)
            self.assertGreaterEqual(len(seen), 1)  # it was tried, refused, and replaced
        finally:
            squatter.close()
            t.join(5)

    def test_d_stream_survives_its_master_dying(self):
        self.exec_true()
        p = subprocess.Popen([os.environ.get("HERD", "herd"), "exec", CLUSTER, "--",
                              "echo before; sleep 4; echo after"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.h.env)
        try:
            time.sleep(1.5)
            self.kill_master()
            out, err = p.communicate(timeout=90)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        out = out.decode()
        self.assertIn("before", out)
        self.assertIn("after", out)
        self.assertEqual(out.count("before"), 1, out)  # resumed from its offset, no repeats

    def launch_json(self, env):
        p = subprocess.run([os.environ.get("HERD", "herd"), "launch", "-c", CLUSTER, "-y", "-o",
                            "json"], capture_output=True, timeout=300, env=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        return json.loads(p.stdout.decode().strip().splitlines()[-1])

    def test_e_relaunch_with_nothing_changed_needs_no_ssh(self):
        self.launch_json(self.h.env)  # records what is installed
        env = self.logged_env()
        r = self.launch_json(env)
        self.assertEqual((r["agents_uploaded"], r["agents_restarted"]), (0, 0))
        self.assertEqual(self.ssh_calls(), [])
        # A relaunch with a job takes the same way and runs it.
        p = subprocess.run([os.environ.get("HERD", "herd"), "launch", "-c", CLUSTER, "-y",
                            "--num-nodes", "2", "--", "echo relaunched on $SKYPILOT_NODE_RANK"],
                           capture_output=True, timeout=120, env=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertIn("relaunched on 0", p.stdout.decode())
        self.assertIn("relaunched on 1", p.stdout.decode())
        self.assertEqual(self.ssh_calls(), [])
        # The agent binary looks rebuilt: the full path runs (over ssh), finds the same bytes on
        # the nodes and changes nothing; the next relaunch is quick again.
        os.utime(self.herdlet)
        env = self.logged_env()
        r = self.launch_json(env)
        self.assertEqual((r["agents_uploaded"], r["agents_restarted"]), (0, 0))
        self.assertNotEqual(self.ssh_calls(), [])
        env = self.logged_env()
        self.launch_json(env)
        self.assertEqual(self.ssh_calls(), [])


if __name__ == "__main__":
    unittest.main()
