"""Hostile and careless task files, through the real `herd` binary as a user runs it: an alias
bomb, a 50 MB file, a 10^5-deep nest, env files that push a submit past the frame size, an empty
task, a huge num_nodes, a long name, a negative `logs --offset`, and more secrets than an
environment variable can carry handed to a managed job's controller.

Each refusal must come first (before any cluster is looked up: the cluster names here do not
exist), be the same from `check`, `exec`, `launch` and `jobs launch`, exit 2 with a message that
names the file (and line:col where there is one; other commands than check put "herd: " before
it, as before any error), and cost little: each command is timed and its
peak RSS read from wait4's rusage of that one child.

HOME and HERD_HOME point into a temporary directory, so nothing here reads or writes the user's
clusters; whatever a command left running there is killed at the end."""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from loopback_cluster import LoopbackCluster  # noqa: E402

HERD = os.environ.get("HERD", "herd")
# Generous bounds: the limits refuse these in milliseconds and a few MB; before them the alias
# bomb took seconds and hundreds of MB, the 50 MB file 6 s and 324 MB.
MAX_SECONDS = 5.0
MAX_RSS_KB = 100 * 1024
# Cluster names no test creates (prefix hsec-), and an ssh pool that does not exist, so that a
# launch that got past the task could not provision anything.
NO_CLUSTER = "hsec-nosuch"
NO_POOL = "ssh/hsec-nopool"
# A managed job's states once it has ended.
TERMINAL = ("SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE",
            "FAILED_CONTROLLER")


class Result:
    def __init__(self, code, stdout, stderr, seconds, rss_kb):
        self.code, self.stdout, self.stderr = code, stdout, stderr
        self.seconds, self.rss_kb = seconds, rss_kb

    def __repr__(self):
        return (f"exit {self.code} in {self.seconds:.2f} s, {self.rss_kb} KB\n"
                f"stdout: {self.stdout[:500]!r}\nstderr: {self.stderr[:500]!r}")


class HostileTaskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="herd-hsec-task-")
        cls.home = os.path.join(cls.tmp, "home")
        os.mkdir(cls.home)
        cls.env = dict(os.environ, HOME=cls.home, HERD_HOME=os.path.join(cls.home, ".herd"),
                       HERD_MUX="0")
        cls.env.pop("HERD_TRACE", None)

    @classmethod
    def tearDownClass(cls):
        kill_processes_with_env(f"HERD_HOME={cls.env['HERD_HOME']}")
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def herd(self, *args, timeout=60):
        """Runs herd with stdin closed; its exit code, output, wall time and peak RSS. The RSS comes
        from GNU time (-o: a file of its own), which forks herd from a small process: a child
        forked from this Python process would report this process's RSS at the fork as its own
        peak (Linux keeps the larger of the two across exec)."""
        stats = self.path("time.out")
        start = time.monotonic()
        proc = subprocess.Popen(["/usr/bin/time", "-q", "-o", stats, "-f", "%M", HERD, *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env, start_new_session=True,
                                text=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        seconds = time.monotonic() - start
        with open(stats) as f:
            rss_kb = int(f.read().split()[-1])
        return Result(proc.returncode, stdout, stderr, seconds, rss_kb)

    def assert_cheap(self, r):
        self.assertLess(r.seconds, MAX_SECONDS, r)
        self.assertLess(r.rss_kb, MAX_RSS_KB, r)

    def assert_refused_everywhere(self, task, message, extra=()):
        """check, exec (a cluster that does not exist), launch and jobs launch all exit 2 with
        the same message, cheaply, before looking at any cluster."""
        commands = [
            ["check", *extra, task],
            ["exec", NO_CLUSTER, *extra, task],
            ["exec", NO_CLUSTER, "-d", *extra, task],
            ["launch", "-c", NO_CLUSTER, "--infra", NO_POOL, "-y", "-d", *extra, task],
            ["jobs", "launch", "--infra", NO_POOL, "-y", "-d", *extra, task],
        ]
        for args in commands:
            with self.subTest(args=" ".join(a[:60] for a in args)):
                r = self.herd(*args)
                self.assertEqual(r.code, 2, r)
                # Commands other than check mark their errors "herd: ", as every command does.
                last = r.stderr.strip().splitlines()[-1]
                self.assertEqual(last.removeprefix("herd: ") if args[0] != "check" else last,
                                 message, r)
                self.assertNotIn(NO_CLUSTER + " not found", r.stderr)
                self.assert_cheap(r)

    def test_alias_bomb_refused_at_its_alias(self):
        # The probe's shape: one large anchored string repeated by thousands of aliases in setup
        # (140 KB of file; before the limit `check` took 12 s and 1.6 GB and called it valid).
        lines = ["name: bomb", "setup:", '  - &big "' + "x" * 100_000 + '"']
        lines += ["  - *big"] * 5000
        lines += ["run: echo hi"]
        task = self.write("bomb.yaml", "\n".join(lines) + "\n")
        r = self.herd("check", task)
        self.assertEqual(r.code, 2, r)
        m = re.fullmatch(re.escape(task) + r":(\d+):(\d+): the task expands to more than (\d+) "
                         r"bytes .*here .*", r.stderr.strip())
        self.assertIsNotNone(m, r)
        line, col = int(m.group(1)), int(m.group(2))
        self.assertEqual(lines[line - 1], "  - *big", r)  # an alias's place, the crossing one
        self.assertEqual(col, 5)
        self.assertLessEqual(int(m.group(3)), 10 * 2**20)
        self.assert_cheap(r)
        self.assert_refused_everywhere(task, r.stderr.strip())

    def test_a_few_aliases_are_fine(self):
        task = self.write("aliases.yaml",
                          "envs: {DATA: &d /mnt/data, COPY: *d}\n"
                          "setup: &prep echo prep\nrun: [*prep, echo train]\n")
        r = self.herd("check", "-o", "json", task)
        self.assertEqual(r.code, 0, r)
        t = json.loads(r.stdout)
        self.assertEqual(t["envs"]["COPY"], "/mnt/data")
        self.assertEqual(t["run"], "echo prep\necho train")

    def test_50mb_file_refused_before_it_is_read(self):
        task = self.path("big.yaml")
        with open(task, "w") as f:
            f.write("run: |\n")
            line = "  echo " + "y" * 90 + "\n"
            f.write(line * (50 * 2**20 // len(line)))
        size = os.path.getsize(task)
        r = self.herd("check", task)
        self.assertEqual(r.code, 2, r)
        m = re.fullmatch(re.escape(f"{task}: the file is {size} bytes; a task file may be at most ")
                         + r"(\d+) bytes .*", r.stderr.strip())
        self.assertIsNotNone(m, r)
        self.assertLess(int(m.group(1)), 4 * 2**20)  # it fits a frame with room to spare
        self.assert_cheap(r)
        self.assert_refused_everywhere(task, r.stderr.strip())

    def test_deep_nest_names_the_depth_limit(self):
        task = self.write("deep.yaml", "run: " + "[" * 100_000 + "]" * 100_000 + "\n")
        r = self.herd("check", task)
        self.assertEqual(r.code, 2, r)
        m = re.fullmatch(re.escape(task) + r":1:(\d+): the file nests lists and mappings more "
                         r"than (\d+) levels deep here", r.stderr.strip())
        self.assertIsNotNone(m, r)
        # The root mapping is the first level; the first '[' at column 6 the second.
        self.assertEqual(int(m.group(1)), 5 + int(m.group(2)), r)
        self.assertNotIn("bad file", r.stderr)
        self.assert_cheap(r)
        self.assert_refused_everywhere(task, r.stderr.strip())

    def test_env_files_that_push_the_submit_past_the_frame(self):
        # Each env file is within the file limit; together they are more than a submit can carry.
        task = self.write("small.yaml", "name: small\nrun: echo hi\n")
        flags = []
        for i in range(20):
            flags += ["--env-file", self.write(f"part{i}.env", f"PART{i}=" + "v" * 200_000 + "\n")]
        r = self.herd("check", *flags, task)
        self.assertEqual(r.code, 2, r)
        self.assertRegex(r.stderr.strip(), "^" + re.escape(task) + r": the task is \d+ bytes as "
                         r"submitted .*--env-file.* over the limit of \d+ bytes")
        self.assert_cheap(r)
        self.assert_refused_everywhere(task, r.stderr.strip(), extra=flags)
        # A command instead of a file: the same limit, before the cluster is looked up.
        r = self.herd("exec", NO_CLUSTER, *flags, "--", "echo", "hi")
        self.assertEqual(r.code, 2, r)
        self.assertRegex(r.stderr, r"<command>: the task is \d+ bytes as submitted")

    def test_empty_task_is_valid_with_a_note(self):
        for name, text in (("empty.yaml", ""), ("null-run.yaml", "name: x\nrun: null\n")):
            task = self.write(name, text)
            note = f"note: {task}: nothing will run"
            r = self.herd("check", task)
            self.assertEqual(r.code, 0, r)
            self.assertIn("valid task", r.stdout)
            self.assertTrue(r.stderr.startswith(note), r)
            r = self.herd("check", "-o", "json", task)
            self.assertEqual(r.code, 0, r)
            self.assertEqual(json.loads(r.stdout)["run"], "")
            self.assertTrue(r.stderr.startswith(note), r)

    def test_num_nodes_names_its_limit(self):
        task = self.write("many.yaml", "num_nodes: 1000000000\nrun: echo hi\n")
        r = self.herd("check", task)
        self.assertEqual(r.code, 2, r)
        self.assertRegex(r.stderr.strip(), "^" + re.escape(task) +
                         r":1:12: num_nodes: at most \d+ nodes, got 1000000000$")
        ok = self.write("ok.yaml", "run: echo hi\n")
        r = self.herd("exec", NO_CLUSTER, "--num-nodes", "1000000000", ok)
        self.assertEqual(r.code, 2, r)
        self.assertIn("--num-nodes", r.stderr)

    def test_a_long_name_is_refused_naming_the_limit(self):
        # A name of most of a task file: a queue listing two such jobs would not fit a frame.
        for size in (201, 200_000):
            task = self.write(f"name{size}.yaml", "run: echo hi\nname: " + "n" * size + "\n")
            r = self.herd("check", task)
            self.assertEqual(r.code, 2, r)
            self.assertEqual(r.stderr.strip(),
                             f"{task}:2:7: name: at most 200 bytes, got {size}", r)
            self.assert_cheap(r)
            self.assert_refused_everywhere(task, r.stderr.strip())
        ok = self.write("named.yaml", "name: " + "n" * 200 + "\nrun: echo hi\n")
        self.assertEqual(self.herd("check", ok).code, 0)
        # -n/--name: the same limit, naming the flag, before the cluster is looked up.
        for args in (["exec", NO_CLUSTER], ["launch", "-c", NO_CLUSTER, "--infra", NO_POOL, "-y"],
                     ["jobs", "launch", "--infra", NO_POOL, "-y", "-d"]):
            for flag in ("-n", "--name"):
                with self.subTest(args=args, flag=flag):
                    r = self.herd(*args, flag, "x" * 201, ok)
                    self.assertEqual(r.code, 2, r)
                    self.assertEqual(r.stderr.strip(), "herd: --name: at most 200 bytes, got 201")

    def test_jobs_launch_hands_more_than_128_kib_of_secrets_to_its_controller(self):
        # Three secrets of 100 KB each (an argument of herd itself may not pass 128 KiB either):
        # 300 KB in all, more than one environment variable may carry (MAX_ARG_STRLEN).
        marker = f"hsec-secret-{os.getpid()}-"
        flags = []
        for i in range(3):
            flags += ["--secret", f"HSEC_S{i}={marker}{i}" + "s" * 100_000]
        task = self.write("secrets.yaml", "name: hsec-secrets\nrun: echo hi\n")
        r = self.herd("jobs", "launch", "--infra", NO_POOL, "-y", "-d", *flags, task)
        self.assertEqual(r.code, 0, r)
        job_id = int(re.search(r"Managed job ID: (\d+)", r.stdout).group(1))
        # While the controller runs, its argv and environment do not hold them. It reads them and
        # goes on to provision (the pool does not exist): it does not fail for want of its
        # secrets, and, ended, leaves them in no file.
        deadline = time.monotonic() + 60
        looked = False
        while True:
            job = self.managed_job(job_id)
            if job["controller_pid"] and not looked:
                looked = True
                for what in ("cmdline", "environ"):
                    try:
                        with open(f"/proc/{job['controller_pid']}/{what}", "rb") as f:
                            self.assertNotIn(marker.encode(), f.read(), what)
                    except (FileNotFoundError, ProcessLookupError):
                        pass  # already ended
            if job["status"] in TERMINAL:
                break
            self.assertLess(time.monotonic(), deadline, job)
            time.sleep(0.2)
        # Three launch attempts, kManagedLaunchRetryWait (5 s) apart, each refused for want of
        # a pool: the controller had its task, secrets included, and went on with it.
        self.assertEqual(job["status"], "FAILED_NO_RESOURCE", job)
        self.assertIn("no ssh node pools file", job["message"], job)
        for root, _, files in os.walk(self.tmp):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(marker.encode(), f.read(), os.path.join(root, name))

    def managed_job(self, job_id):
        r = self.herd("jobs", "queue", "-o", "json")
        self.assertEqual(r.code, 0, r)
        return next(j for j in json.loads(r.stdout) if j["id"] == job_id)

    def test_logs_refuses_a_negative_offset(self):
        r = self.herd("logs", NO_CLUSTER, "--offset", "-5")
        self.assertEqual(r.code, 2, r)
        self.assertIn("--offset", r.stderr)
        self.assertIn("-5", r.stderr)


def varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


class OversizedQueueTest(unittest.TestCase):
    """A head whose job store holds more job records than one reply can carry (names of 256 KiB,
    as an older herd accepted): `herd queue` lists the newest that fit and says how many it left
    out, instead of failing for good. A one-node head on 127.0.42.4, from the real binaries."""

    def setUp(self):
        self.cluster = LoopbackCluster("hsec-queue", ["127.0.42.4"], gpus_per_node=0, cpus=1)

    def tearDown(self):
        self.cluster.close()

    def test_queue_lists_the_newest_jobs_that_fit_and_counts_the_others(self):
        db = os.path.join(self.cluster.dir, self.cluster.node_id(0), "state", "jobs.db")
        succeeded = 5  # herd.v1.JOB_STATE_SUCCEEDED
        with sqlite3.connect(db, timeout=10) as conn:
            for i in range(40):
                name = bytes([ord("a") + i % 26]) * (256 << 10)
                info = b"\x12" + varint(len(name)) + name + b"\x38" + varint(succeeded)
                spec = b"\x0a" + varint(len(name)) + name  # TaskSpec.name
                conn.execute("INSERT INTO jobs (state, info, spec) VALUES (?, ?, ?)",
                             (succeeded, info, spec))
        p = self.cluster.herd("queue", check=False)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        lines = p.stdout.decode().splitlines()
        self.assertEqual(lines[-1], "25 older jobs not shown: the head lists the newest 15 (as "
                         "many as fit one reply, at most 1000)")
        listed = [int(line.split()[0]) for line in lines[:-1] if line[:1].isdigit()]
        self.assertEqual(listed, list(range(40, 25, -1)))
        p = self.cluster.herd("queue", "-o", "json", check=False)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual([j["id"] for j in json.loads(p.stdout)], list(range(40, 25, -1)))
        self.assertIn(b"25 older jobs not shown", p.stderr)


def kill_processes_with_env(marker):
    """SIGKILLs, by pid, each process whose environment holds marker (what a herd command of
    this test may have left running: a managed job's controller, a mux)."""
    needle = marker.encode() + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read():
                    os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
