"""A real Slurm (Debian's slurm-wlm 22.05 and munge) on test hosts: one munged for the machine,
slurmctld where `ctl_wrapper` puts it (this namespace by default), one slurmd per node started
through that node's wrapper (`nsenter --net=/run/netns/NS`, or also the node's mount and UTS
namespaces), on private ports, every file under `workdir` (ENVIRONMENT.md, "Slurm as a
side-by-side baseline"). Used by bench/suite.py (the srun baseline) and slurm_test.py (Slurm as
infra). GPUs are declared as GRES backed by plain files standing for devices (slurmd counts one
GPU per gres.conf File; a Count alone reads as none). With `accounting`, also a private MariaDB
(mariadbd on a loopback port, its data under `workdir`) and a slurmdbd, slurmctld enforcing
associations, limits and QOS: the cluster, the account ACCOUNT and user root are registered, and
sacctmgr() changes the rest (slurm_qos_test.py)."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ACCOUNT = "herd"


class SlurmError(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Slurm:
    def __init__(self, workdir, nodes, base_env, node_wrappers, ctl_wrapper=(), ctl_ip=None,
                 gres=None, partitions=None, cluster_name="herdbench", cpus_per_node=1,
                 accounting=False):
        """nodes: [{"name", "ip"}]; node_wrappers: the argv prefix that enters each node;
        ctl_ip: slurmctld's address as the nodes reach it (default: this machine's route to the
        first node); gres: {"type": "L4", "count": 2} on every node, or None; partitions: {name:
        [node names]} (default: one partition "bench" of every node, the default one); accounting:
        also MariaDB and slurmdbd, every job charged to ACCOUNT and held to its QOS."""
        self.dir = os.path.join(workdir, "slurm")
        self.nodes = nodes
        self.base_env = base_env
        self.node_wrappers = node_wrappers
        self.ctl_wrapper = list(ctl_wrapper)
        self.ctl_ip = ctl_ip
        self.gres = gres
        self.partitions = partitions or {"bench": [n["name"] for n in nodes]}
        self.cluster_name = cluster_name
        self.cpus_per_node = cpus_per_node
        self.accounting = accounting
        self.procs = []
        self.db_procs = []  # mariadbd, then slurmdbd: stopped after Slurm's other daemons
        self.sock = None
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env_vars = dict(base_env, SLURM_CONF=self.conf)

    def start(self):
        """Starts everything and waits until every node is idle; stop() undoes a partial start."""
        d = self.dir
        for sub in ("state", "spool", "log", "run"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        munge = os.path.join(d, "munge")
        os.makedirs(munge, mode=0o711)
        os.chmod(munge, 0o711)
        with open(os.path.join(munge, "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(os.path.join(munge, "munge.key"), 0o600)
        open(os.path.join(munge, "seed"), "w").close()
        self.sock = os.path.join(munge, "sock")
        subprocess.run(["munged", "--force", f"--socket={self.sock}",
                        f"--key-file={munge}/munge.key", f"--pid-file={munge}/munged.pid",
                        f"--log-file={munge}/munged.log", f"--seed-file={munge}/seed"],
                       check=True, timeout=30)
        # This machine's address on the nodes' network: slurmdbd's, reached from slurmctld.
        route = subprocess.run(["ip", "-o", "route", "get", self.nodes[0]["ip"]],
                               capture_output=True, text=True).stdout.split()
        host_ip = route[route.index("src") + 1]
        ctl_port, node_port, dbd_port = free_port(), free_port(), free_port()
        if self.accounting:
            storage = ["AccountingStorageType=accounting_storage/slurmdbd",
                       f"AccountingStorageHost={host_ip}", f"AccountingStoragePort={dbd_port}",
                       # the munge socket for slurmdbd's connections (AuthInfo's is not used)
                       f"AccountingStoragePass={self.sock}",
                       "AccountingStorageEnforce=associations,limits,qos"]
        else:
            storage = ["AccountingStorageType=accounting_storage/none"]
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}({self.ctl_ip or host_ip})",
            f"SlurmctldPort={ctl_port}", f"SlurmdPort={node_port}", "AuthType=auth/munge",
            f"AuthInfo=socket={self.sock}", "CredType=cred/munge", "SlurmUser=root",
            "SlurmdUser=root", f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid", f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none", *storage, "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides",
            "MailProg=/bin/true", "ReturnToService=2", "KillWait=5"]
        if self.gres:
            lines.append("GresTypes=gpu")
        for n in self.nodes:
            g = f" Gres=gpu:{self.gres['type']}:{self.gres['count']}" if self.gres else ""
            lines.append(f"NodeName={n['name']} NodeAddr={n['ip']} CPUs={self.cpus_per_node}"
                         f"{g} State=UNKNOWN")
        for i, (name, members) in enumerate(self.partitions.items()):
            default = "YES" if i == 0 else "NO"
            lines.append(f"PartitionName={name} Nodes={','.join(members)} Default={default} "
                         "MaxTime=INFINITE State=UP")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        if self.gres:
            # slurmd counts a GPU per device file (a Count alone reads as 0 GPUs): plain files
            # stand for them (TaskPlugin=task/none constrains no devices).
            dev = os.path.join(d, "dev")
            os.makedirs(dev, exist_ok=True)
            for i in range(self.gres["count"]):
                open(os.path.join(dev, f"gpu{i}"), "w").close()
            last = self.gres["count"] - 1
            with open(os.path.join(d, "gres.conf"), "w") as f:
                f.write("AutoDetect=off\n")
                for n in self.nodes:
                    f.write(f"NodeName={n['name']} Name=gpu Type={self.gres['type']} "
                            f"File={dev}/gpu[0-{last}]\n")
        if self.accounting:
            self._start_accounting(host_ip, dbd_port)
        self.procs.append(subprocess.Popen(
            self.ctl_wrapper + ["slurmctld", "-D", "-i", "-f", self.conf],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=self.env_vars))
        for n, wrapper in zip(self.nodes, self.node_wrappers):
            self.procs.append(subprocess.Popen(
                list(wrapper) + ["slurmd", "-D", "-f", self.conf, "-N", n["name"]],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env=self.env_vars))
        deadline = time.time() + 60
        out = []
        while time.time() < deadline:
            out = self.run(["sinfo", "-h", "-o", "%T %D"]).stdout.split()
            if out[:2] == ["idle", str(len(self.nodes))]:
                return
            time.sleep(0.5)
        raise SlurmError(f"Slurm nodes not idle within 60 s (sinfo: {out}); logs in {d}/log")

    def _start_accounting(self, host_ip, dbd_port):
        """MariaDB (root without a password, on a private loopback port), slurmdbd on it (its
        slurmdbd.conf beside slurm.conf, where it looks, 0600 as it demands), then the cluster,
        ACCOUNT and user root registered before slurmctld starts."""
        d = self.dir
        db = os.path.join(d, "db")
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={db}/data",
                        "--auth-root-authentication-method=normal", "--user=root",
                        "--skip-test-db", "--skip-name-resolve"],
                       check=True, capture_output=True, timeout=120)
        db_port = free_port()
        self.db_procs.append(subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={db}/data", f"--socket={db}/sock",
             "--bind-address=127.0.0.1", f"--port={db_port}", "--skip-name-resolve",
             "--user=root", f"--pid-file={db}/mariadbd.pid", f"--log-error={d}/log/mariadbd.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        self._wait(["mariadb-admin", "--no-defaults", f"--socket={db}/sock", "-u", "root",
                    "ping"], "mariadbd", "mariadbd.log")
        conf = os.path.join(d, "slurmdbd.conf")
        with open(conf, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write("\n".join([
                "AuthType=auth/munge", f"AuthInfo=socket={self.sock}",
                f"DbdHost={socket.gethostname().split('.')[0]}", f"DbdAddr={host_ip}",
                f"DbdPort={dbd_port}", "SlurmUser=root", f"LogFile={d}/log/slurmdbd.log",
                f"PidFile={d}/run/slurmdbd.pid", "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1", f"StoragePort={db_port}", "StorageUser=root",
                "StorageLoc=slurm_acct_db"]) + "\n")
        self.db_procs.append(subprocess.Popen(
            ["slurmdbd", "-D"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env=self.env_vars))
        self._wait(["sacctmgr", "-n", "list", "cluster"], "slurmdbd", "slurmdbd.log")
        self.sacctmgr("add", "cluster", self.cluster_name)
        self.sacctmgr("add", "account", ACCOUNT, f"Cluster={self.cluster_name}")
        self.sacctmgr("add", "user", "root", f"Account={ACCOUNT}", f"DefaultAccount={ACCOUNT}",
                      f"Cluster={self.cluster_name}")

    def _wait(self, argv, what, log):
        """Until argv succeeds (the daemon answers), or SlurmError with the end of its log (the
        directory goes with the test)."""
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.run(argv, timeout=30).returncode == 0:
                return
            time.sleep(0.2)
        try:
            with open(os.path.join(self.dir, "log", log), errors="replace") as f:
                tail = f.read()[-2000:]
        except OSError:
            tail = "(none)"
        raise SlurmError(f"{what} does not answer within 60 s; the end of its log:\n{tail}")

    def sacctmgr(self, *args):
        """`sacctmgr -i ARGS` (accounting mode); SlurmError with its output when it fails."""
        p = self.run(["sacctmgr", "-i", *args])
        if p.returncode != 0:
            raise SlurmError(f"sacctmgr {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout

    def run(self, argv, timeout=60):
        """A Slurm command from this namespace (srun, squeue, scancel, sinfo)."""
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=self.env_vars)

    def stop(self):
        """Cancels every job first (a step's processes outlive slurmd), then stops every daemon
        (each in a session of its own), slurmdbd and mariadbd last, and munged."""
        if self.procs and self.procs[0].poll() is None:
            try:
                self.run(["scancel", "--user=root"], timeout=30)
                deadline = time.time() + 30
                while time.time() < deadline:
                    if not self.run(["squeue", "-h", "-t", "PD,R,CG,CF,S"],
                                    timeout=30).stdout.strip():
                        break
                    time.sleep(0.5)
            except subprocess.TimeoutExpired:
                pass  # the daemons are stopped below all the same
        for group in [self.procs] + [[p] for p in reversed(self.db_procs)]:
            for p in group:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for p in group:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs = []
        self.db_procs = []
        if self.sock:
            subprocess.run(["munged", "--stop", f"--socket={self.sock}"], capture_output=True,
                           timeout=30)
            self.sock = None


class SlurmOnTestHosts:
    """A Slurm on three herd_test_hosts namespace hosts, as herd's Slurm tests use it:
    <name>-head is the login node (its sshd, and slurmctld in its network namespace), and
    <name>-worker1/2 are compute nodes, each slurmd in its host's network, mount and UTS
    namespaces (its own hostname and home: nothing shared with the login node). Slurm's commands
    on the login node find this cluster's slurm.conf (its .bashrc). Slurm's files live in a
    temporary directory of their own (`root`), outside the test env's directory, which goes
    before Slurm is stopped. stop() undoes what start() made, also after a partial start."""

    def __init__(self, hosts_bin, name, state_dir, key, root_prefix, **slurm_kwargs):
        """hosts_bin: herd_test_hosts; state_dir: its state directory; key: the private key
        whose .pub every host accepts; slurm_kwargs: Slurm's (partitions, gres, accounting...)."""
        self.hosts_bin = hosts_bin
        self.name = name
        self.state_dir = state_dir
        self.key = key
        self.root_prefix = root_prefix
        self.slurm_kwargs = slurm_kwargs
        self.hosts_up = False
        self.root = None
        self.slurm = None
        self.ips = []
        self.compute = []

    def start(self):
        p = subprocess.run([self.hosts_bin, "up", self.name, "3", self.state_dir,
                            self.key + ".pub"], capture_output=True, text=True)
        self.hosts_up = True
        if p.returncode != 0:
            raise SlurmError(p.stderr)
        self.ips = p.stdout.split()
        names = [f"{self.name}-head", f"{self.name}-worker1", f"{self.name}-worker2"]
        node_dir = os.path.join(self.state_dir, "nodes")

        def sshd_pid(host):
            with open(os.path.join(node_dir, host, "sshd.pid")) as f:
                return f.read().strip()

        self.root = tempfile.mkdtemp(prefix=self.root_prefix)
        with open(os.path.join(node_dir, names[0], "home", ".bashrc"), "w") as f:
            f.write(f"export SLURM_CONF={self.root}/slurm/slurm.conf\n")
        self.compute = [{"name": n, "ip": ip} for n, ip in zip(names[1:], self.ips[1:])]
        self.slurm = Slurm(
            self.root, self.compute, dict(os.environ),
            [["nsenter", "--target", sshd_pid(n["name"]), "--net", "--mount", "--uts"]
             for n in self.compute],
            ctl_wrapper=["nsenter", f"--net=/run/netns/herd-{self.name}-0"], ctl_ip=self.ips[0],
            **self.slurm_kwargs)
        self.slurm.start()

    def stop(self):
        try:
            if self.slurm is not None:
                self.slurm.stop()
        finally:
            if self.hosts_up:
                subprocess.run([self.hosts_bin, "down", self.name, self.state_dir])
            if self.root:
                shutil.rmtree(self.root, ignore_errors=True)
