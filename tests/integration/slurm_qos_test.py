"""Slurm as infra against a QOS limit, through the CLI: a real Slurm with accounting
(slurm_cluster.py's accounting mode: a private MariaDB and slurmdbd, AccountingStorageEnforce
associations,limits,qos) on three namespace hosts made by herd_test_hosts, the login node (its
sshd, and slurmctld in its network namespace) and two compute nodes. User root's QOS allow one node
per job (MaxTRESPerJob=node=1); which one is the default picks the behaviour:
  a. with Flags=DenyOnLimit, sbatch refuses a 2-node launch: one line naming the cluster and
     sbatch's reason, exit 2, no job and no herdlet; the new cluster is not left listed;
  b. without it, Slurm takes the job and keeps it PENDING (QOSMaxNodePerJobLimit): herd cancels it
     at once (sacct: CANCELLED) and says why, exit 2, nothing left as in a;
  c. a 1-node launch under the QOS runs with it (the QOS does not refuse everything) and `down`
     leaves nothing.
Each test first makes its QOS root's default and waits until slurmctld gives it to a held probe
job."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import HerdEnvTestCase, netns_available, pids_by_cmdline, wait_for  # noqa: E402
from slurm_cluster import SlurmOnTestHosts  # noqa: E402

HOSTS = os.environ.get("TEST_HOSTS", "herd_test_hosts")
HOSTS_NAME = "hqos"
CLUSTER = "hq"  # every herd cluster of this test is named hq*
SLURM_CLUSTER = "qoscluster"  # its name in ~/.slurm/config
ACTIVE = ("PD", "R", "CG", "CF", "S")


def herdlets():
    """herdlets started by an allocation of the test's clusters (/tmp/herd-<cluster>-<job>)."""
    return pids_by_cmdline(lambda argv: argv[0].startswith(f"/tmp/herd-{CLUSTER}".encode()))


def accounting_available():
    return all(shutil.which(t) for t in ("slurmctld", "slurmd", "munged", "sbatch", "nsenter",
                                         "slurmdbd", "sacctmgr", "mariadbd",
                                         "mariadb-install-db"))


@unittest.skipUnless(netns_available(), "needs root and ip netns")
@unittest.skipUnless(accounting_available(),
                     "needs slurm-wlm, munge, slurmdbd and mariadb-server (scripts/install-deps.sh)")
