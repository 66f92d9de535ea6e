#!/usr/bin/python3
"""herd's benchmark suite: every figure next to its anchor, in one run, on this machine.

  exec   `herd exec C --num-nodes N -- true` vs `srun -N N -w <same nodes> true` (Slurm from Debian,
         slurmd in the same node namespaces), pdsh, and a parallel ssh through warm ControlMasters;
         optionally a second herd binary (--compare-herd, e.g. the previous build) on the same
         cluster, so before/after are measured side by side.
  launch cold `herd launch --num-nodes N -- true` (fresh namespaces, sshd, agents, first job) for
         each N of --launch-sizes, with the time of each phase.
  relaunch `herd launch` of the UP cluster with nothing changed.
  logs   every rank of an 8-node job prints --log-mb MiB of 100-byte lines; `herd exec` streams
         them to a file vs the same command through 8 warm-ControlMaster `ssh` at once (issue 8
         P4: >= 200 MB/s and >= 0.8x ssh); both outputs are checked line by line (lossless).
  scale  issue 8 P5-P7 by their own programs (bench/SCALE.md), once the figures above are done and
         their clusters and Slurm are gone: bench/fleet/exec_rate.py on a fresh 1-node cluster
         (1000 `herd exec -d`, with its anchor: the same jobs made of their program starts
         alone), fleet_sim (1000 simulated agents against the real head) and agent_footprint.sh
         (an idle worker's RSS and wakeups); their figures and PASS/FAIL lines, as printed.

Writes bench/results/<stamp>.md (table, machine, load average per figure) and SVG plots (latency vs
N, launch time vs N, bench/svgplot.py); prints the table. Needs root. See
bench/README.md; bench/run.sh installs the Debian packages this needs and runs it.
"""

import argparse
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
import svgplot  # noqa: E402
from slurm_cluster import Slurm  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER_NODES = 8
COMMAND_TIMEOUT_S = 120
LAUNCH_TIMEOUT_S = 600


class BenchError(Exception):
    pass


def wait_exact(procs, timeout):
    """Exit codes of `procs` (None for one killed at the timeout), each reaped the moment it ends:
    a blocking waitpid, with a timer that kills what still runs after `timeout` seconds.
    Popen.wait(timeout) and subprocess.run(timeout=) instead poll with sleeps that double from
    1 ms to 50 ms, which rounds a command's time up to 1, 3, 7, 15, 31, 63, 113... ms: a 45 ms
    `herd exec` measured 63-65 ms that way (bench/README.md, seventh round)."""
    expired = threading.Event()

    def kill():
        expired.set()
        for p in procs:
            if p.poll() is None:
                p.kill()

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    try:
        codes = [p.wait() for p in procs]
    finally:
        timer.cancel()
    return [None if expired.is_set() and c == -signal.SIGKILL else c for c in codes]


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def load():
    return os.getloadavg()[0]


def ms(s):
    return s * 1000.0


