#!/usr/bin/env python3
"""issue 22: the team API server (`herd-api`) under load, against a baseline of the same run.

Starts a server in a private home (SQLite) on a free loopback port, adds USERS users, logs each
in from a client home of its own, launches one 1-node local cluster per user through the server
(`herd launch -c NAME -y -- seq 1 1000`: job 1 leaves a log to read), then measures:

  (a) local vs remote: `herd status` and `herd queue NAME` of user 0, --reps times each, in local
      mode (HERD_API_SERVER=local, HOME/HERD_HOME = that user's home inside the server's home:
      the same state the server's commands use) and through the server, interleaved; p50/p90,
      ratio remote/local. Targets: remote p50 <= 2x local and < 30 ms. Then the same again with
      the server restarted with --warm-workers 0 (a `herd` process per read: the baseline the
      warm workers are measured against), without verdicts.
  (b) concurrency: C clients at once (--clients, a comma list) for --duration s, each looping
      over `herd status`, `herd queue NAME`, `herd logs NAME 1 --no-follow` of its user (client i
      is user i % USERS). Errors (non-zero exit or killed), p50/p99, the server's peak RSS (and,
      apart, its children's: the server runs every command as a `herd` child process). Targets:
      0 errors, p99 < 250 ms, server RSS < 300 MB. Three kinds of client (--client-kind): `http`,
      as the Python SDK talks to the server (POST /api/v1/run on a kept HTTPS connection; the
      clients are threads of a few processes of this script), `native`, the same exchanges from
      threads of one C++ process (bench/api_load: the clients' own CPU kept small), and `cli`, a
      `herd` process per command (its own process start and TLS handshake each time).
  (d) idle: the server's RSS and CPU time (utime+stime) over --idle-seconds with nothing asked of
      it, once right after it started and once after (b) and (c). Targets: RSS < 50 MB, CPU < 1 %
      of the interval.
  (c) exec flood: USERS x --exec-per-user `herd exec NAME -d -- true` through the server,
      --exec-pool CLI processes at a time, then each user's `herd queue NAME -o json`: every
      submission accepted once (the new job ids are exactly the ids the CLIs printed, one per
      submission, none twice, none missing).

Every client command is a real `herd` CLI process (the server runs reads in warm workers):
with many clients on a small machine the figures measure the machine's process starts as much as
the server, and the report says so. Commands are timed from start to the moment they are reaped
(a blocking waitpid; bench/suite.py wait_exact). Needs root (the local provider makes network
namespaces). Tears everything down at the end, also on failure or Ctrl-C/SIGTERM: each cluster's
`down` through the server, then locally as its user for whatever is left, the server's stop, the
temporary directory.

Usage: api_bench.py [--herd PATH] [--herd-api PATH] [--users 10] [--reps 50] [--clients 200]
       [--duration 60] [--client-kind http,cli] [--exec-per-user 100] [--exec-pool 50] [--idle-seconds 30]
       [--sections a,b,c,d] [--out bench/results]
"""
import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from suite import busy_cpu_seconds, machine  # noqa: E402