class SlurmQosTest(HerdEnvTestCase):
    ENV_PREFIX = "slurmqos"

    @classmethod
    def prepare_env(cls):
        cls.hosts = None
        cls.slurm_root = None
        cls.key = os.path.join(cls.h.dir, "login_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cls.key], check=True)
        cls.hosts_state = os.path.join(cls.h.dir, "hosts")
        cls.hosts = SlurmOnTestHosts(
            HOSTS, HOSTS_NAME, cls.hosts_state, cls.key, "herd-slurmqos-",
            partitions={"batch": [f"{HOSTS_NAME}-worker1", f"{HOSTS_NAME}-worker2"]},
            cluster_name="herdqos", cpus_per_node=2, accounting=True)
        try:
            cls.hosts.start()
        finally:
            cls.slurm_root = cls.hosts.root  # check_nothing_left looks for its daemons
        cls.slurm, cls.ips = cls.hosts.slurm, cls.hosts.ips
        # Both QOS allow one node per job; only hqdeny has sbatch refuse a job over the limit.
        cls.slurm.sacctmgr("add", "qos", "hqdeny", "MaxTRESPerJob=node=1", "Flags=DenyOnLimit")
        cls.slurm.sacctmgr("add", "qos", "hqwait", "MaxTRESPerJob=node=1")
        cls.slurm.sacctmgr("modify", "user", "root", "set", "QOS=hqdeny,hqwait")
        os.makedirs(os.path.join(cls.h.home, ".slurm"))
        with open(os.path.join(cls.h.home, ".slurm", "config"), "w") as f:
            f.write(f"Host {SLURM_CLUSTER}\n  HostName {cls.ips[0]}\n  User root\n"
                    f"  IdentityFile {cls.key}\n")

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
        # No daemon of this Slurm (mariadbd, slurmctld, slurmd and munged name its directory;
        # slurm.stop() waited for slurmdbd's end).
        if cls.slurm_root:
            mark = cls.slurm_root.encode()
            left = pids_by_cmdline(lambda argv: any(mark in a for a in argv))
            assert left == [], f"processes of {cls.slurm_root} left: {left}"

    def setUp(self):
        self.t0 = time.time()

    def tearDown(self):
        print(f"\n  {self.id().rsplit('.', 1)[-1]}: {time.time() - self.t0:.1f} s",
              file=sys.stderr)

    def use_default_qos(self, qos):
        """Makes qos user root's default and waits until slurmctld gives it to a new job (slurmdbd
        pushes the change to slurmctld, and scontrol does not show a default QOS): a held 1-node
        probe job, cancelled at once."""
        self.slurm.sacctmgr("modify", "user", "root", "set", f"DefaultQOS={qos}")
        got = []

        def taken():
            p = self.slurm.run(["sbatch", "--parsable", "--hold", "-N1", "-p", "batch",
                                "-J", "hqprobe", "--wrap", "true"])
            job = p.stdout.strip().split(";")[0]
            self.assertTrue(job.isdigit(), p.stderr)
            got[:] = [self.slurm.run(["squeue", "-h", "-j", job, "-o", "%q"]).stdout.strip()]
            self.slurm.run(["scancel", job])
            return got[0] == qos

        self.assertTrue(wait_for(taken, timeout=30), f"slurmctld gives QOS {got}, not {qos}")

    def jobs(self, *states):
        """(id, name, state, qos) of this Slurm's jobs; only those in `states` when given."""
        argv = ["squeue", "-h", "-o", "%i|%j|%T|%q"]
        if states:
            argv += ["-t", ",".join(states)]
        out = self.slurm.run(argv).stdout
        return [tuple(line.split("|")) for line in out.split("\n") if line.strip()]

    def status(self):
        return {c["name"]: c for c in json.loads(self.h.herd("status", "-o", "json").stdout)}

    def assert_down_leaves_nothing(self, name):
        """`herd down` of cluster `name`, then: not in herd status, no job of this Slurm waiting
        or running, no herdlet, no files on the login node."""
        self.h.herd("down", name, "-y")
        self.assertNotIn(name, self.status())
        self.assertEqual(self.jobs(*ACTIVE), [])
        self.assertTrue(wait_for(lambda: herdlets() == [], timeout=30), herdlets())
        login_files = os.path.join(self.hosts_state, "nodes", f"{HOSTS_NAME}-head", "home",
                                   ".herd", "slurm")
        self.assertEqual(os.listdir(login_files) if os.path.isdir(login_files) else [], [])

    def assert_refusal_left_nothing(self, name):
        """Right after a launch of `name` failed: nothing allocated, no herdlet, and the new
        cluster, which got no nodes, is not listed (as SkyPilot drops it); nothing on the login
        node either."""
        self.assertEqual(self.jobs(*ACTIVE), [])
        self.assertEqual(herdlets(), [])
        self.assertNotIn(name, self.status())
        login_files = os.path.join(self.hosts_state, "nodes", f"{HOSTS_NAME}-head", "home",
                                   ".herd", "slurm")
        self.assertEqual(os.listdir(login_files) if os.path.isdir(login_files) else [], [])

    def refused_launch(self, name):
        """A 2-node launch of cluster `name`: (exit code, the last line of stderr)."""
        p = self.h.herd("launch", "-c", name, "--infra", f"slurm/{SLURM_CLUSTER}/batch",
                        "--num-nodes", "2", "-y", "--", "true", check=False, timeout=120)
        err = p.stderr.decode().strip()
        return p.returncode, err.splitlines()[-1] if err else ""

    def test_a_deny_on_limit_refused_by_sbatch(self):
        self.use_default_qos("hqdeny")
        try:
            code, line = self.refused_launch("hqa")
            self.assertEqual(line, f"herd: Slurm cluster {SLURM_CLUSTER} refused the allocation "
                                   "(sbatch): QOSMaxNodePerJobLimit; Batch job submission failed: "
                                   "Job violates accounting/QOS policy (job submit limit, user's "
                                   "size and/or time limits)")
            self.assertEqual(code, 2)
            self.assert_refusal_left_nothing("hqa")
        finally:
            self.h.herd("down", "hqa", "-y", check=False)

    def test_b_limit_without_deny_cancelled_while_pending(self):
        self.use_default_qos("hqwait")
        try:
            code, line = self.refused_launch("hqb")
            m = re.fullmatch(rf"herd: Slurm cluster {SLURM_CLUSTER} cannot run the allocation: "
                             r"job (\d+) is PENDING \(QOSMaxNodePerJobLimit\)", line)
            self.assertIsNotNone(m, line)
            self.assertEqual(code, 2)
            self.assert_refusal_left_nothing("hqb")
            # The job was there and herd cancelled it (accounting keeps it).
            sacct = self.slurm.run(["sacct", "-n", "-X", "-P", "-j", m.group(1), "-o",
                                    "State"]).stdout.strip()
            self.assertEqual(sacct, "CANCELLED by 0")
        finally:
            self.h.herd("down", "hqb", "-y", check=False)

    def test_c_one_node_runs_under_the_qos(self):
        self.use_default_qos("hqdeny")
        try:
            p = self.h.herd("launch", "-c", "hqc", "--infra", f"slurm/{SLURM_CLUSTER}/batch",
                            "-y", "--", "echo", "one", "node", "of", "$SKYPILOT_NUM_NODES",
                            timeout=240)
            self.assertIn(b"one node of 1\n", p.stdout)
            running = self.jobs("R")
            self.assertEqual([(j[1], j[3]) for j in running], [("herd-hqc", "hqdeny")])
            self.assertEqual(self.status()["hqc"]["status"], "UP")
            self.assert_down_leaves_nothing("hqc")  # `down` scancels the allocation
        finally:
            self.h.herd("down", "hqc", "-y", check=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
