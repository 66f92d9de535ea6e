"""Slurm as infra (`infra: slurm/CLUSTER/PARTITION`) through the CLI against a real Slurm
(slurm_cluster.py): three namespace hosts made by herd_test_hosts, the login node (its sshd, and
slurmctld in its network namespace) and two compute nodes, each slurmd in its node's network,
mount and UTS namespaces (its own hostname and home: no shared home with the login node, so the
agent has to come by sbcast), each node with two L4 GPUs declared as GRES. ~/.slurm/config names
the login node. Covers: a 2-node launch (SKYPILOT_* variables, GPUs), exec reusing the allocation,
status following squeue, scancel from outside, a relaunch that allocates again, down leaving
nothing, and the bad input of issue 23 (a login node that does not answer, a partition the cluster
lacks, a GRES the partition lacks, an sbatch refused)."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, netns_available, pids_by_cmdline, wait_for  # noqa: E402
from slurm_cluster import SlurmOnTestHosts  # noqa: E402

HOSTS = os.environ.get("TEST_HOSTS", "herd_test_hosts")
HOSTS_NAME = "hslurm"
CLUSTER = "hsl"


def herdlets():
    """herdlets started by an allocation of the test's clusters (/tmp/herd-<cluster>-<job>)."""
    return pids_by_cmdline(lambda argv: argv[0].startswith(f"/tmp/herd-{CLUSTER}".encode()))


def slurm_available():
    return all(shutil.which(t) for t in ("slurmctld", "slurmd", "munged", "sbatch", "nsenter"))


