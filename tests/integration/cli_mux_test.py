"""The CLI's per-cluster mux (issue 8 P1; controller/core/mux.hpp), driven as a user would on a
2-node local cluster: after the first command, the next ones reach the head through the mux's
socket (HERD_TRACE says so) with output and exit codes identical to a direct connection
(HERD_MUX=0); a killed mux is replaced without the user seeing anything; Ctrl-C detaches and
`herd logs` reattaches through it; `herd down` leaves no mux process or socket."""

import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, netns_available, pids_by_cmdline, wait_for  # noqa: E402

CLUSTER = "hq1mux"
HERD = os.environ.get("HERD", "herd")


def mux_pids(socket_path):
    """Processes that are a `herd _mux` of socket_path."""
    return pids_by_cmdline(lambda argv: b"_mux" in argv and socket_path.encode() in argv)


def lines(out):
    """Output lines without their "(node, rank=R, pid=P) " prefix."""
    return [re.sub(r"^\([^)]*\) ", "", line) for line in out.decode().splitlines()]


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class MuxTest(HerdEnvTestCase):
    ENV_PREFIX = CLUSTER
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        cls.sock = os.path.join(cls.h.env["HERD_HOME"], "clusters", CLUSTER, "mux.sock")

    @classmethod
    def launch_args(cls):
        return ("launch", "-c", CLUSTER, "--num-nodes", "2", "-y")

    @classmethod
    def close_env(cls):
        try:
            super().close_env()
        finally:
            for pid in mux_pids(cls.sock):  # only if `herd down` failed to
                os.kill(pid, signal.SIGKILL)

    @classmethod
    def check_nothing_left(cls):
        assert mux_pids(cls.sock) == [], mux_pids(cls.sock)

    def run_herd(self, *args, env=None, timeout=120):
        return subprocess.run([HERD, *args], capture_output=True, timeout=timeout,
                              env=env or self.h.env)

    def traced(self, **extra):
        return dict(self.h.env, HERD_TRACE="1", **extra)

    def pid_file(self):
        try:
            with open(self.sock + ".pid") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def mux_pid(self):
        """The pid of the running mux, once its pid file names it. A mux that died without its
        clean shutdown leaves its pid file until the next mux (started by the next command that
        found no mux) writes its own, a moment after it took the lock: until then the file names a
        dead process, which is said on stderr with the muxes' log."""
        first = self.pid_file()
        ok = wait_for(lambda: self.pid_file() in mux_pids(self.sock))
        if first is not None and first != self.pid_file():
            sys.stderr.write(f"note: mux pid file named {first}, not running; mux.log:\n"
                             f"{self.mux_log()}\n")
        self.assertTrue(ok, f"no running mux named by {self.sock}.pid ({self.pid_file()}); live "
                            f"muxes {mux_pids(self.sock)}; mux.log:\n{self.mux_log()}")
        return self.pid_file()

    def test_a_second_exec_goes_through_the_mux_with_identical_results(self):
        self.run_herd("exec", CLUSTER, "--", "true")
        self.mux_pid()
        mode = os.stat(self.sock).st_mode & 0o777
        self.assertEqual(mode, 0o600)
        # A 2-node job that succeeds and a 1-node one that fails (exit 3): the same output, exit
        # codes and final words either way.
        for nodes, cmd, code in (("2", "echo out rank $SKYPILOT_NODE_RANK; echo err >&2", 0),
                                 ("1", "echo before failing; exit 3", 100)):
            results = {}
            for name, env in (("mux", self.traced()), ("direct", self.traced(HERD_MUX="0"))):
                p = self.run_herd("exec", CLUSTER, "--num-nodes", nodes, "--", cmd, env=env)
                err = p.stderr.decode()
                if name == "mux":
                    self.assertIn("head connected (through the mux)", err)
                    self.assertNotIn("head connected (TCP, TLS, websocket)", err)
                else:
                    self.assertIn("head connected (TCP, TLS, websocket)", err)
                    self.assertNotIn("through the mux", err)
                # Every line as printed, but the pids and job ids (new each run).
                out = sorted(re.sub(r"pid=\d+", "pid=P", re.sub(r"Job \d+", "Job J", x))
                             for x in p.stdout.decode().splitlines())
                results[name] = (p.returncode, out,
                                 re.findall(r"Job finished \(status: \w+\)", err))
            self.assertEqual(results["mux"], results["direct"])
            self.assertEqual(results["mux"][0], code)
            self.assertTrue(results["mux"][1])
            self.assertTrue(results["mux"][2])
        ok = self.run_herd("exec", CLUSTER, "--", "echo fine", env=self.traced())
        self.assertEqual(ok.returncode, 0, ok.stderr.decode(errors="replace"))
        self.assertEqual(lines(ok.stdout), ["fine"])
        self.assertIn("through the mux", ok.stderr.decode())
        # queue and a missing job's logs answer the same through it.
        q = self.run_herd("queue", CLUSTER, env=self.traced())
        self.assertEqual(q.returncode, 0, q.stderr.decode(errors="replace"))
        self.assertIn("through the mux", q.stderr.decode())
        missing = [self.run_herd("logs", CLUSTER, "9999", env=e)
                   for e in (self.h.env, dict(self.h.env, HERD_MUX="0"))]
        self.assertEqual([m.returncode for m in missing], [missing[1].returncode] * 2)
        self.assertNotEqual(missing[0].returncode, 0)

    def mux_log(self):
        try:
            with open(os.path.join(os.path.dirname(self.sock), "mux.log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError as e:
            return str(e)

    def test_b_a_killed_mux_falls_back_and_is_replaced(self):
        self.run_herd("exec", CLUSTER, "--", "true")
        old = self.mux_pid()
        os.kill(old, signal.SIGKILL)
        self.assertTrue(wait_for(lambda: old not in mux_pids(self.sock)))
        self.assertTrue(os.path.exists(self.sock))  # a dead mux's socket is left behind
        p = self.run_herd("exec", CLUSTER, "--", "echo after kill", env=self.traced())
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(lines(p.stdout), ["after kill"])
        self.assertIn("head connected (TCP, TLS, websocket)", err)
        self.assertNotIn("mux", err.replace("(through the mux)", ""))  # no error shown
        self.assertTrue(wait_for(lambda: mux_pids(self.sock) and self.mux_pid() != old))
        # The new mux serves the next command.
        self.assertTrue(wait_for(lambda: os.path.exists(self.sock)))
        p = self.run_herd("exec", CLUSTER, "--", "true", env=self.traced())
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertIn("through the mux", p.stderr.decode())

    def test_b2_a_mux_killed_mid_stream_is_survived(self):
        self.run_herd("exec", CLUSTER, "--", "true")
        pid = self.mux_pid()
        p = subprocess.Popen([HERD, "exec", CLUSTER, "--", "echo before; sleep 2; echo after"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.traced())
        try:
            self.assertEqual(lines(p.stdout.readline()), ["before"])
            os.kill(pid, signal.SIGKILL)  # the stream redials the head itself, from its offset
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        self.assertIn("through the mux", err.decode())
        self.assertEqual(lines(out), ["after"])  # "before" was read above, and not repeated

    def test_c_ctrl_c_detaches_and_logs_reattaches(self):
        self.run_herd("exec", CLUSTER, "--", "true")
        self.mux_pid()
        p = subprocess.Popen([HERD, "exec", CLUSTER, "--", "echo first; sleep 3; echo second"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.traced())
        try:
            self.assertEqual(lines(p.stdout.readline()), ["first"])
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        err = err.decode()
        self.assertIn("through the mux", err)
        self.assertIn("keeps running", err)
        m = re.search(r"Job submitted, ID: (\d+)", err)
        self.assertIsNotNone(m, err)
        self.assertNotIn("second", out.decode())
        logs = self.run_herd("logs", CLUSTER, m.group(1), env=self.traced())
        self.assertEqual(logs.returncode, 0, logs.stderr.decode(errors="replace"))
        self.assertIn("through the mux", logs.stderr.decode())
        self.assertEqual(lines(logs.stdout), ["first", "second"])
        # A detached job, reattached by `herd logs`.
        d = self.run_herd("exec", CLUSTER, "-d", "--", "echo detached; sleep 1; echo done")
        self.assertEqual(d.returncode, 0, d.stderr.decode(errors="replace"))
        job = re.search(r"Job submitted, ID: (\d+)", d.stderr.decode()).group(1)
        logs = self.run_herd("logs", CLUSTER, job, env=self.traced())
        self.assertEqual(logs.returncode, 0, logs.stderr.decode(errors="replace"))
        self.assertEqual(lines(logs.stdout), ["detached", "done"])

    def test_z_down_leaves_no_mux(self):
        self.run_herd("exec", CLUSTER, "--", "true")
        pid = self.mux_pid()
        self.h.herd("down", CLUSTER, "-y")
        self.assertNotIn(pid, mux_pids(self.sock))
        self.assertEqual(mux_pids(self.sock), [])
        self.assertFalse(os.path.exists(self.sock))
        self.assertFalse(os.path.exists(os.path.dirname(self.sock)))


if __name__ == "__main__":
    unittest.main()
