"""The `ssh` provider through the CLI: existing machines (namespace hosts with sshd and nothing
else, made by herd_test_hosts) registered in ssh_node_pools.yaml, launched on by pool name, and
released by `down`; plus a pool whose key the hosts refuse."""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (AGENT_CGROUP_SCOPE_FILE, HerdEnvTestCase, netns_available,  # noqa: E402
                      remove_cgroups)

HOSTS = os.environ.get("TEST_HOSTS", "herd_test_hosts")


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class PoolTest(HerdEnvTestCase):
    ENV_PREFIX = "pool"

    @classmethod
    def prepare_env(cls):
        cls.hosts_state = os.path.join(cls.h.dir, "hosts")
        cls.key = os.path.join(cls.h.dir, "pool_key")
        cls.other_key = os.path.join(cls.h.dir, "other_key")
        for k in (cls.key, cls.other_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k], check=True)
        p = subprocess.run([HOSTS, "up", "poolhosts", "2", cls.hosts_state, cls.key + ".pub"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.ips = p.stdout.split()
        os.makedirs(cls.h.env["HERD_HOME"], exist_ok=True)
        with open(os.path.join(cls.h.env["HERD_HOME"], "ssh_node_pools.yaml"), "w") as f:
            f.write(f"mypool:\n  user: root\n  identity_file: {cls.key}\n  hosts:\n"
                    f"    - {cls.ips[0]}\n"
                    f"    - ip: {cls.ips[1]}\n      identity_file: {cls.key}\n      port: 22\n"
                    f"wrongkey:\n  user: root\n  identity_file: {cls.other_key}\n"
                    f"  hosts:\n    - {cls.ips[0]}\n")

    @classmethod
    def close_env(cls):
        try:
            super().close_env()
        finally:
            subprocess.run([HOSTS, "down", "poolhosts", cls.hosts_state])

    def host_ssh(self, ip, command):
        return subprocess.run(["ssh", "-F", "/dev/null", "-i", self.key, "-o", "BatchMode=yes",
                               "-o", "StrictHostKeyChecking=no", "-o",
                               "UserKnownHostsFile=/dev/null", f"root@{ip}", command],
                              capture_output=True, text=True, timeout=30)

    def pool_held_by(self):
        infra = json.loads(self.h.herd("infra", "-o", "json").stdout)
        pool = [i for i in infra if i["infra"] == "ssh/mypool"]
        self.assertEqual(len(pool), 1, infra)
        self.assertEqual(pool[0]["hosts"], self.ips)
        return pool[0]["held_by"]

    def test_launch_exec_down_on_a_pool(self):
        p = self.h.herd("launch", "-c", "onpool", "--infra", "ssh/mypool", "--num-nodes", "2",
                        "-y", "--", "echo", "on", "$(hostname)", "rank", "$SKYPILOT_NODE_RANK")
        out = p.stdout.decode()
        self.assertIn("(head, rank=0, pid=", out)
        self.assertIn("on poolhosts-head rank 0\n", out)
        self.assertIn("on poolhosts-worker1 rank 1\n", out)
        c = self.h.clusters()["onpool"]
        self.assertEqual(c["infra"], "ssh/mypool")
        self.assertEqual([n["ip"] for n in c["nodes"]], self.ips)
        # `herd infra` (the dashboard's infra page) names the cluster that holds each host.
        self.assertEqual(self.pool_held_by(), {ip: "onpool" for ip in self.ips})
        p = self.h.herd("exec", "onpool", "--num-nodes", "2", "--", "echo", "again")
        self.assertEqual(p.stdout.count(b"again\n"), 2)
        scopes = [self.host_ssh(ip, "cat " + AGENT_CGROUP_SCOPE_FILE).stdout.strip()
                  for ip in self.ips]
        scopes = [d for d in scopes if d]  # where cgroups are used
        self.addCleanup(remove_cgroups, scopes)  # a failing run leaves none on the machine
        for d in scopes:  # a job's cgroup the agent did not get to remove: its own cleanup stops
            os.mkdir(os.path.join(d, "job-left-a1"))
        self.h.herd("down", "onpool", "-y")
        self.assertEqual(self.pool_held_by(), {})
        # The cgroups its agents made for jobs went with them.
        self.assertEqual([d for d in scopes if os.path.exists(d)], [])
        # The machines are not ours: they stay, without herd's agent or files.
        for ip in self.ips:
            # Hosts share the machine's PID namespace: count only herdlets in this host's mount
            # namespace (other clusters' agents may run beside the test).
            r = self.host_ssh(ip, "test -e .herd/agent && echo left || echo clean; "
                                  "me=$(readlink /proc/self/ns/mnt); n=0; "
                                  "for p in $(pgrep -x herdlet); do "
                                  "[ \"$(readlink /proc/$p/ns/mnt)\" = \"$me\" ] && n=$((n+1)); "
                                  "done; [ $n -gt 0 ] && echo running || echo stopped")
            self.assertEqual(r.stdout.split(), ["clean", "stopped"], r.stderr)

    def test_a_refused_key_names_the_host(self):
        p = self.h.herd("launch", "-c", "badkey", "--infra", "ssh/wrongkey", "-y", "--", "true",
                        check=False, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(self.ips[0].encode(), p.stderr)
        self.assertIn(b"authentication", p.stderr)
        self.h.herd("down", "badkey", "-y", check=False)

    def test_missing_pool_lists_the_pools(self):
        p = self.h.herd("launch", "-c", "nopool", "--infra", "ssh/nosuch", "-y", "--", "true",
                        check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"mypool", p.stderr)
        self.h.herd("down", "nopool", "-y", check=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