@unittest.skipUnless(netns_available(), "needs root and ip netns")
@unittest.skipUnless(slurm_available(), "needs slurm-wlm and munge (scripts/install-deps.sh)")
class SlurmTest(HerdEnvTestCase):
    ENV_PREFIX = "slurm"

    @classmethod
    def prepare_env(cls):
        cls.hosts = None
        cls.key = os.path.join(cls.h.dir, "login_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cls.key], check=True)
        cls.hosts_state = os.path.join(cls.h.dir, "hosts")
        cls.hosts = SlurmOnTestHosts(
            HOSTS, HOSTS_NAME, cls.hosts_state, cls.key, "herd-slurmd-",
            gres={"type": "L4", "count": 2},
            partitions={"gpu": [f"{HOSTS_NAME}-worker1", f"{HOSTS_NAME}-worker2"],
                        "small": [f"{HOSTS_NAME}-worker1"]},
            cluster_name="herdtest", cpus_per_node=2)
        cls.hosts.start()
        cls.slurm, cls.ips, cls.compute = cls.hosts.slurm, cls.hosts.ips, cls.hosts.compute
        os.makedirs(os.path.join(cls.h.home, ".slurm"))
        with open(os.path.join(cls.h.home, ".slurm", "config"), "w") as f:
            f.write(f"Host testcluster\n  HostName {cls.ips[0]}\n  User root\n"
                    f"  IdentityFile {cls.key}\n"
                    # A login node that does not answer: nothing listens on that port.
                    f"Host deadcluster\n  HostName {cls.ips[0]}\n  Port 9\n  User root\n"
                    f"  IdentityFile {cls.key}\n"
                    # The same login node reached through a bastion (the second compute
                    # node's sshd stands for one): test_d refuses the direct way.
                    f"Host jumpcluster\n  HostName {cls.ips[0]}\n  User root\n"
                    f"  IdentityFile {cls.key}\n  ProxyJump gate\n"
                    f"Host gate\n  HostName {cls.ips[2]}\n  User root\n"
                    f"  IdentityFile {cls.key}\n"
                    # Through two bastions: gate2 (the first compute node's sshd), itself
                    # reached through gate; test_d2 refuses every shorter way.
                    f"Host chaincluster\n  HostName {cls.ips[0]}\n  User root\n"
                    f"  IdentityFile {cls.key}\n  ProxyJump gate2\n"
                    f"Host gate2\n  HostName {cls.ips[1]}\n  User root\n"
                    f"  IdentityFile {cls.key}\n  ProxyJump gate\n")

    @classmethod
    def close_env(cls):
        try:
            super().close_env()
        finally:
            if cls.hosts is not None:
                cls.hosts.stop()

    @classmethod
    def check_nothing_left(cls):
        assert herdlets() == [], "herdlet left running"

    def jobs(self, *states):
        """(id, name, state) of this Slurm's jobs; only those in `states` when given."""
        argv = ["squeue", "-h", "-o", "%i|%j|%T"]
        if states:
            argv += ["-t", ",".join(states)]
        out = self.slurm.run(argv).stdout
        return [tuple(line.split("|")) for line in out.split("\n") if line.strip()]

    def status(self):
        return {c["name"]: c for c in json.loads(self.h.herd("status", "-o", "json").stdout)}

    def test_a_launch_exec_status_scancel_relaunch_down(self):
        p = self.h.herd("launch", "-c", CLUSTER, "--infra", "slurm/testcluster/gpu",
                        "--num-nodes", "2", "--gpus", "L4:1", "-y", "--",
                        "echo", "rank", "$SKYPILOT_NODE_RANK", "of", "$SKYPILOT_NUM_NODES",
                        "on", "$(hostname)", "ips", "$(echo $SKYPILOT_NODE_IPS)", "gpus",
                        "$CUDA_VISIBLE_DEVICES", timeout=240)
        out = p.stdout.decode()
        ips = " ".join(sorted(self.ips[1:], key=lambda a: tuple(int(x) for x in a.split("."))))
        self.assertIn(f"rank 0 of 2 on {HOSTS_NAME}-worker1 ips {ips} gpus 0\n", out)
        self.assertIn(f"rank 1 of 2 on {HOSTS_NAME}-worker2 ips {ips} gpus 0\n", out)
        running = self.jobs("R")
        self.assertEqual(len(running), 1, running)
        job, name, _ = running[0]
        self.assertEqual(name, f"herd-{CLUSTER}")
        c = self.status()[CLUSTER]
        self.assertEqual(c["status"], "UP")
        self.assertEqual(c["infra"], "slurm/testcluster/gpu")
        self.assertEqual(c.get("allocation"), "RUNNING")

        # exec reuses the allocation: no new job.
        p = self.h.herd("exec", CLUSTER, "--num-nodes", "2", "--", "echo", "again",
                        "$SKYPILOT_NODE_RANK")
        self.assertIn(b"again 0\n", p.stdout)
        self.assertIn(b"again 1\n", p.stdout)
        self.assertEqual([j[0] for j in self.jobs()], [job])
        # logs and cancel, as on any cluster.
        p = self.h.herd("logs", CLUSTER, "2", "--no-follow")
        self.assertIn(b"again 1\n", p.stdout)
        p = self.h.herd("exec", CLUSTER, "-d", "--", "sleep", "300")
        p = self.h.herd("cancel", CLUSTER, "3", "-y")
        self.assertTrue(wait_for(  # 103: cancelled
            lambda: self.h.herd("logs", CLUSTER, "3", "--status", check=False).returncode == 103,
            timeout=30))

        # The allocation cancelled from outside: status says so.
        self.slurm.run(["scancel", job])
        self.assertTrue(wait_for(lambda: not self.jobs("R", "CG"), timeout=60))
        c = self.status()[CLUSTER]
        self.assertNotEqual(c["status"], "UP")
        self.assertEqual(c.get("allocation"), "CANCELLED")
        text = self.h.herd("status").stdout.decode()
        self.assertIn("Slurm job CANCELLED", text)
        self.assertIn("it was cancelled (scancel)", text)

        # Launching again allocates again.
        p = self.h.herd("launch", "-c", CLUSTER, "--num-nodes", "2", "-y", "--", "echo", "back",
                        "on", "$SKYPILOT_NUM_NODES", timeout=240)
        self.assertEqual(p.stdout.count(b"back on 2\n"), 2)
        running = self.jobs("R")
        self.assertEqual(len(running), 1, running)
        self.assertNotEqual(running[0][0], job)
        self.assertEqual(self.status()[CLUSTER]["status"], "UP")

        # An allocation cannot be stopped; the cluster stays UP.
        p = self.h.herd("stop", CLUSTER, "-y", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"is a Slurm allocation, which cannot be stopped", p.stderr)
        self.assertEqual(self.status()[CLUSTER]["status"], "UP")

        # down: scancel, nothing left in squeue, on the login node or on the nodes.
        self.h.herd("down", CLUSTER, "-y")
        self.assertEqual(self.jobs("PD", "R", "CG", "CF", "S"), [])
        self.assertNotIn(CLUSTER, self.status())
        login_files = os.path.join(self.hosts_state, "nodes", f"{HOSTS_NAME}-head", "home",
                                   ".herd", "slurm")
        self.assertEqual(os.listdir(login_files) if os.path.isdir(login_files) else [], [])
        self.assertTrue(wait_for(lambda: herdlets() == [], timeout=30))
        self.assertEqual([f for f in os.listdir("/tmp") if f.startswith(f"herd-{CLUSTER}-")], [])

    def bad_launch(self, name, *args):
        p = self.h.herd("launch", "-c", name, *args, "-y", "--", "true", check=False,
                        timeout=120)
        err = p.stderr.decode().strip()
        self.assertNotEqual(p.returncode, 0)
        # Nothing allocated, and the new cluster, which got no nodes, is not left listed.
        self.assertEqual(self.jobs("PD", "R", "CG", "CF"), [])
        self.assertNotIn(name, self.status())
        return p.returncode, err.splitlines()[-1] if err else ""

    def test_b_bad_input(self):
        out = self.h.herd("check").stdout.decode()
        self.assertRegex(out, rf"\nslurm/testcluster +yes +login node root@{self.ips[0]}:22 in ")
        self.assertRegex(out, r"\nslurm/deadcluster +yes +")

        code, line = self.bad_launch("hslbad1", "--infra", "slurm/deadcluster")
        self.assertEqual(code, 1)
        self.assertIn("slurm cluster deadcluster login node", line)
        self.assertIn("does not answer", line)

        code, line = self.bad_launch("hslbad2", "--infra", "slurm/testcluster/nope")
        self.assertEqual(code, 2)
        self.assertIn("Slurm cluster testcluster has no partition nope (partitions: gpu, small)",
                      line)

        code, line = self.bad_launch("hslbad3", "--infra", "slurm/testcluster/gpu", "--gpus",
                                     "H100:1")
        self.assertEqual(code, 2)
        self.assertIn("partition gpu of Slurm cluster testcluster has no GPU H100 (its GRES: "
                      "gpu:L4:2)", line)

        # sinfo cannot tell: sbatch refuses more memory per node than the nodes have ...
        code, line = self.bad_launch("hslbad4", "--infra", "slurm/testcluster/gpu", "--memory",
                                     "1000")
        self.assertEqual(code, 2)
        self.assertEqual(line, "herd: Slurm cluster testcluster refused the allocation (sbatch): "
                               "Memory specification can not be satisfied; Batch job submission "
                               "failed: Requested node configuration is not available")

        # ... and takes 2 nodes of a 1-node partition, which can never start: cancelled at once.
        code, line = self.bad_launch("hslbad5", "--infra", "slurm/testcluster/small",
                                     "--num-nodes", "2")
        self.assertEqual(code, 2)
        # slurmctld gives either reason for it, depending on when its scheduler looked first
        # (PartitionNodeLimit seen in a full run here, PartitionConfig in others).
        self.assertRegex(line, r"^herd: Slurm cluster testcluster cannot run the allocation: "
                               r"job \d+ is PENDING \((PartitionConfig|PartitionNodeLimit)\)$")

        code, line = self.bad_launch("hslbad6", "--infra", "slurm/nosuch")
        self.assertIn("no Slurm cluster nosuch", line)

    def test_c_managed_job(self):
        task = os.path.join(self.h.dir, "managed.yaml")
        with open(task, "w") as f:
            f.write("name: hslmj\nnum_nodes: 2\nresources:\n  infra: slurm/testcluster/gpu\n"
                    "run: echo managed rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES\n")
        p = self.h.herd("jobs", "launch", "-y", task, check=False, timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        job_id = re.search(rb"Managed job ID: (\d+)", p.stdout).group(1).decode()
        out = self.h.herd("jobs", "logs", job_id, check=False).stdout
        self.assertIn(b"managed rank 0 of 2\n", out)
        self.assertIn(b"managed rank 1 of 2\n", out)
        # The job's cluster went with it: no allocation left.
        self.assertTrue(wait_for(lambda: self.jobs("PD", "R", "CG", "CF") == [], timeout=60))
        self.assertEqual([c for c in self.status() if c.startswith("hslmj")], [])

    def test_d2_login_node_behind_a_chain_of_bastions(self):
        """ProxyJump through a bastion that has a ProxyJump of its own: the login node and the
        inner bastion refuse ssh from this machine, the inner bastion takes it from the outer
        one; a launch, its job's output, exec and down all go through both."""
        route = subprocess.run(["ip", "-o", "route", "get", self.ips[0]], capture_output=True,
                               text=True, check=True).stdout.split()
        here = route[route.index("src") + 1]
        rule = ["-p", "tcp", "--dport", "22", "-s", here, "-j", "REJECT"]
        shut = [["ip", "netns", "exec", f"herd-{HOSTS_NAME}-{k}", "iptables"] for k in (0, 1)]
        added = []
        try:
            for ns in shut:
                subprocess.run(ns + ["-I", "INPUT"] + rule, check=True)
                added.append(ns)
            for ip in self.ips[:2]:
                direct = subprocess.run(
                    ["ssh", "-F", "/dev/null", "-i", self.key, "-o", "BatchMode=yes", "-o",
                     "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
                     "ConnectTimeout=5", f"root@{ip}", "true"],
                    capture_output=True, timeout=30)
                self.assertEqual(direct.returncode, 255, direct.stderr)  # that way is shut
            checked = self.h.herd("check").stdout.decode()
            self.assertIn("slurm/chaincluster", checked)
            self.assertNotIn("slurm/gate2", checked)  # bastions are not clusters
            p = self.h.herd("launch", "-c", "hslc", "--infra", "slurm/chaincluster/gpu", "-y",
                            "--", "echo", "through", "two", "gates", "$SKYPILOT_NODE_RANK",
                            timeout=240)
            self.assertIn(b"through two gates 0\n", p.stdout)
            self.assertEqual(self.status()["hslc"]["status"], "UP")
            p = self.h.herd("exec", "hslc", "--", "echo", "again", timeout=120)
            self.assertIn(b"again\n", p.stdout)
            self.h.herd("down", "hslc", "-y")
            self.assertEqual(self.jobs("PD", "R", "CG", "CF", "S"), [])
            self.assertNotIn("hslc", self.status())
        finally:
            for ns in added:
                subprocess.run(ns + ["-D", "INPUT"] + rule, check=False)
            self.h.herd("down", "hslc", "-y", check=False)

    def test_d_login_node_behind_a_bastion(self):
        """ProxyJump: the login node refuses ssh from this machine and takes it from the
        bastion; a launch, its job's output and down all go through the bastion."""
        route = subprocess.run(["ip", "-o", "route", "get", self.ips[0]], capture_output=True,
                               text=True, check=True).stdout.split()
        here = route[route.index("src") + 1]
        rule = ["-p", "tcp", "--dport", "22", "-s", here, "-j", "REJECT"]
        login_ns = ["ip", "netns", "exec", f"herd-{HOSTS_NAME}-0", "iptables"]
        subprocess.run(login_ns + ["-I", "INPUT"] + rule, check=True)
        try:
            direct = subprocess.run(
                ["ssh", "-F", "/dev/null", "-i", self.key, "-o", "BatchMode=yes", "-o",
                 "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
                 "ConnectTimeout=5", f"root@{self.ips[0]}", "true"],
                capture_output=True, timeout=30)
            self.assertEqual(direct.returncode, 255, direct.stderr)  # refused: the way is shut
            # The bastion is not a cluster of its own.
            self.assertNotIn("slurm/gate", self.h.herd("check").stdout.decode())
            p = self.h.herd("launch", "-c", "hslj", "--infra", "slurm/jumpcluster/gpu", "-y",
                            "--", "echo", "through", "the", "gate", "$SKYPILOT_NODE_RANK",
                            timeout=240)
            self.assertIn(b"through the gate 0\n", p.stdout)
            self.assertEqual(self.status()["hslj"]["status"], "UP")
            self.assertEqual(len(self.jobs("R")), 1)
            self.h.herd("down", "hslj", "-y")
            self.assertEqual(self.jobs("PD", "R", "CG", "CF", "S"), [])
            self.assertNotIn("hslj", self.status())
        finally:
            subprocess.run(login_ns + ["-D", "INPUT"] + rule, check=False)
            self.h.herd("down", "hslj", "-y", check=False)

    def test_f_a_launch_with_another_agent_binary_keeps_the_allocation_and_its_job(self):
        """herd upgraded between two launches (another herdlet binary) while the allocation
        runs: the second launch sends the agent as a new generation of files (the running
        binary is never written over), stops the earlier agents (their job keeps running and
        the new agents adopt it) and runs its task; the allocation is the same Slurm job."""
        name = "hslf"

        def agents():
            """pid -> argv[0] of the herdlets of this cluster's allocation."""
            found = {}
            for pid in pids_by_cmdline(
                    lambda argv: argv[0].startswith(f"/tmp/herd-{name}-".encode())
                    and argv[0].endswith(b".herdlet")):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        found[pid] = f.read().split(b"\0")[0].decode()
                except OSError:
                    continue
            return found

        try:
            self.h.herd("launch", "-c", name, "--infra", "slurm/testcluster/gpu",
                        "--num-nodes", "2", "-y", "--", "echo", "first",
                        "$SKYPILOT_NODE_RANK", timeout=240)
            (job,) = [j for j, n, _ in self.jobs("R") if n == f"herd-{name}"]
            first = agents()
            self.assertEqual(len(first), 2, first)
            self.assertTrue(all(a.endswith(f"/herd-{name}-{job}.g1.herdlet")
                                for a in first.values()), first)
            # A job that runs while the agents are replaced.
            self.h.herd("exec", name, "--num-nodes", "2", "-d", "--",
                        "sleep 8; echo survived $SKYPILOT_NODE_RANK")
            upgraded = os.path.join(self.h.dir, "herdlet-upgraded")
            # herd sends herdlet.upload (no debug info) when the build made it: a copy of it.
            built = os.environ["HERDLET"]
            shutil.copy2(built + ".upload" if os.path.exists(built + ".upload") else built,
                         upgraded)
            self.h.env["HERDLET_BINARY"] = upgraded
            try:
                p = self.h.herd("launch", "-c", name, "--num-nodes", "2", "-y", "--", "echo",
                                "second", "$SKYPILOT_NODE_RANK", timeout=240)
            finally:
                del self.h.env["HERDLET_BINARY"]
            out = p.stdout.decode()
            self.assertIn("second 0\n", out)
            self.assertIn("second 1\n", out)
            self.assertEqual([j for j, n, _ in self.jobs("R") if n == f"herd-{name}"], [job])
            second = agents()
            self.assertEqual(len(second), 2, second)
            self.assertFalse(set(second) & set(first), (first, second))
            self.assertTrue(all(a.endswith(f"/herd-{name}-{job}.g2.herdlet")
                                for a in second.values()), second)
            self.assertEqual([f for f in os.listdir("/tmp")
                              if f.startswith(f"herd-{name}-{job}.g1.")], [])
            # The job the first agents started ends under the new ones, its output whole.
            self.assertTrue(wait_for(lambda: self.h.herd(
                "logs", name, "2", "--status", check=False).returncode == 0, timeout=60))
            logs = self.h.herd("logs", name, "2", "--no-follow").stdout.decode()
            self.assertIn("survived 0\n", logs)
            self.assertIn("survived 1\n", logs)
            queue = json.loads(self.h.herd("queue", name, "-o", "json").stdout)
            self.assertEqual(sorted((j["id"], j["status"]) for j in queue),
                             [(1, "SUCCEEDED"), (2, "SUCCEEDED"), (3, "SUCCEEDED")])
        finally:
            self.h.herd("down", name, "-y", check=False)
        self.assertTrue(wait_for(lambda: not agents(), timeout=30))
        self.assertEqual([f for f in os.listdir("/tmp") if f.startswith(f"herd-{name}-")], [])

    def test_e_workdir_and_file_mounts_reach_nodes_without_a_shared_home(self):
        """The nodes have homes of their own: the workdir and file_mounts synced to the login
        node go on to each of them (sbcast and an srun step), for launch and exec."""
        work = os.path.join(self.h.dir, "spread-work")
        data = os.path.join(self.h.dir, "spread-data")
        os.makedirs(work)
        os.makedirs(data)
        with open(os.path.join(work, "hello.txt"), "w") as f:
            f.write("workdir v1")
        with open(os.path.join(data, "x.txt"), "w") as f:
            f.write("mounted data")
        task = os.path.join(self.h.dir, "spread.yaml")
        with open(task, "w") as f:
            f.write(f"num_nodes: 2\nresources:\n  infra: slurm/testcluster/gpu\n"
                    f"workdir: {work}\nfile_mounts:\n  ~/spread-data: {data}\n"
                    "run: |\n  echo \"rank $SKYPILOT_NODE_RANK on $(hostname): $(cat hello.txt)"
                    " / $(cat ~/spread-data/x.txt)\"\n")
        try:
            p = self.h.herd("launch", "-c", "hsle", "-y", task, timeout=240)
            out = p.stdout.decode()
            for rank in (0, 1):
                self.assertIn(f"rank {rank} on {HOSTS_NAME}-worker{rank + 1}: workdir v1 / "
                              "mounted data\n", out)
            # Each node really has its own copy (no shared home), and no probe or tar is left.
            for n in (1, 2):
                home = os.path.join(self.hosts_state, "nodes", f"{HOSTS_NAME}-worker{n}", "home")
                with open(os.path.join(home, "sky_workdir", "hello.txt")) as f:
                    self.assertEqual(f.read(), "workdir v1")
                self.assertEqual([f for f in os.listdir(home) if f.startswith(".herd-home")], [])
            with open(os.path.join(work, "hello.txt"), "w") as f:
                f.write("workdir v2")
            p = self.h.herd("exec", "hsle", task, timeout=120)
            self.assertEqual(p.stdout.decode().count(": workdir v2 / mounted data\n"), 2)
        finally:
            self.h.herd("down", "hsle", "-y", check=False)
        self.assertEqual([f for f in os.listdir("/tmp") if f.startswith("herd-hsle-")], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