COMMAND_TIMEOUT = 120  # seconds; a client command still running then is killed and is an error
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[api-bench] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, p):
    """The p-th percentile (nearest rank) of VALUES."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def loadavg():
    return os.getloadavg()[0]


# Every client process this run started and has not reaped, so that an interrupt kills them;
# STOPPING, once set, keeps the client threads from starting more.
_live = set()
_live_lock = threading.Lock()
STOPPING = threading.Event()


def run(argv, env, timeout=COMMAND_TIMEOUT, stdin=None):
    """Runs ARGV to its end. Returns (exit code or None if killed at the timeout, seconds from
    start to reap, stdout, stderr). communicate() without a timeout blocks on the pipes and then
    on waitpid, so the time is not rounded up by polling; a timer kills a command that hangs."""
    t0 = time.perf_counter()
    with _live_lock:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL if stdin is None else stdin,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _live.add(p)
    expired = threading.Event()

    def kill():
        expired.set()
        try:
            p.kill()
        except OSError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    try:
        out, err = p.communicate()
    finally:
        timer.cancel()
        with _live_lock:
            _live.discard(p)
    dt = time.perf_counter() - t0
    code = None if expired.is_set() else p.returncode
    return code, dt, out.decode(errors="replace"), err.decode(errors="replace")


KIND_TEXT = {"http": "HTTP clients", "native": "native HTTP clients", "cli": "CLI clients"}
KIND_NOTE = {
    "http": "Each client is a thread with one kept HTTPS connection (TLS verified against the "
            "server's CA, the user's Bearer token), posting each command to /api/v1/run as the "
            "Python SDK does and reading the framed answer to its exit frame; a non-zero exit "
            "code or an HTTP error is an error. Each client connects and reads each command once "
            "before the timed period (untimed: the users' warm workers start then). The {clients} threads run in {procs} processes of this "
            "script, on the machine's {cpus} CPUs with the server, its workers and the clusters' "
            "agents.",
    "native": "The same exchanges as the HTTP clients (one kept HTTPS connection each, the "
              "framed answer read to its exit frame, connected and each command read once "
              "untimed), from "
              "bench/api_load: {clients} threads of one C++ process, timed from the request's "
              "first byte to the exit frame, so that the clients' own CPU on the machine's {cpus} "
              "CPUs is as small as a client's can be (the server's users are elsewhere).",
    "cli": "Every client command is a `herd` CLI process, and the server runs each read in a "
           "warm `herd _serve` worker of the user's (or a `herd` child when none is free, and "
           "always with --warm-workers 0): at {clients} clients on {cpus} CPUs the latencies "
           "include waiting for a CPU among that many client processes (each its own process "
           "start and TLS handshake) and the workers, not the server alone.",
}


class HttpClient:
    """One client of (b) that talks to the server as the SDK does, over one kept connection:
    POST /api/v1/run {"args": [...]}, the answer's frames `<tag> <len>\\n<bytes>` read to the end.
    run() returns what run() above returns for a CLI process: (exit code or None, seconds,
    stdout, stderr)."""

    def __init__(self, info, token):
        import http.client
        import ssl
        import urllib.parse
        self._http = http.client
        url = urllib.parse.urlsplit(info["endpoint"])
        self.host, self.port = url.hostname, url.port
        self.ctx = ssl.create_default_context(cafile=info["ca_cert"]) if url.scheme == "https" \
            else None
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = None

    def _connect(self):
        if self.ctx is not None:
            return self._http.HTTPSConnection(self.host, self.port, context=self.ctx,
                                              timeout=COMMAND_TIMEOUT)
        return self._http.HTTPConnection(self.host, self.port, timeout=COMMAND_TIMEOUT)

    def run(self, argv):
        t0 = time.perf_counter()
        body = json.dumps({"args": list(argv)}).encode()
        try:
            if self.conn is None:
                self.conn = self._connect()
            self.conn.request("POST", "/api/v1/run", body=body, headers=self.headers)
            resp = self.conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                return resp.status, time.perf_counter() - t0, "", data.decode(errors="replace")
        except (OSError, self._http.HTTPException) as e:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return None, time.perf_counter() - t0, "", f"{type(e).__name__}: {e}"
        out, err, code, i = [], [], None, 0
        while i < len(data):
            nl = data.index(b"\n", i)
            tag, n = data[i:nl].split(b" ")
            payload = data[nl + 1:nl + 1 + int(n)]
            i = nl + 1 + int(n)
            if tag == b"O":
                out.append(payload)
            elif tag == b"E":
                err.append(payload)
            elif tag == b"X":
                code = int(payload)
        return (code, time.perf_counter() - t0, b"".join(out).decode(errors="replace"),
                b"".join(err).decode(errors="replace"))


OPS = ("status", "queue", "logs")


def read_argv(op, cluster):
    """The words of read OP of (b) on CLUSTER."""
    return {"status": ("status",), "queue": ("queue", cluster),
            "logs": ("logs", cluster, "1", "--no-follow")}[op]


def client_loop(deadline, cluster, seed, run_argv, lat, errors, lock):
    """One client of (b): until DEADLINE, one of the three reads at random (its user's cluster
    CLUSTER), each timed; RUN_ARGV runs the words and returns what run() returns."""
    rnd = random.Random(seed)
    while time.perf_counter() < deadline and not STOPPING.is_set():
        op = rnd.choice(OPS)
        code, dt, out, err = run_argv(read_argv(op, cluster))
        with lock:
            if code == 0:
                lat[op].append(dt * 1000)
            else:
                errors.append((op, code, err.strip().splitlines()[-1:] or [""]))


def http_clients_main():
    """--http-clients: the HTTP clients of (b) given on stdin as JSON ({info, duration, clients:
    [[token, cluster, seed], ...]}), each a thread with its own kept connection; prints
    {lat: {op: [ms, ...]}, errors: [[op, code, [line]], ...]}."""
    spec = json.load(sys.stdin)
    lat = {op: [] for op in OPS}
    errors = []
    lock = threading.Lock()
    signal.signal(signal.SIGTERM, lambda *_: STOPPING.set())
    # Each client connects (TLS handshake) and reads each command once, untimed, before the timed
    # loop of every client of this process starts at once: the figures are of connected clients
    # whose users' warm workers (one per distinct read) have started.
    ready = threading.Barrier(len(spec["clients"]) + 1)
    start = {}

    def one(token, cluster, seed):
        http = HttpClient(spec["info"], token)
        for op in OPS:
            http.run(read_argv(op, cluster))
        ready.wait()
        client_loop(start["deadline"], cluster, seed, http.run, lat, errors, lock)

    threads = [threading.Thread(target=one, args=tuple(c), daemon=True) for c in spec["clients"]]
    for t in threads:
        t.start()
    start["deadline"] = time.perf_counter() + spec["duration"]
    ready.wait()
    for t in threads:
        t.join()
    json.dump({"lat": lat, "errors": errors}, sys.stdout)


def attempt(what, fn):
    """Runs one teardown step; a failure is logged and the teardown goes on."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - every step must get its chance
        log(f"teardown: {what} failed: {e}")