class Env:
    def __init__(self, herd, workdir):
        self.herd = herd
        self.workdir = workdir
        self.home = os.path.join(workdir, "home")
        os.makedirs(self.home, mode=0o700)
        self.env = dict(os.environ, HERD_HOME=os.path.join(workdir, "herd"), HOME=self.home)
        self.log_path = os.path.join(workdir, "commands.log")
        self.clusters = []

    def run(self, argv, timeout=COMMAND_TIMEOUT_S, env=None, check=True, lines=None):
        """(seconds, rc, output). With lines, stamps each output line (seconds since start)."""
        with tempfile.TemporaryFile(dir=self.workdir) as out:
            start = time.perf_counter()
            if lines is None:
                rc = wait_exact([subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                                  stderr=subprocess.STDOUT, env=env or self.env)],
                                timeout)[0]
            else:
                p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env or self.env)
                for raw in p.stdout:
                    lines.append((time.perf_counter() - start, raw.decode(errors="replace")))
                    out.write(raw)
                rc = wait_exact([p], timeout)[0]
            elapsed = time.perf_counter() - start
            out.seek(0)
            text = out.read().decode(errors="replace")
        with open(self.log_path, "a") as f:
            f.write(f"$ {' '.join(argv)}\n{text[-3000:]}[rc={rc} {ms(elapsed):.1f} ms]\n")
        if check and rc != 0:
            raise BenchError(f"`{' '.join(argv)}` failed (rc={rc}):\n{text.strip()[-2000:]}")
        return elapsed, rc, text

    def herd_json(self, *args):
        _, _, text = self.run([self.herd, *args, "-o", "json"])
        for line in reversed(text.strip().splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                continue
        raise BenchError(f"herd {' '.join(args)} printed no JSON")

    def launch(self, name, n, *task):
        self.clusters.append(name)
        stamped = []
        secs, _, _ = self.run([self.herd, "launch", "-c", name, "--num-nodes", str(n), "-y",
                               *task], timeout=LAUNCH_TIMEOUT_S, lines=stamped)
        phases = {}
        for t, line in stamped:
            # Progress lines end "(done/total)"; the last one of a stage is when it finished.
            if line.rstrip().endswith(f"({n}/{n})"):
                phases[line.rsplit("(", 1)[0].strip()] = t
            if "Job finished" in line:
                phases["job finished"] = t
        return secs, phases

    def nodes(self, name):
        mine = [c for c in self.herd_json("status") if c.get("name") == name]
        if not mine or mine[0].get("status") != "UP":
            raise BenchError(f"cluster {name} is not UP: {mine}")
        return mine[0]["nodes"]

    def down(self, name):
        try:
            self.run([self.herd, "down", name, "-y"], timeout=LAUNCH_TIMEOUT_S)
        except BenchError as e:
            log(f"down {name} failed: {e}")
        if name in self.clusters:
            self.clusters.remove(name)

    def down_all(self):
        for name in list(self.clusters):
            self.down(name)


class Ssh:
    def __init__(self, env, cluster):
        ssh_dir = os.path.join(env.env["HERD_HOME"], "clusters", cluster, "ssh")
        self.env = env
        self.cm = tempfile.mkdtemp(prefix="hb-cm-", dir="/tmp")
        self.opts = ["-F", "/dev/null", "-i", os.path.join(ssh_dir, "id_ed25519"), "-o",
                     "IdentitiesOnly=yes", "-o",
                     f"UserKnownHostsFile={os.path.join(ssh_dir, 'known_hosts')}", "-o",
                     "StrictHostKeyChecking=accept-new", "-o", "BatchMode=yes"]

    def cm_argv(self, ip, *extra):
        return ["ssh", *self.opts, "-o", f"ControlPath={self.cm}/%C", "-o", "ControlMaster=auto",
                "-o", "ControlPersist=120", *extra, f"root@{ip}"]

    def fan_out(self, ips):
        start = time.perf_counter()
        procs = [subprocess.Popen(self.cm_argv(ip, "-T") + ["true"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for ip in ips]
        codes = wait_exact(procs, COMMAND_TIMEOUT_S)
        secs = time.perf_counter() - start
        if any(c != 0 for c in codes):
            raise BenchError(f"ssh fan-out to {ips}: exit codes {codes}")
        return secs

    def pdsh(self, ips):
        env = dict(self.env.env, PDSH_SSH_ARGS_APPEND=" ".join(self.opts))
        secs, _, _ = self.env.run(["pdsh", "-S", "-R", "ssh", "-l", "root", "-w", ",".join(ips),
                                   "true"], env=env)
        return secs

    def bashrc_absent(self, ips):
        for ip in ips:
            out = subprocess.run(self.cm_argv(ip, "-T") + ["test -e ~/.bashrc && echo yes || echo no"],
                                 capture_output=True, text=True, timeout=60).stdout.strip()
            if out != "no":
                return False
        return True

    def close(self, ips):
        for ip in ips:
            subprocess.run(self.cm_argv(ip, "-O", "exit"), capture_output=True, timeout=10)
        shutil.rmtree(self.cm, ignore_errors=True)


def throughput_line(rank):
    """The 100-byte line (with its newline) rank `rank` prints in the log throughput figure."""
    return f"rank-{rank}-" + "x" * (99 - len(f"rank-{rank}-"))


def throughput_command(lines, rank="$SKYPILOT_NODE_RANK"):
    return f"yes \"rank-{rank}-$(printf 'x%.0s' $(seq {99 - 7}))\" | head -n {lines}"


def check_output(path, ranks, lines, prefixed, crlf=False):
    """Every rank's lines arrived whole, exactly `lines` of each, nothing else but herd's own
    messages (not job output: lines that do not start with "(") where prefixed; raises otherwise.
    crlf: lines end "\r\n" (a remote pty's ONLCR, `ssh -tt`). Returns the payload bytes (the
    job's own bytes, without herd's prefixes)."""
    want = {throughput_line(r).encode(): r for r in ranks}
    counts = {r: 0 for r in ranks}
    bad = 0
    with open(path, "rb") as f:
        for raw in f:
            line = raw.rstrip(b"\n")
            if crlf and line.endswith(b"\r"):
                line = line[:-1]
            if prefixed:
                if not line.startswith(b"("):
                    continue  # herd's "Job submitted ..." and the like
                cut = line.find(b") ")
                line = line[cut + 2:] if cut >= 0 else line
            r = want.get(line)
            if r is None:
                bad += 1
            else:
                counts[r] += 1
    short = {r: c for r, c in counts.items() if c != lines}
    if bad or short:
        raise BenchError(f"{path}: {bad} lines not whole job lines; ranks with a count other "
                         f"than {lines}: {short}")
    return len(ranks) * lines * 100


def busy_cpu_seconds():
    """CPU time spent by the whole machine so far (every CPU, user + system + interrupts, not idle
    or iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def log_throughput(env, ssh, herd, cluster, ips, mb, reps):
    """P4: (herd MiB/s list, ssh MiB/s list, ssh -tt MiB/s list, lines per rank, herd failures,
    load before, after, {method: [machine CPU seconds per GiB delivered]}).
    A herd run whose job fails is recorded with herd's error line, not measured. The CPU figure is
    all of the machine's busy time during the run (the nodes, herd, ssh and the writers alike)
    over the payload: where the CPUs are saturated, throughput is their number over it."""
    lines = mb * 1024 * 1024 // 100
    ranks = list(range(len(ips)))
    out = os.path.join(env.workdir, "p4.out")
    herd_rates, ssh_rates, ssh_pty_rates, failures = [], [], [], []
    cpu = {"herd": [], "-T": [], "-tt": []}

    def timed(procs):
        codes = wait_exact(procs, COMMAND_TIMEOUT_S * 10)
        if any(c != 0 for c in codes):
            raise BenchError(f"log throughput: exit codes {codes}")

    l0 = load()
    for _ in range(reps):
        with open(out, "wb") as f:
            start, busy0 = time.perf_counter(), busy_cpu_seconds()
            p = subprocess.Popen([herd, "exec", cluster, "--num-nodes", str(len(ips)), "--",
                                  throughput_command(lines)], stdin=subprocess.DEVNULL,
                                 stdout=f, stderr=subprocess.STDOUT, env=env.env)
            rc = wait_exact([p], COMMAND_TIMEOUT_S * 10)[0]
            secs, busy = time.perf_counter() - start, busy_cpu_seconds() - busy0
        if rc == 0:
            got = check_output(out, ranks, lines, True)
            herd_rates.append(got / secs / 2**20)
            cpu["herd"].append(busy / (got / 2**30))
        else:
            why = [ln for ln in open(out, "rb").read()[-4096:].decode(errors="replace")
                   .splitlines() if ln.startswith("ERROR")]
            failures.append(f"exit {rc} after {secs:.1f} s: " + (why[-1] if why else "?"))
            log(f"log throughput: herd failed: {failures[-1]}")
        # The anchor: the same command through 8 ssh at once, with no pty (-T: the rank's output
        # is a pipe) and with one (-tt: a pty, as herd gives every job process so that Python
        # line-buffers; ssh -tt sends "\r\n" line ends, counted as the 100 bytes of a line).
        for flag, rates in (("-T", ssh_rates), ("-tt", ssh_pty_rates)):
            files = [f"{out}.{r}" for r in ranks]
            handles = [open(p, "wb") for p in files]
            start, busy0 = time.perf_counter(), busy_cpu_seconds()
            try:
                timed([subprocess.Popen(ssh.cm_argv(ip, flag) + [throughput_command(lines, r)],
                                        stdin=subprocess.DEVNULL, stdout=h,
                                        stderr=subprocess.DEVNULL)
                       for r, (ip, h) in enumerate(zip(ips, handles))])
                secs, busy = time.perf_counter() - start, busy_cpu_seconds() - busy0
            finally:
                for h in handles:
                    h.close()
            got = sum(check_output(p, [r], lines, False, crlf=flag == "-tt")
                      for r, p in enumerate(files))
            rates.append(got / secs / 2**20)
            cpu[flag].append(busy / (got / 2**30))
            for p in files:
                os.remove(p)
        os.remove(out)
        log(f"log throughput: herd {herd_rates[-1] if rc == 0 else 0:.0f} MiB/s, "
            f"ssh {ssh_rates[-1]:.0f} MiB/s, ssh -tt {ssh_pty_rates[-1]:.0f} MiB/s")
    return herd_rates, ssh_rates, ssh_pty_rates, lines, failures, l0, load(), cpu


# Lines of the scale programs' output that the report keeps (their figures and verdicts).
SCALE_KEEP = ("PASS", "FAIL", "idle:", "head RSS", "gang of", "burst of", "head: ", "anchor:",
              "machine busy", "expected at most")


def scale_figures(env, herd, args):
    """P7, P5, P6 (bench/SCALE.md) by their own programs: {figure: (command, rc, kept lines,
    seconds)}. A program that fails keeps its last lines instead, and the suite goes on."""
    build = os.path.dirname(os.path.dirname(herd))
    herdlet = os.path.join(build, "agent", "herdlet")
    fleet = os.path.join(build, "bench", "fleet", "fleet_sim")
    runs = []  # (figure, argv, the 1-node cluster of the suite's HERD_HOME it submits to)
    if args.p7_jobs > 0:
        name = f"hb{secrets.token_hex(2)}"
        runs.append(("P7", [sys.executable, os.path.join(REPO, "bench", "fleet", "exec_rate.py"),
                            "--cluster", name, "--jobs", str(args.p7_jobs)], name))
    if args.fleet_agents > 0:
        if os.access(fleet, os.X_OK):
            runs.append(("P5", [fleet, "--herdlet", herdlet, "--agents", str(args.fleet_agents)],
                         None))
        else:
            log(f"no {fleet} (ninja -C {build} fleet_sim): P5 skipped")
    if args.footprint_seconds > 0:
        runs.append(("P6", ["bash", os.path.join(REPO, "bench", "fleet", "agent_footprint.sh"),
                            build, str(args.footprint_seconds)], None))
    out = {}
    for figure, argv, cluster in runs:
        if cluster:
            env.launch(cluster, 1)
        secs, rc, text = env.run(argv, timeout=LAUNCH_TIMEOUT_S + 300, check=False,
                                 env=dict(env.env, HERD=herd, HERDLET=herdlet))
        if cluster:
            env.down(cluster)
        stripped = (ln.strip() for ln in text.splitlines())
        lines = [ln for ln in stripped
                 if (ln.startswith(SCALE_KEEP) or " x `herd exec" in ln) and
                 not ln.startswith("head: pid")]
        if rc not in (0, 1) or not lines:  # 1: a goal not met, still a measurement
            lines = text.strip().splitlines()[-15:]
        out[figure] = (" ".join(argv), rc, lines, secs)
        log(f"{figure}: rc={rc}, {secs:.0f} s")
    return out


def program_start_cost(runs=200):
    """Wall and CPU milliseconds per start of /bin/true, RUNS in a row. This VM's speed changes
    from day to day (the same build's cold 8-node launch took 5.7-8.6 s on different days), and
    program starts are what a cold launch and a burst of `herd exec` are made of: this figure, taken
    at the start and the end of a run, says which kind of day a report comes from."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    for _ in range(runs):
        subprocess.run(["/bin/true"], check=True)
    wall = (time.monotonic() - t0) / runs * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / runs * 1000
    return f"{wall:.2f} ms wall, {cpu:.2f} ms CPU per /bin/true ({runs} runs)"


def machine():
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = f.readline().split()[1]
    return (f"{socket.gethostname()}: {os.cpu_count()} CPUs ({model}), {int(mem) // 1024} MiB, "
            f"kernel {platform.release()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--herd", default=os.environ.get("HERD") or
                    os.path.join(REPO, "build", "controller", "herd"))
    ap.add_argument("--compare-herd", help="a second herd binary measured on the same cluster")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sizes", default="1,2,4,8", help="exec gang sizes (<= 8)")
    ap.add_argument("--launch-sizes", default="8,16,32,64")
    ap.add_argument("--relaunch-reps", type=int, default=5)
    ap.add_argument("--log-mb", type=int, default=32,
                    help="MiB each of the 8 ranks prints in the log throughput figure (0: skip)")
    ap.add_argument("--log-reps", type=int, default=3)
    ap.add_argument("--p7-jobs", type=int, default=1000,
                    help="`herd exec -d` jobs of the P7 figure, exec_rate.py (0: skip)")
    ap.add_argument("--fleet-agents", type=int, default=1000,
                    help="simulated agents of the P5 figure, fleet_sim (0: skip)")
    ap.add_argument("--footprint-seconds", type=int, default=30,
                    help="seconds the P6 figure watches an idle agent (0: skip)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    launch_sizes = [int(x) for x in args.launch_sizes.split(",") if x]
    if any(n < 1 or n > CLUSTER_NODES for n in sizes):
        ap.error(f"--sizes must be within 1..{CLUSTER_NODES}")
    herds = {"herd": os.path.abspath(args.herd)}
    if args.compare_herd:
        herds["herd-compare"] = os.path.abspath(args.compare_herd)
    for h in herds.values():
        if not os.access(h, os.X_OK):
            ap.error(f"{h} is not executable")
    if os.geteuid() != 0:
        ap.error("needs root (the local provider makes network namespaces)")
    for tool in ("ssh", "pdsh", "ip", "srun", "slurmctld", "slurmd", "munged", "nsenter"):
        if not shutil.which(tool):
            ap.error(f"{tool} is not installed (bench/run.sh installs it)")

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    workdir = tempfile.mkdtemp(prefix="herd-bench-")
    env = Env(herds["herd"], workdir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report = [f"# herd bench {stamp}", "", f"machine: {machine()}",
              f"herd: {herds['herd']}" + (f"; compare: {herds['herd-compare']}"
                                          if "herd-compare" in herds else ""),
              f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
              f"program start at the start: {program_start_cost()}", ""]
    results = {"exec": {}, "launch": {}}
    slurm = ssh = None
    code = 0
    try:
        # ---- cold launch vs N ----
        for n in launch_sizes:
            name = f"hb{secrets.token_hex(2)}"
            l0 = load()
            secs, phases = env.launch(name, n, "--", "true")
            results["launch"][n] = (secs, phases, l0, load())
            log(f"cold launch {n}: {secs:.2f} s {phases}")
            if n != CLUSTER_NODES or "main" in results:
                env.down(name)
            else:
                results["main"] = name
        if "main" not in results:
            name = f"hb{secrets.token_hex(2)}"
            env.launch(name, CLUSTER_NODES)
            results["main"] = name
        cluster = results["main"]
        nodes = env.nodes(cluster)
        ips = [n["ip"] for n in nodes]
        names = [n["name"] for n in nodes]
        namespaces = [f"herd-{cluster}-{i}" for i in range(len(nodes))]

        # ---- relaunch, nothing changed ----
        env.run([args.herd, "launch", "-c", cluster, "-y"], timeout=LAUNCH_TIMEOUT_S)
        l0 = load()
        rel = [env.run([args.herd, "launch", "-c", cluster, "-y"], timeout=LAUNCH_TIMEOUT_S)[0]
               for _ in range(args.relaunch_reps)]
        results["relaunch"] = (rel, l0, load())

        # ---- exec latency vs N, all methods interleaved ----
        slurm = Slurm(env.workdir, nodes, env.env,
                      [["nsenter", f"--net=/run/netns/{ns}"] for ns in namespaces])
        slurm.start()
        ssh = Ssh(env, cluster)
        bashrc_absent = ssh.bashrc_absent(ips)
        for n in sizes:
            gang_ips, gang_names = ips[:n], names[:n]
            methods = {k: (lambda h=h, n=n: env.run([h, "exec", cluster, "--num-nodes", str(n),
                                                      "--", "true"])[0])
                       for k, h in herds.items()}
            methods["srun"] = lambda: env.run(["srun", "-N", str(len(gang_names)), "-w",
                                               ",".join(gang_names), "true"],
                                              env=slurm.env_vars)[0]
            methods["pdsh"] = lambda: ssh.pdsh(gang_ips)
            methods["ssh-CM"] = lambda: ssh.fan_out(gang_ips)
            for f in methods.values():
                f()  # warm-up, excluded
            l0 = load()
            times = {k: [] for k in methods}
            for _ in range(args.reps):
                for k, f in methods.items():
                    times[k].append(f())
            results["exec"][n] = (times, l0, load())
            log(f"exec {n}: " + ", ".join(f"{k} {ms(statistics.median(v)):.1f} ms"
                                          for k, v in times.items()))
        # ---- log throughput, 8 ranks -> one terminal (P4) ----
        if args.log_mb > 0:
            results["logs"] = log_throughput(env, ssh, herds["herd"], cluster, ips, args.log_mb,
                                             args.log_reps)
        # ---- scale (P5-P7), on a machine without the figures' clusters and Slurm ----
        slurm.stop()
        slurm = None
        ssh.close(ips)
        ssh = None
        env.down_all()
        l0 = load()
        results["scale"] = (scale_figures(env, herds["herd"], args), l0, load())
        report += table(results, herds, bashrc_absent, args.reps)
    except BenchError as e:
        log(f"FAILED: {e}")
        code = 1
    except KeyboardInterrupt:
        log("interrupted")
        code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if slurm:
            slurm.stop()
        if ssh:
            ssh.close(ips)
        env.down_all()
        if code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"command log kept: {env.log_path}")
    if code:
        return code
    report.append(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report.append(f"program start at the end: {program_start_cost()}")
    text = "\n".join(report) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    md = os.path.join(args.out, f"{stamp}.md")
    with open(md, "w") as f:
        f.write(text)
    plots(results, herds, os.path.join(args.out, stamp))
    log(f"wrote {md}")
    return 0


def table(results, herds, bashrc_absent, reps):
    out = ["## exec: `true` on N nodes, median ms (warm; runs interleaved; "
           f"{reps} runs each, warm-up excluded)", ""]
    cols = list(next(iter(results["exec"].values()))[0].keys())
    out.append("| N | " + " | ".join(cols) + " | herd/srun | herd/ssh-CM | load |")
    out.append("|---|" + "---|" * (len(cols) + 3))
    for n, (times, l0, l1) in results["exec"].items():
        med = {k: statistics.median(v) for k, v in times.items()}
        out.append(f"| {n} | " + " | ".join(f"{ms(med[k]):.1f}" for k in cols) +
                   f" | {med['herd'] / med['srun']:.2f}x | {med['herd'] / med['ssh-CM']:.2f}x"
                   f" | {l0:.1f}-{l1:.1f} |")
    out += ["", "~/.bashrc on the nodes: " + ("absent (no figure includes it)" if bashrc_absent
                                              else "PRESENT (ssh and pdsh figures include it)"),
            "", "## cold launch: `herd launch --num-nodes N -- true` to the job's end, seconds", "",
            "| N | total | provisioned | ssh ready | agents installed | registered | job done "
            "| load |", "|---|---|---|---|---|---|---|---|"]
    for n, (secs, ph, l0, l1) in results["launch"].items():
        def at(prefix):
            for k, v in ph.items():
                if k.startswith(prefix):
                    return f"{v:.2f}"
            return "-"
        out.append(f"| {n} | {secs:.2f} | {at('Provisioning')} | {at('Waiting for SSH')} | "
                   f"{at('Bootstrapping')} | {at('Agents registered')} | {at('job finished')} | "
                   f"{l0:.1f}-{l1:.1f} |")
    rel, l0, l1 = results["relaunch"]
    out += ["", "(phase columns: seconds since the command started when that phase ended)", "",
            f"## relaunch of the UP {CLUSTER_NODES}-node cluster, nothing changed", "",
            f"median {ms(statistics.median(rel)):.0f} ms (min {ms(min(rel)):.0f}, max "
            f"{ms(max(rel)):.0f}) over {len(rel)} runs; load {l0:.1f}-{l1:.1f}", ""]
    if "logs" in results:
        hr, sr, tr, lines, failures, l0, l1, cpu = results["logs"]
        s = statistics.median(sr)
        t = statistics.median(tr)
        h = statistics.median(hr) if hr else None
        out += [f"## log throughput: {CLUSTER_NODES} ranks x {lines} lines of 100 bytes "
                f"({lines * 100 / 2**20:.0f} MiB each) to one terminal, lossless", "",
                "| herd exec | ssh -T (8 ControlMasters at once) | ssh -tt (the same, a pty each) "
                "| herd/ssh | herd/ssh -tt | load |",
                "|---|---|---|---|---|---|",
                f"| {f'{h:.0f} MiB/s' if h else 'no run completed'} | {s:.0f} MiB/s | "
                f"{t:.0f} MiB/s | {f'{h / s:.2f}x' if h else '-'} | "
                f"{f'{h / t:.2f}x' if h else '-'} | {l0:.1f}-{l1:.1f} |", "",
                f"(medians of the interleaved runs: herd " +
                (", ".join(f"{x:.0f}" for x in hr) or "none") + "; ssh " +
                ", ".join(f"{x:.0f}" for x in sr) + "; ssh -tt " +
                ", ".join(f"{x:.0f}" for x in tr) +
                " MiB/s; every line of every rank checked whole, exact counts)", "",
                "machine CPU seconds per GiB delivered (all processes, all "
                f"{os.cpu_count()} CPUs, busy time over the run; medians): herd " +
                (f"{statistics.median(cpu['herd']):.1f}" if cpu["herd"] else "-") +
                f", ssh -T {statistics.median(cpu['-T']):.1f}, ssh -tt "
                f"{statistics.median(cpu['-tt']):.1f}", ""]
        out += [f"herd run FAILED: {f}" for f in failures] + ([""] if failures else [])
    scale, l0, l1 = results.get("scale", ({}, 0, 0))
    if scale:
        out += ["## scale: P7 `herd exec -d` rate (with its anchor), P5 simulated agents against "
                "the head, P6 an idle agent (bench/SCALE.md)", "", f"load {l0:.1f}-{l1:.1f}", ""]
        for figure, (argv, rc, lines, secs) in scale.items():
            out += [f"{figure}: `{argv}` (rc {rc}, {secs:.0f} s)", "", "```", *lines, "```", ""]
    return out


def plots(results, herds, prefix):
    """prefix-exec.svg (median warm latency vs N, one line per tool) and prefix-launch.svg."""
    sizes = list(results["exec"].keys())
    tools = next(iter(results["exec"].values()))[0].keys()
    series = [(k, [(n, ms(statistics.median(results["exec"][n][0][k]))) for n in sizes])
              for k in tools]
    with open(prefix + "-exec.svg", "w") as f:
        f.write(svgplot.line_chart("`true` on N nodes (warm)", "nodes", "median latency, ms",
                                   series))
    ls = list(results["launch"].keys())
    if ls:
        with open(prefix + "-launch.svg", "w") as f:
            f.write(svgplot.line_chart("cold launch vs N (local provider)", "nodes",
                                       "seconds to the first job's end",
                                       [("herd launch (cold)",
                                         [(n, results["launch"][n][0]) for n in ls])]))


if __name__ == "__main__":
    sys.exit(main())
