"""Runs the setup and run scripts of the CPU task YAMLs the way herd runs them on each node.

For each YAML: copy the example into <temp HOME>/sky_workdir, run `setup` then `run` with
`bash -c` there, with the YAML's envs, herd's --env overrides and the SKYPILOT_* variables a
node gets. The two "nodes" of the multi-node YAMLs share one private network namespace (made and
removed here), so that the fixed ports 8008 and 29500 of the YAMLs collide with nothing.
Started by ctest (mingpt_yaml_scripts) with /usr/bin/python3; exits 77 (skipped) without torch.
"""

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

EXAMPLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Outer bound of one node's script; a failed multi-node torchrun can sit ~300 s in its barrier.
SCRIPT_TIMEOUT_S = 150
# `--env` overrides, as a test would pass them to herd: one short epoch.
OVERRIDES = {"MAX_EPOCHS": "1", "MAX_ITERS": "5"}
START_RE = re.compile(r"^world_size=(\d+) rank=(\d+) local_rank=(\d+) backend=gloo ", re.M)
LOSS_RE = re.compile(r"^\[CPU(\d+)\] Epoch 0 \| Iter 4 \| Train Loss [0-9.]+$", re.M)


def load_task(name):
    with open(os.path.join(EXAMPLE_DIR, name)) as f:
        return yaml.safe_load(f)


class YamlScriptsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("unshare") is None or os.geteuid() != 0:
            raise unittest.SkipTest("needs root and unshare for a private network namespace")
        cls.tmp = tempfile.mkdtemp(prefix="mingpt-yaml-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        # A process that holds the namespace; the nodes enter it with nsenter.
        cls.holder = subprocess.Popen(["unshare", "--net", "sleep", "3600"])
        cls.addClassCleanup(cls._stop_holder)
        cls.netns = f"/proc/{cls.holder.pid}/ns/net"
        deadline = time.monotonic() + 10
        while os.readlink(cls.netns) == os.readlink("/proc/self/ns/net"):
            if time.monotonic() > deadline:
                raise RuntimeError("unshare --net did not make a namespace")
            time.sleep(0.05)
        subprocess.run(["nsenter", f"--net={cls.netns}", "ip", "link", "set", "lo", "up"],
                       check=True, timeout=10)

    @classmethod
    def _stop_holder(cls):
        cls.holder.kill()
        cls.holder.wait()

    def make_home(self, name):
        """A node's HOME with the workdir synced to ~/sky_workdir, as herd leaves it."""
        home = os.path.join(self.tmp, name)
        shutil.copytree(EXAMPLE_DIR, os.path.join(home, "sky_workdir"),
                        ignore=shutil.ignore_patterns("gpt_snapshot.pt*", "__pycache__", "tests"))
        return home

    def start(self, home, script, env):
        return subprocess.Popen(
            ["nsenter", f"--net={self.netns}", "timeout", "-k", "5", str(SCRIPT_TIMEOUT_S),
             "bash", "-c", script],
            cwd=os.path.join(home, "sky_workdir"), env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)

    @staticmethod
    def finish(proc):
        try:
            out, _ = proc.communicate(timeout=SCRIPT_TIMEOUT_S + 30)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        return proc.returncode, out

    def run_task(self, yaml_name, num_nodes):
        """Runs setup then run on num_nodes nodes; returns [(rc, output)] of run per node."""
        task = load_task(yaml_name)
        self.assertEqual(task.get("num_nodes", 1), num_nodes)
        self.assertNotIn("accelerators", task.get("resources", {}))
        ips = "\n".join(["127.0.0.1"] * num_nodes)
        task_id = f"sky-2025-01-01-00-00-00-000000_mingpt-test_{yaml_name.split('.')[0]}"
        nodes = []
        for rank in range(num_nodes):
            home = self.make_home(f"{yaml_name}-node{rank}")
            # TMPDIR: torchrun's elastic agent leaves its torchelastic_* directory behind; in
            # the node's home it goes with the test's files.
            env = dict(os.environ, HOME=home, PYTHONUNBUFFERED="1", TMPDIR=home,
                       # gloo binds the address of the hostname; pin it to the namespace's lo.
                       GLOO_SOCKET_IFNAME="lo")
            env.update({k: str(v) for k, v in task.get("envs", {}).items()})
            env.update(OVERRIDES)
            env.update(SKYPILOT_NUM_NODES=str(num_nodes), SKYPILOT_TASK_ID=task_id)
            setup_env = dict(env, SKYPILOT_SETUP_NODE_RANK=str(rank),
                             SKYPILOT_SETUP_NODE_IPS=ips, SKYPILOT_SETUP_NUM_GPUS_PER_NODE="0")
            rc, out = self.finish(self.start(home, task["setup"], setup_env))
            self.assertEqual(rc, 0, f"setup of {yaml_name} on node {rank}:\n{out}")
            run_env = dict(env, SKYPILOT_NODE_RANK=str(rank), SKYPILOT_NODE_IPS=ips,
                           SKYPILOT_NUM_GPUS_PER_NODE="0")
            nodes.append((home, run_env))
        procs = [self.start(home, task["run"], env) for home, env in nodes]
        results = [self.finish(p) for p in procs]
        for rank, (rc, out) in enumerate(results):
            self.assertEqual(rc, 0, f"run of {yaml_name} on node {rank}:\n{out}")
        return [home for home, _ in nodes], [out for _, out in results]

    def check_world(self, outputs, world_size):
        every = "\n".join(outputs)
        starts = START_RE.findall(every)
        self.assertEqual(sorted(int(r) for _, r, _ in starts), list(range(world_size)), every)
        self.assertTrue(all(int(w) == world_size for w, _, _ in starts), every)
        # Every rank trained the last iteration of its epoch.
        self.assertEqual(sorted(int(r) for r in LOSS_RE.findall(every)), list(range(world_size)),
                         every)

    def snapshots(self, homes):
        return [h for h in homes if os.path.isfile(os.path.join(h, "sky_workdir",
                                                                "gpt_snapshot.pt"))]

    def test_single_node(self):
        homes, outs = self.run_task("train-cpu.yaml", 1)
        self.check_world(outs, 2)
        self.assertEqual(self.snapshots(homes), homes)

    def test_multinode_static_rendezvous(self):
        homes, outs = self.run_task("train-multinode-cpu.yaml", 2)
        self.check_world(outs, 4)
        self.assertIn("head node: 127.0.0.1", outs[0])
        # Node rank 0 holds global ranks 0-1, so only its workdir gets the snapshot.
        self.assertEqual(self.snapshots(homes), homes[:1])

    def test_multinode_c10d_rendezvous(self):
        homes, outs = self.run_task("train-rdzv-cpu.yaml", 2)
        self.check_world(outs, 4)
        # torchrun chose which node has global rank 0; that node alone has the snapshot.
        self.assertEqual(len(self.snapshots(homes)), 1)


if __name__ == "__main__":
    if importlib.util.find_spec("torch") is None:
        print(f"SKIP: {sys.executable} cannot import torch", file=sys.stderr)
        sys.exit(77)
    unittest.main(verbosity=2)
