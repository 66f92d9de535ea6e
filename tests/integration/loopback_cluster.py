"""A head and workers on distinct loopback addresses, started from real binaries with real
certificates, for the integration tests of the agent core. Everything it starts is killed and every
file it made is removed by close(), also when a test fails."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

from herd_env import pids_where

HERD = os.environ.get("HERD", "herd")
HERDLET = os.environ.get("HERDLET", "herdlet")


def run(args, timeout=60, check=True, **kw):
    p = subprocess.run(args, capture_output=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(
            f"{args} exited {p.returncode}\nstdout:\n{p.stdout.decode(errors='replace')}\n"
            f"stderr:\n{p.stderr.decode(errors='replace')}")
    return p


def processes_with_marker(marker):
    """PIDs of live (non-zombie) processes with an environment entry that starts with marker."""
    def live_and_marked(environ, stat):
        state = stat.rsplit(b")", 1)[1].split()[0]
        return state != b"Z" and any(e.startswith(marker) for e in environ.split(b"\0"))
    return pids_where(live_and_marked, "environ", "stat")


def free_subnet():
    """A /30 of 10.213.240-253.x that no address or route of this machine uses (the local
    provider hashes clusters into 10.213.0.0/16 and skips used subnets the same way)."""
    used = run(["ip", "-o", "addr"]).stdout.decode() + run(["ip", "route"]).stdout.decode()
    for third in range(253, 239, -1):
        for fourth in range(0, 256, 4):
            prefix = f"10.213.{third}."
            if f"{prefix}{fourth + 1}" not in used and f"10.213.{third}.0/24" not in used:
                return prefix, fourth
    raise unittest.SkipTest("no free test subnet")


class VethNamespace:
    """A network namespace `<prefix>-<pid>` joined to this one by a veth pair on a free /30:
    host_ip on this side, node_ip inside. A node started in it (with `wrapper` as its command
    prefix) can lose its link: set_link("down"/"up"). close() removes the pair and the namespace,
    also after a failed setup."""

    def __init__(self, prefix):
        tag = str(os.getpid() % 100000)
        self.ns = f"{prefix}-{tag}"
        self.host_if, self.ns_if = f"{prefix}r{tag}", f"{prefix}n{tag}"
        # nsenter --net, not `ip netns exec` (which remounts /sys and hides the cgroup tree).
        self.wrapper = ["nsenter", f"--net=/run/netns/{self.ns}"]
        try:
            net, base = free_subnet()
            self.host_ip, self.node_ip = f"{net}{base + 1}", f"{net}{base + 2}"
            run(["ip", "netns", "add", self.ns])
            run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
            run(["ip", "link", "set", self.ns_if, "netns", self.ns])
            run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if])
            run(["ip", "link", "set", self.host_if, "up"])
            run(["ip", "-n", self.ns, "addr", "add", f"{self.node_ip}/30", "dev", self.ns_if])
            run(["ip", "-n", self.ns, "link", "set", self.ns_if, "up"])
            run(["ip", "-n", self.ns, "link", "set", "lo", "up"])
        except BaseException:
            self.close()
            raise

    def set_link(self, state):
        run(["ip", "-n", self.ns, "link", "set", self.ns_if, state])

    def close(self):
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


class LoopbackCluster:
    def __init__(self, name, addresses, gpus_per_node=2, gpu_name="L4", cpus=4, agent_env=None,
                 wrappers=None, agent_config=None):
        """gpus_per_node: declared in each agent's config (`gpus:`), or a list with one entry per
        node where None means "not declared: the agent probes" (NVML first, see agent_env).
        agent_config: per node index, more settings of its herdlet.yaml (e.g. health_check)."""
        self.agent_config = agent_config or {}
        self.name = name
        self.addresses = addresses
        self.agent_env = dict(agent_env or {})
        # Per node index: a command prefix for its herdlet (e.g. ["ip", "netns", "exec", NS]).
        self.wrappers = wrappers or {}
        self.dir = tempfile.mkdtemp(prefix=f"herd-{name}-")
        os.chmod(self.dir, 0o700)
        self.marker_value = uuid.uuid4().hex
        self.procs = []
        self.certs = os.path.join(self.dir, "certs")
        self.port = None
        try:
            run([HERD, "certs", "init", self.certs, "--cluster", name])
            for i, addr in enumerate(addresses):
                gpus = gpus_per_node[i] if isinstance(gpus_per_node, list) else gpus_per_node
                self._start_agent(i, addr, gpus, gpu_name, cpus)
                if i == 0:
                    self.port = self._wait_port()
            self.wait_nodes(len(addresses))
        except BaseException:
            self.close()
            raise

    def node_id(self, i):
        return f"{self.name}-head" if i == 0 else f"{self.name}-worker{i}"

    def _start_agent(self, i, addr, gpus, gpu_name, cpus):
        node = self.node_id(i)
        ndir = os.path.join(self.dir, node)
        os.makedirs(ndir)
        run([HERD, "certs", "issue", self.certs, "--node", node, "--ip", addr, "--out",
             os.path.join(ndir, "certs")])
        cfg = {
            "role": "head" if i == 0 else "worker",
            "cluster": self.name,
            "node_id": node,
            "address": addr,
            "certs": os.path.join(ndir, "certs"),
            "state_dir": os.path.join(ndir, "state"),
            "cpus": cpus,
        }
        if gpus is not None:
            cfg["gpus"] = gpus
            cfg["gpu_name"] = gpu_name
        cfg.update(self.agent_config.get(i, {}))
        if i == 0:
            cfg["listen"] = f"{addr}:0"
            cfg["port_file"] = os.path.join(ndir, "port")
        else:
            cfg["head"] = f"{self.addresses[0]}:{self.port}"
        path = os.path.join(ndir, "herdlet.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)  # JSON is YAML
        env = self._agent_env()
        # Setup must not see this; run does (REFERENCE.md).
        env["CUDA_VISIBLE_DEVICES"] = "0,1"
        env["HOME"] = os.path.join(ndir, "home")
        os.makedirs(env["HOME"])
        log = open(os.path.join(ndir, "herdlet.log"), "wb")
        p = subprocess.Popen([*self.wrappers.get(i, []), HERDLET, "--config", path], stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        self.procs.append(p)

    def _agent_env(self):
        """The agents' environment: this test's plus agent_env, without what ctest sets for Python
        tests (an agent started by its supervisor would not have PYTHONUNBUFFERED)."""
        env = dict(os.environ, **self.agent_env)
        env.pop("PYTHONUNBUFFERED", None)
        return env

    def restart_agent(self, i, binary=None, sig=signal.SIGTERM):
        """Stops worker i's herdlet (with `sig`: SIGKILL for a crash) and starts it again (a new
        incarnation), from `binary` if given (an in-place upgrade)."""
        proc = self.procs[i]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        proc.wait(timeout=10)
        ndir = os.path.join(self.dir, self.node_id(i))
        env = dict(self._agent_env(), HOME=os.path.join(ndir, "home"), CUDA_VISIBLE_DEVICES="0,1")
        log = open(os.path.join(ndir, "herdlet.log"), "ab")
        self.procs[i] = subprocess.Popen([*self.wrappers.get(i, []), binary or HERDLET, "--config",
                                          os.path.join(ndir, "herdlet.yaml")],
                                         stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        log.close()

    def restart_head(self, sig=signal.SIGTERM):
        """Stops the head's herdlet (with `sig`: SIGKILL for a crash; unless it is gone) and starts
        it again on the same port."""
        head = self.procs[0]
        if head.poll() is None:
            os.killpg(head.pid, sig)
        head.wait(timeout=10)
        ndir = os.path.join(self.dir, self.node_id(0))
        path = os.path.join(ndir, "herdlet.yaml")
        with open(path) as f:
            cfg = json.load(f)
        cfg["listen"] = f"{self.addresses[0]}:{self.port}"
        with open(path, "w") as f:
            json.dump(cfg, f)
        env = dict(self._agent_env(), HOME=os.path.join(ndir, "home"), CUDA_VISIBLE_DEVICES="0,1")
        log = open(os.path.join(ndir, "herdlet.log"), "ab")
        self.procs[0] = subprocess.Popen([HERDLET, "--config", path], stdout=log,
                                         stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        log.close()

    def _wait_port(self):
        path = os.path.join(self.dir, self.node_id(0), "port")
        deadline = time.time() + 20
        while time.time() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    return int(f.read().strip())
            if self.procs[0].poll() is not None:
                raise AssertionError("head exited: " + self.agent_log(0))
            time.sleep(0.05)
        raise AssertionError("head did not write its port: " + self.agent_log(0))

    def agent_log(self, i):
        with open(os.path.join(self.dir, self.node_id(i), "herdlet.log"), errors="replace") as f:
            return f.read()

    def target(self, certs=None):
        return ["--endpoint", f"{self.addresses[0]}:{self.port}", "--certs", certs or self.certs]

    def herd(self, verb, *args, timeout=60, check=True, certs=None):
        return run([HERD, verb, *self.target(certs), *args], timeout=timeout, check=check)

    def nodes(self):
        return json.loads(self.herd("nodes", "-o", "json").stdout)

    def wait_nodes(self, n, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if sum(1 for x in self.nodes() if x["alive"]) >= n:
                    return
            except AssertionError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{n} nodes did not register:\n" + self.agent_log(0))

    def queue(self):
        return {j["id"]: j for j in json.loads(self.herd("queue", "-o", "json").stdout)}

    def wait_state(self, job_id, states, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.queue().get(job_id)
            if job and job["status"] in states:
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} not in {states}: {self.queue().get(job_id)}")

    def marker_env(self, tag=""):
        """--env flags that mark every process of a job for the leftover sweep."""
        return ["--env", f"HERD_TEST_RUN={self.marker_value}{tag}"]

    def leftovers(self, tag=""):
        return processes_with_marker(f"HERD_TEST_RUN={self.marker_value}{tag}".encode())

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # Jobs run in their own sessions (they outlive an agent); sweep whatever a test left.
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


JOB_ID_RE = re.compile(r"Job submitted, ID: (\d+)")


def job_id_of(stderr):
    m = JOB_ID_RE.search(stderr.decode(errors="replace"))
    if not m:
        raise AssertionError("no job id in: " + stderr.decode(errors="replace"))
    return int(m.group(1))


def write_task(dirname, name, body):
    """Writes body to dirname/name and returns the path."""
    path = os.path.join(dirname, name)
    with open(path, "w") as f:
        f.write(body)
    return path


class ClusterTestCase(unittest.TestCase):
    """Tests sharing one LoopbackCluster (CLUSTER on ADDRS) and a folder for their task files
    (cls.tasks), both made once for the class and removed when it ends, also after a failure."""

    CLUSTER = None
    ADDRS = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = LoopbackCluster(cls.CLUSTER, cls.ADDRS)
        cls.tasks = tempfile.mkdtemp(prefix=f"herd-{cls.CLUSTER}-tasks-")

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "cluster", None):
            cls.cluster.close()
        shutil.rmtree(getattr(cls, "tasks", ""), ignore_errors=True)

    def submit(self, tag, body):
        """`herd exec -d` of a task with this body, its processes marked with tag; the job id."""
        path = write_task(self.tasks, f"{tag.strip('-')}.yaml", body)
        p = run([HERD, "exec", *self.cluster.target(), *self.cluster.marker_env(tag), "-d", path])
        return job_id_of(p.stderr)