def copy_binaries(args, dest):
    """Copies herd, herd-api and the agent into DEST in the build's layout (herd-api finds herd in
    its parent directory, herd the agent in ../agent), so that a rebuild during the run does not
    swap a binary under it."""
    herdlet = args.herdlet
    if not herdlet:
        agent = os.path.join(os.path.dirname(os.path.dirname(args.herd)), "agent")
        for cand in (os.path.join(os.path.dirname(args.herd), "herdlet"),
                     os.path.join(agent, "herdlet.upload"), os.path.join(agent, "herdlet")):
            if os.access(cand, os.X_OK):
                herdlet = cand
                break
    if not herdlet:
        raise SystemExit("api_bench.py: no herdlet next to herd; pass --herdlet")
    os.makedirs(os.path.join(dest, "controller", "server"))
    os.makedirs(os.path.join(dest, "agent"))
    copies = {"herd": os.path.join(dest, "controller", "herd"),
              "herd_api": os.path.join(dest, "controller", "server", "herd-api"),
              "herdlet": os.path.join(dest, "agent", "herdlet.upload")}
    for key, to in copies.items():
        src = herdlet if key == "herdlet" else getattr(args, key)
        # A binary being relinked is briefly not executable, or still growing: wait (bounded)
        # until it is executable and its size holds for a second.
        for _ in range(120):
            size = os.stat(src).st_size if os.access(src, os.X_OK) else -1
            time.sleep(1)
            if size >= 0 and os.access(src, os.X_OK) and os.stat(src).st_size == size:
                break
        else:
            raise SystemExit(f"api_bench.py: {src} did not settle as an executable in 120 s")
        shutil.copy2(src, to)
        st = os.stat(to)
        with open(to, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
        args.identity = getattr(args, "identity", []) + [
            f"{os.path.basename(to)} {time.strftime('%H:%M:%S', time.gmtime(st.st_mtime))} "
            f"sha256 {digest}"]
    sources = (args.herd, args.herd_api, herdlet)
    args.herd, args.herd_api, args.herdlet = copies["herd"], copies["herd_api"], copies["herdlet"]
    return sources


def pooled(fn, items, workers):
    """[fn(item) for item in items], WORKERS at a time; on an error or an interrupt the items not
    started yet are dropped (not run while the teardown waits)."""
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        results = list(pool.map(fn, items))
    except BaseException:
        STOPPING.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def alive(pid):
    """PID exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_live():
    with _live_lock:
        procs = list(_live)
    for p in procs:
        try:
            p.kill()
        except OSError:
            pass


# ---- /proc readings of the server and its children


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid):
    """utime + stime of PID, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_by_process():
    """{pid: (program, utime + stime seconds)} of every process now; the program is its command
    name, with `herd`'s first argument when it is an internal verb (`herd _serve`: a warm worker,
    `herd _mux`). Children a process reaped are not counted in (init reaps every orphan)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
            name = head.split("(", 1)[1]
            fields = rest.split()
            cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
            if name == "herd":
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if len(argv) > 1 and argv[1].startswith(b"_"):
                    name = "herd " + argv[1].decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(d)] = (name, cpu)
    return out


def cpu_by_program(before, after):
    """CPU seconds by program between two cpu_by_process() snapshots: processes alive at both
    counted by their difference, those started since by all they used (those that ended between
    are not seen)."""
    by = {}
    for pid, (name, cpu) in after.items():
        was = before.get(pid)
        used = cpu - was[1] if was and was[0] == name else cpu
        by[name] = by.get(name, 0.0) + used
    return by


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


class Sampler:
    """Samples every 50 ms: the server's RSS, and the number and summed RSS of its descendants
    (the `herd` commands it runs for the users). Peaks only."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_server_kb = 0
        self.peak_children_kb = 0
        self.peak_one_child_kb = 0
        self.peak_children = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.peak_server_kb = max(self.peak_server_kb, rss_kb(self.pid))
            kids = descendants(self.pid)
            sizes = [rss_kb(k) for k in kids]
            self.peak_children = max(self.peak_children, len(kids))
            self.peak_children_kb = max(self.peak_children_kb, sum(sizes))
            self.peak_one_child_kb = max([self.peak_one_child_kb] + sizes)
            self.samples += 1
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# ---- the server, its users and their clients


class Bench:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="herd-apibench-")
        os.chmod(self.dir, 0o700)
        self.home = os.path.join(self.dir, "api")
        try:
            self.sources = copy_binaries(args, os.path.join(self.dir, "bin"))
            self.version = subprocess.run([args.herd, "--version"], capture_output=True,
                                          text=True, check=True).stdout.strip()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.port = free_port()
        self.base_env = dict(os.environ, HERD_API_BINARY=args.herd_api)
        self.base_env.pop("NO_COLOR", None)
        for k in ("HERD_API_SERVER", "HERD_API_TOKEN", "HERD_API_CA_CERT"):
            self.base_env.pop(k, None)
        if args.herdlet:
            self.base_env["HERDLET_BINARY"] = args.herdlet
        self.admin = self.client_env("admin")
        self.users = [f"u{i:02d}" for i in range(args.users)]
        self.clusters = {u: f"apib{os.getpid() % 1000:03d}{i:02d}" for i, u in
                         enumerate(self.users)}
        self.clients = {}  # user -> env of a client logged in as that user
        self.tokens = {}  # user -> that user's token (HTTP clients of (b))
        self.launched = []  # users whose launch was attempted
        self.server_pid = None
        self.stop_note = "the server was not stopped by `herd api stop`"
        self.started = False
        self.report = []
        self.verdicts = []  # (target, measured, PASS/FAIL)

    def client_env(self, name):
        d = os.path.join(self.dir, "clients", name)
        os.makedirs(os.path.join(d, "home"), exist_ok=True)
        return dict(self.base_env, HOME=os.path.join(d, "home"), HERD_HOME=os.path.join(d, "herd"))

    def local_env(self, user):
        """The user's own state inside the server's home, in local mode: what the server's
        commands for that user read and write."""
        uhome = os.path.join(self.home, "users", user)
        return dict(self.base_env, HOME=uhome, HERD_HOME=os.path.join(uhome, "herd"),
                    HERD_API_SERVER="local")

    def herd(self, env, *args, timeout=COMMAND_TIMEOUT, check=True):
        code, dt, out, err = run([self.args.herd, *args], env, timeout)
        if check and code != 0:
            raise RuntimeError(f"herd {' '.join(args)} exited {code}\nstdout: {out[-2000:]}\n"
                               f"stderr: {err[-2000:]}")
        return code, dt, out, err

    def start(self):
        log(f"server home {self.home}, port {self.port}")
        self.started = True
        self.herd(self.admin, "api", "start", "--home", self.home, "--port", str(self.port),
                  timeout=60)
        info = json.loads(self.herd(self.admin, "api", "status", "--home", self.home, "-o",
                                    "json")[2])
        self.info = info
        self.server_pid = int(info["pid"])
        self.rss_at_start_kb = rss_kb(self.server_pid)
        with open(info["admin_token"]) as f:
            token = f.read().strip()
        self.herd(self.admin, "api", "login", "-e", info["endpoint"], "--token", token,
                  "--ca-cert", info["ca_cert"])
        for u in self.users:
            added = json.loads(self.herd(self.admin, "api", "users", "add", u, "-o", "json")[2])
            self.tokens[u] = added["token"]
            env = self.client_env(u)
            self.herd(env, "api", "login", "-e", info["endpoint"], "--token", added["token"],
                      "--ca-cert", info["ca_cert"])
            self.clients[u] = env

    def launch_clusters(self):
        t0 = time.time()

        def one(u):
            self.launched.append(u)
            self.herd(self.clients[u], "launch", "-c", self.clusters[u], "-y", "--", "seq", "1",
                      "1000", timeout=300)

        # Two at a time: a launch is mostly process starts and this machine may have few CPUs.
        pooled(one, self.users, 2)
        log(f"{len(self.users)} 1-node clusters launched through the server in "
            f"{time.time() - t0:.1f} s")

    def verdict(self, what, measured, ok):
        self.verdicts.append((what, measured, "PASS" if ok else "FAIL"))

    # ---- (a)

    def restart(self, *extra):
        """The server stopped and started again on the same home and port (same users, tokens,
        clusters), with extra `herd api start` flags."""
        self.herd(self.admin, "api", "stop", "--home", self.home, timeout=60)
        self.herd(self.admin, "api", "start", "--home", self.home, "--port", str(self.port),
                  *extra, timeout=60)
        info = json.loads(self.herd(self.admin, "api", "status", "--home", self.home, "-o",
                                    "json")[2])
        self.server_pid = int(info["pid"])

    def local_vs_remote(self):
        # Reads through the server as it runs by default (warm workers), then through the same
        # server restarted with --warm-workers 0 (a `herd` child per read, as before warm
        # workers), each interleaved with local mode.
        self.local_vs_remote_with("warm workers (default)")
        self.restart("--warm-workers", "0")
        try:
            self.local_vs_remote_with("--warm-workers 0", verdicts=False)
        finally:
            self.restart()

    def local_vs_remote_with(self, server_mode, verdicts=True):
        u = self.users[0]
        name = self.clusters[u]
        local, remote = self.local_env(u), self.clients[u]
        rows = []
        load0 = loadavg()
        cpu0 = cpu_seconds(self.server_pid)
        remote_runs = 0
        for label, args in (("status", ("status",)), ("queue", ("queue", name))):
            times = {"local": [], "remote": []}
            for mode, env in (("local", local), ("remote", remote)):  # warm-up, not counted
                self.herd(env, *args)
            for _ in range(self.args.reps):
                for mode, env in (("local", local), ("remote", remote)):
                    times[mode].append(self.herd(env, *args)[1] * 1000)
            remote_runs += self.args.reps + 1
            lp50, rp50 = pct(times["local"], 50), pct(times["remote"], 50)
            rows.append((f"`herd {' '.join(args[:1])}{' NAME' if len(args) > 1 else ''}`",
                         lp50, pct(times["local"], 90), rp50, pct(times["remote"], 90),
                         rp50 / lp50))
            if verdicts:
                self.verdict(f"(a) {label}: remote p50 <= 2x local", f"{rp50 / lp50:.2f}x",
                             rp50 <= 2 * lp50)
                self.verdict(f"(a) {label}: remote p50 < 30 ms", f"{rp50:.1f} ms", rp50 < 30)
        self.report += [
            f"## (a) local vs through the server ({server_mode}): user {u}'s 1-node cluster, "
            "the same state",
            "",
            f"{self.args.reps} runs each after one warm-up, local and remote interleaved; ms, "
            "from the CLI's start to its reap; load "
            f"{load0:.1f}-{loadavg():.1f}",
            "",
            "| command | local p50 | local p90 | remote p50 | remote p90 | remote/local (p50) |",
            "|---|---|---|---|---|---|",
        ] + [f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.2f}x |"
             for r in rows] + [
            "",
            "the server's own CPU time (not its `herd` children's) per remote command: "
            f"{1000 * (cpu_seconds(self.server_pid) - cpu0) / remote_runs:.1f} ms",
            ""]

    # ---- (b)

    def concurrency(self, clients, kind):
        lat = {op: [] for op in OPS}
        errors = []
        lock = threading.Lock()

        def client(i):
            u = self.users[i % len(self.users)]
            env = self.clients[u]
            client_loop(time.perf_counter() + self.args.duration, self.clusters[u], i,
                        lambda argv: run([self.args.herd, *argv], env), lat, errors, lock)

        def client_process(share, command=(sys.executable, os.path.abspath(__file__),
                                           "--http-clients")):
            # HTTP clients run as threads of a few processes of this script (--http-clients),
            # so that one interpreter lock does not stand between 200 clients and their answers.
            spec = {"info": {"endpoint": self.info["endpoint"], "ca_cert": self.info["ca_cert"]},
                    "duration": self.args.duration,
                    "clients": [[self.tokens[self.users[i % len(self.users)]],
                                 self.clusters[self.users[i % len(self.users)]], i]
                                for i in share]}
            with _live_lock:
                p = subprocess.Popen(list(command), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
                _live.add(p)
            try:
                out, _ = p.communicate(json.dumps(spec).encode(),
                                       timeout=self.args.duration + COMMAND_TIMEOUT + 30)
            finally:
                with _live_lock:
                    _live.discard(p)
            got = json.loads(out)
            with lock:
                for op, v in got["lat"].items():
                    lat[op] += v
                errors.extend(tuple(e) for e in got["errors"])

        if kind == "http":
            nproc = max(1, min(2 * os.cpu_count(), clients // 25))
            work = [(client_process, [list(range(k, clients, nproc))]) for k in range(nproc)]
        elif kind == "native":
            # One process of bench/api_load (C++ threads, no interpreter lock) for every client.
            work = [(client_process, [list(range(clients)), (self.args.api_load,)])]
        else:
            work = [(client, [i]) for i in range(clients)]
        load0 = loadavg()
        cpu0 = cpu_seconds(self.server_pid)
        busy0 = busy_cpu_seconds()
        procs0 = cpu_by_process()
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        with Sampler(self.server_pid) as s:
            threads = [threading.Thread(target=fn, args=a, daemon=True) for fn, a in work]
            self.threads = threads
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        wall = time.perf_counter() - t0
        programs = cpu_by_program(procs0, cpu_by_process())
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The clients' processes end within the period: their CPU, reaped by this script.
        programs[f"the {kind} clients (reaped)"] = (kids.ru_utime - kids0.ru_utime +
                                                     kids.ru_stime - kids0.ru_stime)
        cpu = cpu_seconds(self.server_pid) - cpu0
        busy = busy_cpu_seconds() - busy0
        every = lat["status"] + lat["queue"] + lat["logs"]
        n = len(every) + len(errors)
        p99 = pct(every, 99)
        self.report += [
            f"## (b) {clients} concurrent {KIND_TEXT[kind]} for {self.args.duration} s "
            "(status / queue NAME / logs NAME 1 --no-follow, chosen at random)",
            "",
            f"commands finished: {n} in {wall:.1f} s ({n / wall:.1f}/s), errors: {len(errors)}; "
            f"load {load0:.1f}-{loadavg():.1f}; server CPU {cpu:.1f} s "
            f"({100 * cpu / wall:.0f} % of one CPU, {1000 * cpu / max(n, 1):.1f} ms per command; "
            "its `herd` children not included); the whole machine was busy "
            f"{busy:.1f} CPU-s of {wall * os.cpu_count():.1f} ({1000 * busy / max(n, 1):.0f} ms "
            "per command, everything running on it included)",
            "",
            "| command | runs | p50 ms | p90 ms | p99 ms | max ms |",
            "|---|---|---|---|---|---|",
        ] + [f"| {op} | {len(v)} | {pct(v, 50):.1f} | {pct(v, 90):.1f} | {pct(v, 99):.1f} | "
             f"{max(v) if v else float('nan'):.1f} |" for op, v in
             list(lat.items()) + [("all", every)]] + [
            "",
            f"server RSS peak {s.peak_server_kb / 1024:.1f} MB; its `herd` children: at most "
            f"{s.peak_children} at once, {s.peak_children_kb / 1024:.1f} MB together at the "
            f"peak, {s.peak_one_child_kb / 1024:.1f} MB the largest ({s.samples} samples, "
            "every 50 ms)",
        ]
        top = sorted(programs.items(), key=lambda kv: -kv[1])[:12]
        self.report += [
            "", "CPU by program over the period (/proc utime+stime; processes that began and "
            "ended within it not seen, but for the clients, reaped by the bench):", "",
            "| program | CPU-s | ms per command |", "|---|---|---|"] + [
            f"| `{name}` | {sec:.1f} | {1000 * sec / max(n, 1):.2f} |" for name, sec in top
            if sec >= 0.05]
        if errors:
            kinds = {}
            for op, code, last in errors:
                kinds.setdefault((op, code, last[0][:200]), 0)
                kinds[(op, code, last[0][:200])] += 1
            self.report += ["", "errors (command, exit code or None if killed at "
                            f"{COMMAND_TIMEOUT} s, last stderr line, count):", ""]
            self.report += [f"- {op} exit {code}: `{line}` x{c}"
                            for (op, code, line), c in sorted(kinds.items(), key=str)[:20]]
        self.report += ["", KIND_NOTE[kind].format(clients=clients, cpus=os.cpu_count(), procs=len(work)), ""]
        tag = f"(b) {kind} C={clients}"
        self.verdict(f"{tag}: 0 errors", str(len(errors)), not errors)
        self.verdict(f"{tag}: p99 < 250 ms", f"{p99:.1f} ms", p99 < 250)
        self.verdict(f"{tag}: server RSS < 300 MB", f"{s.peak_server_kb / 1024:.1f} MB",
                     s.peak_server_kb < 300 * 1024)

    # ---- (c)

    def queue_ids(self, u):
        code, _, out, err = self.herd(self.clients[u], "queue", self.clusters[u], "-o", "json")
        if "not shown" in err:
            raise RuntimeError(f"queue of {u} left jobs out: {err.strip()}")
        return [int(j["id"]) for j in json.loads(out)]

    def exec_flood(self):
        per = self.args.exec_per_user
        before = {u: self.queue_ids(u) for u in self.users}
        work = [(u, k) for k in range(per) for u in self.users]
        printed = {u: [] for u in self.users}
        failures = []
        lock = threading.Lock()
        pattern = re.compile(r"Job submitted, ID: (\d+)")

        def one(item):
            u, _ = item
            if STOPPING.is_set():
                raise KeyboardInterrupt
            code, dt, out, err = run([self.args.herd, "exec", self.clusters[u], "-d", "--",
                                      "true"], self.clients[u])
            m = pattern.search(err) or pattern.search(out)
            with lock:
                if code == 0 and m:
                    printed[u].append(int(m.group(1)))
                else:
                    failures.append((u, code, (err.strip().splitlines() or [""])[-1][:200]))
            return dt * 1000

        load0 = loadavg()
        cpu0 = cpu_seconds(self.server_pid)
        busy0 = busy_cpu_seconds()
        t0 = time.perf_counter()
        with Sampler(self.server_pid) as s:
            times = pooled(one, work, self.args.exec_pool)
        wall = time.perf_counter() - t0
        busy = busy_cpu_seconds() - busy0
        rows, ok_all = [], True
        for u in self.users:
            after = self.queue_ids(u)
            new = [i for i in after if i not in set(before[u])]
            dup_queue = len(after) != len(set(after))
            dup_printed = len(printed[u]) != len(set(printed[u]))
            lost = sorted(set(printed[u]) - set(new))
            extra = sorted(set(new) - set(printed[u]))
            ok = (len(new) == per and len(printed[u]) == per and not dup_queue and
                  not dup_printed and not lost and not extra)
            ok_all &= ok
            twice = "yes" if dup_queue or dup_printed else "no"
            rows.append(f"| {u} | {len(printed[u])} | {len(new)} | {len(set(new))} | "
                        f"{len(lost)} | {len(extra)} | {twice} | {'ok' if ok else 'MISMATCH'} |")
        n = len(work)
        self.report += [
            f"## (c) exec flood: {len(self.users)} users x {per} `herd exec NAME -d -- true` "
            f"through the server, {self.args.exec_pool} CLIs at a time",
            "",
            f"{n} submissions in {wall:.1f} s ({n / wall:.1f}/s accepted), failed: "
            f"{len(failures)}; CLI time p50 {pct(times, 50):.0f} ms, p99 {pct(times, 99):.0f} ms;"
            f" load {load0:.1f}-{loadavg():.1f}; server RSS peak {s.peak_server_kb / 1024:.1f} MB,"
            f" its `herd` children at most {s.peak_children} at once "
            f"({s.peak_children_kb / 1024:.1f} MB together); the server's own CPU "
            f"{1000 * (cpu_seconds(self.server_pid) - cpu0) / n:.1f} ms per submission, the whole"
            f" machine's {1000 * busy / n:.0f} ms (busy {busy:.1f} of "
            f"{wall * os.cpu_count():.1f} CPU-s)",
            "",
            "| user | ids printed | new jobs in queue | distinct | printed but not queued | "
            "queued but not printed | any id twice | |",
            "|---|---|---|---|---|---|---|---|",
        ] + rows + [""]
        if failures:
            self.report += ["failed submissions (user, exit code, last stderr line):", ""]
            self.report += [f"- {u} exit {c}: `{line}`" for u, c, line in failures[:20]] + [""]
        self.verdict("(c) every submission accepted exactly once (none failed, lost or doubled)",
                     f"{n - len(failures)}/{n} accepted", ok_all and not failures)

    # ---- (d)

    def idle(self, when):
        secs = self.args.idle_seconds
        rss0 = rss_kb(self.server_pid)
        cpu0 = cpu_seconds(self.server_pid)
        t0 = time.perf_counter()
        time.sleep(secs)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(self.server_pid) - cpu0
        rss1 = rss_kb(self.server_pid)
        share = 100 * cpu / wall
        self.report += [
            f"## (d) idle, {when}: {secs} s with no client",
            "",
            f"server RSS {rss0 / 1024:.1f} MB at the start of the interval, {rss1 / 1024:.1f} MB "
            f"at its end; CPU time (utime+stime) {cpu * 1000:.0f} ms over {wall:.1f} s = "
            f"{share:.2f} % (clock tick {1000 / CLK_TCK:.0f} ms)",
            "",
        ]
        self.verdict(f"(d) idle {when}: RSS < 50 MB", f"{rss1 / 1024:.1f} MB", rss1 < 50 * 1024)
        self.verdict(f"(d) idle {when}: CPU < 1 % of {secs} s", f"{share:.2f} %", share < 1)

    # ---- teardown

    def close(self):
        log("tearing down")
        STOPPING.set()
        kill_live()
        for t in getattr(self, "threads", []):  # each ends at its next command (killed above)
            t.join(timeout=COMMAND_TIMEOUT)
        kill_live()
        def down(u):
            code, _, _, err = self.herd(self.clients[u], "down", self.clusters[u], "-y",
                                        timeout=300, check=False)
            if code != 0:
                log(f"down {self.clusters[u]} through the server exited {code}: "
                    f"{(err.strip().splitlines() or [''])[-1][:300]}")

        for u in self.launched:
            if u in self.clients:
                attempt(f"down {self.clusters[u]} through the server", lambda: down(u))
        if self.started:
            def stop():
                code, dt, _, err = self.herd(self.admin, "api", "stop", "--home", self.home,
                                             timeout=60, check=False)
                # `herd api stop` sends SIGTERM, waits up to 15 s (kApiServerStopTimeout), then
                # SIGKILLs: a stop that took that long did not end the server by SIGTERM.
                self.stop_note = (f"`herd api stop` exited {code} after {dt:.1f} s"
                                  + (f" ({err.strip().splitlines()[-1]})" if err.strip() else ""))
                log(self.stop_note)
            attempt("api stop", stop)
        # What a down through the server left (or a server that never answered): each user's
        # clusters, locally, as that user.
        users_dir = os.path.join(self.home, "users")
        if os.path.isdir(users_dir):
            for u in os.listdir(users_dir):
                env = self.local_env(u)
                try:
                    code, _, out, _ = self.herd(env, "status", "-o", "json", check=False)
                    names = [c["name"] for c in json.loads(out)] if code == 0 else []
                except (OSError, ValueError) as e:
                    log(f"status of {u} locally: {e}")
                    names = []
                for name in names:
                    log(f"down {name} locally as {u}")
                    attempt(f"down {name} locally",
                            lambda: self.herd(env, "down", name, "-y", timeout=300, check=False))
        if self.server_pid:
            for _ in range(50):  # a SIGKILLed server may take a moment to be gone
                if not alive(self.server_pid):
                    break
                time.sleep(0.1)
            try:
                if not alive(self.server_pid):
                    raise ProcessLookupError
                log(f"server {self.server_pid} still alive after stop: SIGKILL")
                os.kill(self.server_pid, signal.SIGKILL)
            except OSError:
                pass
        self.sweep()
        shutil.rmtree(self.dir, ignore_errors=True)
        left = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout.split() if "apib" in n]
        if left:
            log(f"WARNING: namespaces left: {left}")


    def sweep(self):
        """Kills what this run started and left running: processes whose command line names its
        temporary directory (an ssh ControlMaster a command killed by the interrupt left, a
        cluster's mux), one by one by pid."""
        me = os.getpid()
        for pid in [int(d) for d in os.listdir("/proc") if d.isdigit()]:
            if pid == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().decode(errors="replace")
            except OSError:
                continue
            if self.dir in cmdline:
                log(f"killing {pid} left running: {cmdline.replace(chr(0), ' ')[:160]}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def main():
    if sys.argv[1:] == ["--http-clients"]:
        return http_clients_main()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    build = os.path.join(REPO, "build")
    ap.add_argument("--herd", default=os.environ.get("HERD") or
                    os.path.join(build, "controller", "herd"))
    ap.add_argument("--herd-api", default=os.environ.get("HERD_API_BINARY") or
                    os.path.join(build, "controller", "server", "herd-api"))
    ap.add_argument("--herdlet", default=os.environ.get("HERDLET_BINARY"),
                    help="the agent binary (default: found next to herd by herd itself)")
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50, help="(a) runs of each command per mode")
    ap.add_argument("--clients", default="200", help="(b) concurrent clients, a comma list")
    ap.add_argument("--duration", type=int, default=60, help="(b) seconds per client count")
    ap.add_argument("--client-kind", default="http,cli",
                    help="(b) http (connections of one process, as the SDK), native (the same "
                    "exchanges from bench/api_load, threads of one C++ process: `ninja -C build "
                    "api_load`), cli (a `herd` process per command), a comma list")
    ap.add_argument("--api-load", default=os.environ.get("HERD_API_LOAD") or
                    os.path.join(build, "bench", "api_load"),
                    help="the native clients' binary (for --client-kind native)")
    ap.add_argument("--exec-per-user", type=int, default=100)
    ap.add_argument("--exec-pool", type=int, default=50)
    ap.add_argument("--idle-seconds", type=int, default=30)
    ap.add_argument("--sections", default="a,b,c,d")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("api_bench.py: needs root (the local provider makes network namespaces)")
    if "native" in args.client_kind.split(",") and not os.access(args.api_load, os.X_OK):
        raise SystemExit(f"api_bench.py: no {args.api_load} for --client-kind native "
                         "(ninja -C build api_load, or --api-load PATH)")
    for p in (args.herd, args.herd_api):
        if not os.path.isfile(p):
            raise SystemExit(f"api_bench.py: no {p}")
    args.herd = os.path.abspath(args.herd)
    args.herd_api = os.path.abspath(args.herd_api)
    sections = set(args.sections.split(","))
    clients = [int(c) for c in args.clients.split(",") if c]

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    b = Bench(args)
    t_start = time.time()
    load_start = os.getloadavg()
    ok = False
    try:
        b.start()
        if "d" in sections:
            log("(d) idle after start")
            b.idle("right after start")
        b.launch_clusters()
        if "a" in sections:
            log("(a) local vs remote")
            b.local_vs_remote()
        if "b" in sections:
            for kind in args.client_kind.split(","):
                for c in clients:
                    log(f"(b) {c} {kind} clients for {args.duration} s")
                    b.concurrency(c, kind)
        if "c" in sections:
            log("(c) exec flood")
            b.exec_flood()
        if "d" in sections and ("b" in sections or "c" in sections):
            log("(d) idle after load")
            b.idle("after the load")
        ok = True
    finally:
        try:
            b.close()
        finally:
            head = [
                f"# herd api bench {stamp}",
                "",
                f"machine: {machine()}",
                f"binaries (copied for the run): herd {b.sources[0]} ({b.version}), herd-api "
                f"{b.sources[1]}, herdlet {b.sources[2]} (built at, UTC: "
                f"{'; '.join(getattr(args, 'identity', []))})",
                f"command: {' '.join(sys.argv)}",
                f"load average at start: {' '.join(f'{x:.2f}' for x in load_start)}; at the "
                f"end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; run took "
                f"{time.time() - t_start:.0f} s" + ("" if ok else "; THE RUN FAILED OR WAS "
                                                     "INTERRUPTED: figures are partial"),
                f"users {args.users}, one 1-node local cluster each; server RSS right after "
                f"start: {getattr(b, 'rss_at_start_kb', 0) / 1024:.1f} MB; at the end "
                f"{b.stop_note}",
                "",
                "| target | measured | |",
                "|---|---|---|",
            ] + [f"| {w} | {m} | {v} |" for w, m, v in b.verdicts] + [""]
            text = "\n".join(head + b.report) + "\n"
            if b.verdicts or b.report:
                os.makedirs(args.out, exist_ok=True)
                path = os.path.join(args.out, f"api-{stamp}.md")
                with open(path, "w") as f:
                    f.write(text)
                log(f"wrote {path}")
            print(text)


if __name__ == "__main__":
    main()
