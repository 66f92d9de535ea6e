"""A private HERD_HOME and HOME for a test that drives `herd` by cluster name, and a cleanup that
tears down every cluster made there (also when the test failed) and checks nothing is left;
HerdEnvTestCase, the base of the suites whose tests share one such env (and cluster)."""

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

HERD = os.environ.get("HERD", "herd")


class HerdEnv:
    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=f"herd-{prefix}-")
        os.chmod(self.dir, 0o700)
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        self.env = dict(os.environ, HERD_HOME=os.path.join(self.dir, "herd"), HOME=self.home)
        self.env.pop("NO_COLOR", None)

    def herd(self, *args, timeout=300, check=True, input=None):
        p = subprocess.run([HERD, *args], capture_output=True, timeout=timeout, env=self.env,
                           input=input)
        if check and p.returncode != 0:
            raise AssertionError(f"herd {' '.join(args)} exited {p.returncode}\n"
                                 f"stdout:\n{p.stdout.decode(errors='replace')[-4000:]}\n"
                                 f"stderr:\n{p.stderr.decode(errors='replace')[-4000:]}")
        return p

    def popen(self, *args):
        return subprocess.Popen([HERD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env)

    def ssh(self, alias, command, tool="ssh", timeout=60):
        """ssh/scp through the generated config (ssh reads ~/.ssh/config of the passwd home, so
        the test's HOME is passed with -F)."""
        cfg = os.path.join(self.home, ".ssh", "config")
        argv = [tool, "-F", cfg, "-o", "BatchMode=yes"]
        argv += [alias, command] if tool == "ssh" else command
        return subprocess.run(argv, capture_output=True, timeout=timeout, env=self.env)

    def clusters(self):
        return {c["name"]: c for c in json.loads(self.herd("status", "-o", "json").stdout)}

    def controller_log(self, job_id):
        """The end of a managed job's controller log, for a failing test's message."""
        path = os.path.join(self.env["HERD_HOME"], "managed_jobs", str(job_id), "controller.log")
        try:
            with open(path) as f:
                return f.read()[-4000:]
        except OSError:
            return "(none)"

    def close(self):
        try:
            for name in list(self.clusters()):
                self.herd("down", name, "-y", check=False)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


# torchrun's elastic agent makes a directory of its own under /tmp (the nodes' /tmp is this
# machine's) and leaves it behind when it ends.
TORCHELASTIC = "/tmp/torchelastic_*"


def remove_torchelastic_dirs(before):
    """Removes the torchelastic_* directories made since `before` (a set of paths), unless a
    torchrun still runs (another suite's, on this machine: one of them may be its own)."""
    if pids_by_cmdline(lambda argv: any(b"torch.distributed.run" in a or
                                        a.endswith(b"/torchrun") for a in argv[:3])):
        return
    for d in set(glob.glob(TORCHELASTIC)) - before:
        shutil.rmtree(d, ignore_errors=True)


class HerdEnvTestCase(unittest.TestCase):
    """Tests that share one HerdEnv (cls.h) and, when launch_args() names one, a cluster launched
    for all of them. setUpClass makes the env, calls prepare_env(), launches (cls.launch: the
    CompletedProcess; cls.launch_seconds) and calls after_launch(); whatever fails in there closes
    the env again before the error goes on. tearDownClass closes the env (close_env(): `herd down`
    of every cluster made there, then its files; cls.close_seconds) and checks that nothing is
    left: no namespace of CLUSTER (when set), then what check_nothing_left() asserts.

    A suite sets ENV_PREFIX (its env's directory is herd-<ENV_PREFIX>-*) and CLUSTER, and
    overrides the hooks it needs; an override of close_env calls this one for the env."""

    ENV_PREFIX = "test"
    CLUSTER = None

    @classmethod
    def setUpClass(cls):
        cls.torchelastic_before = set(glob.glob(TORCHELASTIC))
        cls.h = HerdEnv(cls.ENV_PREFIX)
        try:
            cls.prepare_env()
            args = cls.launch_args()
            if args is not None:
                t0 = time.time()
                cls.launch = cls.h.herd(*args)
                cls.launch_seconds = time.time() - t0
            cls.after_launch()
        except BaseException:
            cls.close_env()
            raise

    @classmethod
    def tearDownClass(cls):
        t0 = time.time()
        cls.close_env()
        cls.close_seconds = time.time() - t0
        remove_torchelastic_dirs(cls.torchelastic_before)
        if cls.CLUSTER is not None:
            # `down` left nothing of the cluster behind.
            assert namespaces_of(cls.CLUSTER) == [], namespaces_of(cls.CLUSTER)
        cls.check_nothing_left()

    @classmethod
    def prepare_env(cls):
        """Before the launch: files, keys, hosts the suite needs."""

    @classmethod
    def launch_args(cls):
        """The `herd` arguments that launch the suite's cluster; None: nothing is launched."""
        return None

    @classmethod
    def after_launch(cls):
        """After the launch: what the suite reads of the launched cluster."""

    @classmethod
    def close_env(cls):
        cls.h.close()

    @classmethod
    def check_nothing_left(cls):
        """After close_env: assertions that nothing of the suite is left."""


def netns_available():
    if os.geteuid() != 0:
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0


# Where an agent records its cgroup scope, relative to its user's home
# (shared/common/agent_layout.hpp).
AGENT_CGROUP_SCOPE_FILE = ".herd/agent/state/cgroup.scope"


def remove_cgroups(scopes):
    """Removes what of these cgroup scopes (and the cgroups in them) is left: returns those."""
    left = [d for d in scopes if os.path.exists(d)]
    for d in left:
        for sub in os.scandir(d):
            if sub.is_dir():
                os.rmdir(sub.path)
        os.rmdir(d)
    return left


def cgroup_scopes_of(cluster):
    """The agent cgroup scopes (<...>/herd/<cluster>-<node>-<instance>) of a cluster's nodes on
    this machine, looked for in the first levels of /sys/fs/cgroup."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if root.count("/") > 6:
            dirs[:] = []
            continue
        if os.path.basename(root) == "herd":
            found += [os.path.join(root, d) for d in dirs if d.startswith(cluster + "-")]
            dirs[:] = []
    return found


def namespaces_of(cluster):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"herd-{cluster}-")]


def netns_pids(ns):
    """PIDs of every process in network namespace ns (`ip netns pids`)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def kill_netns(ns):
    """SIGKILLs every process in network namespace ns (sshd, supervisor, herdlet, job processes),
    as a machine that is gone; the namespace stays. Returns the pids killed."""
    pids = netns_pids(ns)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def herdlets_in(ns):
    """PIDs of the herdlet processes (comm "herdlet") in network namespace ns."""
    found = []
    for p in netns_pids(ns):
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() == "herdlet":
                    found.append(p)
        except OSError:
            continue
    return sorted(found)


def pids_where(match, *files):
    """PIDs of the processes for which match(*contents) is true: the bytes of /proc/PID/FILE for
    each of files (a process that ends meanwhile is skipped)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            contents = []
            for name in files:
                with open(f"/proc/{d}/{name}", "rb") as f:
                    contents.append(f.read())
        except OSError:
            continue
        if match(*contents):
            found.append(int(d))
    return found


def pids_by_cmdline(match):
    """PIDs of the processes whose argv (a list of bytes) match(argv) accepts."""
    return pids_where(lambda cmdline: match(cmdline.split(b"\0")), "cmdline")


def pids_with_marker(marker):
    """Processes whose command line (arguments joined by NUL) contains marker."""
    return pids_by_cmdline(lambda argv: marker.encode() in b"\0".join(argv))


def kill_managed_controllers(env):
    """SIGKILLs the managed-job controllers `herd jobs queue` of env lists (a test's teardown: they
    would relaunch what its `down` removes). Only a pid whose command line is that job's
    controller's is killed: a recorded pid may have been reused."""
    p = env.herd("jobs", "queue", "-o", "json", check=False)
    for j in json.loads(p.stdout or b"[]"):
        pid = j.get("controller_pid", 0)
        if pid and pid in pids_with_marker(f"_controller\0{j['id']}\0"):
            os.kill(pid, signal.SIGKILL)


def wait_for(cond, timeout=20):
    """Polls cond every 50 ms for up to timeout seconds; its first true answer, or its last."""
    end = time.time() + timeout
    while time.time() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    return cond()


def managed_jobs(env):
    """`herd jobs queue -o json` of env, by job id."""
    return {j["id"]: j for j in json.loads(env.herd("jobs", "queue", "-o", "json").stdout)}


def launch_managed(env, task_path):
    """`herd jobs launch -d -y TASK`: the managed job's id."""
    out = env.herd("jobs", "launch", "-d", "-y", task_path).stdout.decode()
    return int(out.split("Managed job ID:")[1].split()[0])


def wait_managed(env, job_id, pred, timeout, what, poll=0.1):
    """Polls the managed job until pred(job) holds: (job, the time it was seen, the states seen).
    Raises AssertionError naming what, the states seen and the controller's log otherwise."""
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = managed_jobs(env)[job_id]
        if not seen or seen[-1] != j["status"]:
            seen.append(j["status"])
        if pred(j):
            return j, time.time(), seen
        time.sleep(poll)
    raise AssertionError(f"job {job_id}: no {what} within {timeout} s; states seen {seen}; "
                         f"controller log:\n{env.controller_log(job_id)}")
