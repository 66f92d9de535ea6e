"""The optimizer as a user meets it (issue 23 items 1-2): `herd launch --dryrun` prints SkyPilot's
"Considered resources" table with the chosen row marked and stops, touching no network and making
nothing; a launch without -y asks on a terminal and "n" makes nothing; `herd gpus list` /
`herd show-gpus` list the built-in AWS catalog; a user catalog with a bad price is one line naming
file:line; `herd check` with no task says which infra are usable, and with a task warns when only
unusable infra could run it. Needs no root: nothing is launched. AWS calls, if any were made, would
go to a loopback listener (127.0.23.1) that counts connections; it must count none."""

import os
import pty
import re
import socket
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HERD, HerdEnv  # noqa: E402

BIND = "127.0.23.1"
CREDS = {"AWS_ACCESS_KEY_ID": "AKIDHERDOPTIMIZER001", "AWS_SECRET_ACCESS_KEY": "opt/secret"}


class Listener:
    """Counts TCP connections (a would-be EC2 endpoint)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((BIND, 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.connections += 1
                c.close()
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


class OptimizerCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.h = HerdEnv("opt")
        cls.listener = Listener()
        for k in list(cls.h.env):
            if k.startswith("AWS_"):
                del cls.h.env[k]
        cls.h.env["HERD_AWS_ENDPOINT"] = f"http://{BIND}:{cls.listener.port}"
        cls.aws = dict(CREDS, AWS_REGION="us-west-2")

    @classmethod
    def tearDownClass(cls):
        cls.listener.close()
        cls.h.close()

    def herd(self, *args, env=None, check=True):
        saved = dict(self.h.env)
        self.h.env.update(env or {})
        try:
            return self.h.herd(*args, check=check, timeout=60)
        finally:
            self.h.env = saved

    def task(self, name, text):
        path = os.path.join(self.h.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def rows(self, out):
        """The table's rows as lists of cells (split on runs of 2+ spaces)."""
        lines = out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("INFRA"))
        return [re.split(r"\s{2,}", line.strip()) for line in lines[start:] if line.strip()]

    def test_dryrun_any_of_chooses_the_cheapest_and_makes_nothing(self):
        t = self.task("any.yaml", "num_nodes: 2\nresources:\n  accelerators: {H100:8, A100:8}\n"
                                  "run: nvidia-smi\n")
        p = self.herd("launch", "-c", "optdry", "--dryrun", t, env=self.aws)
        out = p.stdout.decode()
        self.assertIn("Considered resources (2 nodes):\n", out)
        rows = self.rows(out)
        self.assertEqual(rows[0], ["INFRA", "INSTANCE", "vCPUs", "Mem(GB)", "GPUS", "COST ($/hr)",
                                   "CHOSEN"])
        # A100 is cheaper; equal prices in three US regions: the configured one (us-west-2).
        self.assertEqual(rows[1], ["aws/us-west-2", "p4d.24xlarge", "96", "1152", "A100:8",
                                   "43.92", "\u2714"])
        self.assertEqual(rows[2], ["aws/us-west-2", "p5.48xlarge", "192", "2048", "H100:8",
                                   "110.08"])
        self.assertEqual(len(rows), 3)
        self.assertEqual(self.listener.connections, 0)
        self.assertEqual(self.h.clusters(), {})

    def test_dryrun_a_pipeline_plans_the_cluster_of_its_first_task(self):
        # A pipeline's tasks run on one cluster, planned (and failed over) like a single task's
        # launch: from its first task.
        t = self.task("pipe.yaml", "name: optpipe\n---\nname: train\nnum_nodes: 2\n"
                                   "resources:\n  accelerators: {H100:8, A100:8}\n"
                                   "run: nvidia-smi\n---\nname: eval\nrun: echo done\n")
        p = self.herd("launch", "-c", "optpipe", "--dryrun", t, env=self.aws)
        out = p.stdout.decode()
        self.assertIn("Pipeline optpipe: task 1 of 2 (train) on cluster optpipe",
                      p.stderr.decode())
        self.assertIn("Considered resources (2 nodes):\n", out)
        rows = self.rows(out)
        self.assertEqual(rows[1], ["aws/us-west-2", "p4d.24xlarge", "96", "1152", "A100:8",
                                   "43.92", "\u2714"])
        self.assertNotIn("task 2 of 2", p.stderr.decode())
        self.assertEqual(self.listener.connections, 0)
        self.assertEqual(self.h.clusters(), {})

    def test_pipeline_later_tasks_are_checked_against_the_cluster_before_it_is_made(self):
        # The eval task needs H100s: the plan keeps only clusters it can run on, so the first
        # task's cheaper A100 choice gives way to H100 (p5).
        t = self.task("pipe2.yaml", "name: optpipe2\n---\nname: train\nnum_nodes: 2\n"
                                    "resources:\n  accelerators: {H100:8, A100:8}\n"
                                    "run: nvidia-smi\n---\nname: eval\n"
                                    "resources:\n  accelerators: H100:4\nrun: echo done\n")
        p = self.herd("launch", "-c", "optpipe2", "--dryrun", t, env=self.aws)
        rows = self.rows(p.stdout.decode())
        self.assertEqual(rows[1][1:], ["p5.48xlarge", "192", "2048", "H100:8", "110.08", "\u2714"])
        self.assertNotIn("A100:8", p.stdout.decode())
        # A later task that no cluster of the first task fits: one line naming it, exit 2,
        # nothing made (not a dry run: it would launch).
        t = self.task("pipe3.yaml", "name: optpipe3\n---\nname: train\n"
                                    "resources:\n  accelerators: A100:8\nrun: nvidia-smi\n---\n"
                                    "name: big\nnum_nodes: 4\nrun: echo done\n")
        p = self.herd("launch", "-y", "-c", "optpipe3", t, env=self.aws, check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 2, err)
        self.assertIn("herd: the pipeline runs every task on the cluster its first task gets, and "
                      "task 2 (big) can run on no cluster the first task could get: it asks for 4 "
                      "nodes and the cluster has 1\n", err)
        self.assertEqual(self.listener.connections, 0)
        self.assertEqual(self.h.clusters(), {})

    def test_dryrun_ordered_keeps_the_users_order_and_flags(self):
        t = self.task("ordered.yaml", "resources:\n  accelerators: [H100:8, A100:8]\n")
        p = self.herd("launch", "--dryrun", "-c", "optord", t, env=self.aws)
        self.assertEqual(self.rows(p.stdout.decode())[1][1:], ["p5.48xlarge", "192", "2048",
                                                               "H100:8", "55.04", "\u2714"])
        # --infra and --cpus from the command line: a region and a CPU type.
        p = self.herd("launch", "--dryrun", "-c", "optcpu", "--infra", "aws/eu-west-1",
                      "--cpus", "16+", "--", "true", env=self.aws)
        rows = self.rows(p.stdout.decode())
        self.assertEqual(rows[1][:2], ["aws/eu-west-1", "c6i.4xlarge"])
        self.assertEqual(rows[1][-1], "\u2714")
        self.assertEqual(self.listener.connections, 0)

    def test_gpu_task_without_credentials_is_refused_with_the_reason(self):
        t = self.task("gpu.yaml", "resources:\n  accelerators: A100:8\n")
        p = self.herd("launch", "--dryrun", "-c", "optnc", t, check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertTrue(
            err.startswith("herd: the task can only run on aws, not usable here: aws: "), err)
        self.assertEqual(err.count("\n"), 1)
        # `herd check` says the same as a warning; the task itself is valid.
        p = self.herd("check", t)
        self.assertIn("warning: the task can only run on aws, not usable here", p.stderr.decode())

    def test_unknown_accelerator_is_one_line_exit_2(self):
        t = self.task("bad.yaml", "resources:\n  accelerators: A1000:8\n")
        p = self.herd("launch", "--dryrun", "-c", "optbad", t, env=self.aws, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.decode(),
                         "herd: no infra can run the task: unknown accelerator 'A1000': the AWS "
                         "catalog (<built-in aws.csv>) has A100, A100-80GB, A10G, B200, H100, "
                         "H200, Inferentia2, L4, L40S, T4, Trainium\n")

    def test_launch_asks_on_a_terminal_and_no_makes_nothing(self):
        master, slave = pty.openpty()
        env = dict(self.h.env, **self.aws)
        p = subprocess.Popen([HERD, "launch", "-c", "optask", "--infra", "aws/us-east-1", "--",
                              "true"], stdin=slave, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        os.close(slave)
        try:
            os.write(master, b"n\n")
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn(b"Considered resources (1 node):", out)
        self.assertIn(b"Launching a new cluster 'optask'. Proceed? [Y/n]: Aborted.\n", err)
        self.assertEqual(self.listener.connections, 0)
        self.assertEqual(self.h.clusters(), {})

    def test_gpus_list_and_show_gpus(self):
        out = self.herd("gpus", "list").stdout.decode()
        self.assertIn("COMMON GPU OFFERINGS (<built-in aws.csv>)", out)
        self.assertRegex(out, r"\nA100 +8 +aws\n")
        self.assertRegex(out, r"\nL4 +1, 4, 8 +aws\n")
        out = self.herd("show-gpus", "H100:8").stdout.decode()
        self.assertRegex(out, r"^GPU +QTY +INFRA +INSTANCE_TYPE +vCPUs +HOST_MEM +HOURLY_PRICE +"
                              r"HOURLY_SPOT_PRICE +REGION\n")
        self.assertIn("H100  8    aws    p5.48xlarge    192    2048GB    $ 55.04", out)
        self.assertEqual(len(out.splitlines()), 2)  # the header, one row: the cheapest region
        out = self.herd("gpus", "list", "a100", "--infra", "aws/eu-central-1").stdout.decode()
        self.assertRegex(out, r"A100 +8 +aws +p4d.24xlarge .* eu-central-1\n")
        p = self.herd("gpus", "list", "NOPE", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertTrue(p.stderr.decode().startswith("herd: unknown accelerator 'NOPE': "))

    def test_user_catalog_with_a_bad_price_names_file_and_line(self):
        cat = os.path.join(self.h.env["HERD_HOME"], "catalogs")
        os.makedirs(cat, exist_ok=True)
        path = os.path.join(cat, "aws.csv")
        with open(path, "w") as f:
            f.write("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,"
                    "SpotPrice,Region,AvailabilityZone\n"
                    "p4d.24xlarge,A100,8,96,1152,21.96,,us-east-1,\n"
                    "p5.48xlarge,H100,8,192,2048,abc,,us-east-1,\n")
        try:
            for args in (("gpus", "list"), ("launch", "--dryrun", "-c", "optcat", "--", "true")):
                p = self.herd(*args, env=self.aws, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stderr.decode(), f"herd: {path}:3: Price: 'abc' is not a price "
                                                    "in USD per hour\n")
        finally:
            os.remove(path)

    def test_check_without_a_task_lists_infra(self):
        out = self.herd("check", env=self.aws).stdout.decode()
        self.assertRegex(out, r"INFRA +USABLE +WHY\n")
        self.assertRegex(out, r"\nlocal +(yes|no) +")
        self.assertRegex(out, r"\naws +yes +credentials from environment\n")
        self.assertIn("no SSH node pools:", out)
        out = self.herd("check").stdout.decode()
        self.assertRegex(out, r"\naws +no +")
        # A pool in the pools file is listed by name.
        os.makedirs(self.h.env["HERD_HOME"], exist_ok=True)
        with open(os.path.join(self.h.env["HERD_HOME"], "ssh_node_pools.yaml"), "w") as f:
            f.write("lab:\n  user: ubuntu\n  hosts:\n    - 127.0.23.9\n")
        out = self.herd("check").stdout.decode()
        self.assertRegex(out, r"\nssh/lab +yes +1 host\(s\) in ")


if __name__ == "__main__":
    unittest.main()
