"""A real Slurm (Debian's slurm-wlm 22.05 and munge) on test hosts: one munged for the machine,
slurmctld where `ctl_wrapper` puts it (this namespace by default), one slurmd per node started
through that node's wrapper (`nsenter --net=/run/netns/NS`, or also the node's mount and UTS
namespaces), on private ports, every file under `workdir` (ENVIRONMENT.md, "Slurm as a
side-by-side baseline"). Used by bench/suite.py (the srun baseline) and slurm_test.py (Slurm as
infra). GPUs are declared as GRES backed by plain files standing for devices (slurmd counts one
GPU per gres.conf File; a Count alone reads as none)."""

import os
import signal
import socket
import subprocess
import time


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
                 gres=None, partitions=None, cluster_name="herdbench", cpus_per_node=1):
        """nodes: [{"name", "ip"}]; node_wrappers: the argv prefix that enters each node;
        ctl_ip: slurmctld's address as the nodes reach it (default: this machine's route to the
        first node); gres: {"type": "L4", "count": 2} on every node, or None; partitions: {name:
        [node names]} (default: one partition "bench" of every node, the default one)."""
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
        self.procs = []
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
        ctl_ip = self.ctl_ip
        if ctl_ip is None:
            route = subprocess.run(["ip", "-o", "route", "get", self.nodes[0]["ip"]],
                                   capture_output=True, text=True).stdout.split()
            ctl_ip = route[route.index("src") + 1]
        ctl_port, node_port = free_port(), free_port()
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}({ctl_ip})",
            f"SlurmctldPort={ctl_port}", f"SlurmdPort={node_port}", "AuthType=auth/munge",
            f"AuthInfo=socket={self.sock}", "CredType=cred/munge", "SlurmUser=root",
            "SlurmdUser=root", f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid", f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
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

    def run(self, argv, timeout=60):
        """A Slurm command from this namespace (srun, squeue, scancel, sinfo)."""
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=self.env_vars)

    def stop(self):
        """Cancels every job first (a step's processes outlive slurmd), then stops every daemon
        (each in a session of its own) and munged."""
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
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []
        if self.sock:
            subprocess.run(["munged", "--stop", f"--socket={self.sock}"], capture_output=True,
                           timeout=30)
            self.sock = None
