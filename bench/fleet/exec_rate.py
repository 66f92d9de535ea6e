#!/usr/bin/python3
"""issue 8 P7: 1000 `herd exec -d` jobs, >= 100 jobs/s accepted and scheduled.

Starts a head and one worker from the real binaries on 127.0.60.11-12 (tests/integration's
LoopbackCluster, real certificates), then runs JOBS times `herd exec --endpoint ... -d -- true`
(the real CLI, one process per job, PARALLEL at a time) and reports:
  accepted/s   jobs / wall time of all CLI runs (each returns once the head replied with the id)
  scheduled/s  head side: jobs / (last started_at - first submitted_at), from `herd queue -o json`
The worker declares enough CPUs for every job to be placed at once (the rate of the head, not of
the node's capacity). Usage: exec_rate.py [--jobs N] [--parallel P]; HERD/HERDLET name the binaries.

The anchor, measured in the same run (--floor-jobs, 0 to skip): the same number of jobs made of
nothing but the programs every `herd exec -d -- true` job starts, driven the same way: `herd
--version` (the CLI's start and exit) and herd-step, the job-process supervisor, with its pty,
log and exit record, running the job's `/bin/bash`, which starts the CLI. No agent, message or
mux. Both print the machine's busy CPU per job (/proc/stat).

--cluster NAME instead runs `herd exec NAME -d -- true` against an UP cluster of the caller's
HERD_HOME (made with `herd launch`): the path a user's commands take, through the cluster's kept
forward and its mux (docs/ARCHITECTURE.md). Its nodes have the CPUs they have, so jobs may wait for
earlier ones to end: "scheduled" is then the node's rate, not the head's.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "integration"))
import loopback_cluster  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from suite import busy_cpu_seconds, program_start_cost, wait_exact  # noqa: E402


def run_exact(cmd):
    """Runs CMD to its end, seen when it happens (bench/suite.py wait_exact, which also kills a
    command that hangs). Returns (returncode, stderr)."""
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        rc = wait_exact([p], 120)[0]
        err.seek(0)
        return rc, err.read().decode(errors="replace")


def step_program():
    """herd-step of the build HERDLET comes from ($HERD_STEP overrides)."""
    path = os.environ.get("HERD_STEP") or os.path.join(
        os.path.dirname(shutil.which(loopback_cluster.HERDLET) or loopback_cluster.HERDLET),
        "process", "herd-step")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"exec_rate.py: no herd-step at {path} (set HERD_STEP)")
    return path


def floor(jobs, parallel):
    """JOBS jobs of program starts alone (see the module's doc): (jobs/s, busy CPU ms per job)."""
    step = step_program()
    d = tempfile.mkdtemp(prefix="herd-p7-floor-")
    try:
        # One process started by the driver per job, as for herd's own run: the job's bash starts
        # the CLI (not as its last command, so bash forks it as the user's `herd` is forked).
        herd = shlex.quote(shutil.which(loopback_cluster.HERD) or loopback_cluster.HERD)

        def one(i):
            cmd = [step, "--log", f"{d}/{i}.log", "--exit", f"{d}/{i}.exit", "--marker",
                   "HERD_P7_FLOOR=1", "--cwd", d, "--", "/bin/bash", "-c",
                   f"{herd} --version >/dev/null; true"]
            rc, err = run_exact(cmd)
            if rc != 0:
                raise AssertionError(f"herd-step exited {rc}: {err}")
            with open(f"{d}/{i}.exit") as f:
                if "exit_code=0" not in f.read():
                    raise AssertionError(f"job {i} of the anchor did not exit 0")

        b0, t0 = busy_cpu_seconds(), time.monotonic()
        with ThreadPoolExecutor(parallel) as ex:
            list(ex.map(one, range(jobs)))
        wall, busy = time.monotonic() - t0, busy_cpu_seconds() - b0
        return jobs / wall, busy * 1000 / jobs
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--goal", type=float, default=100.0)
    ap.add_argument("--net", default="127.0.60", help="loopback A.B.C: head .11, worker .12")
    ap.add_argument("--cluster", help="an UP cluster of HERD_HOME to submit to instead")
    ap.add_argument("--floor-jobs", type=int, default=None,
                    help="jobs of the anchor (default: --jobs; 0: no anchor)")
    a = ap.parse_args()
    print("load average:", open("/proc/loadavg").read().split()[:3])
    print("program start:", program_start_cost())  # the machine's speed today (bench/suite.py)
    if a.cluster:
        c = None
        cmd = [loopback_cluster.HERD, "exec", a.cluster, "-d", "--", "true"]

        def queue():
            return loopback_cluster.run([loopback_cluster.HERD, "queue", a.cluster, "-o", "json"])
    else:
        c = loopback_cluster.LoopbackCluster("hflt-rate", [a.net + ".11", a.net + ".12"],
                                             gpus_per_node=0, cpus=2 * a.jobs)
        cmd = [loopback_cluster.HERD, "exec", *c.target(), "-d", "--", "true"]

        def queue():
            return c.herd("queue", "-o", "json")
    try:
        before = {j["id"] for j in json.loads(queue().stdout)}

        def one(_):
            t = time.monotonic()
            rc, err = run_exact(cmd)
            if rc != 0:
                raise AssertionError(err)
            return time.monotonic() - t

        b0, t0 = busy_cpu_seconds(), time.monotonic()
        with ThreadPoolExecutor(a.parallel) as ex:
            lat = sorted(ex.map(one, range(a.jobs)))
        wall = time.monotonic() - t0
        busy_ms = (busy_cpu_seconds() - b0) * 1000 / a.jobs  # also the jobs that started meanwhile
        accepted = a.jobs / wall
        deadline = time.time() + 120
        while True:
            jobs = [j for j in json.loads(queue().stdout) if j["id"] not in before]
            started = [j for j in jobs if j["started_at_ms"] > 0]
            if len(started) >= a.jobs or time.time() > deadline:
                break
            time.sleep(0.5)
        first = min(j["submitted_at_ms"] for j in jobs)
        last = max(j["started_at_ms"] for j in started)
        sched = len(started) / max(1e-3, (last - first) / 1000.0)
        waits = sorted(j["started_at_ms"] - j["submitted_at_ms"] for j in started)
        states = {}
        for j in jobs:
            states[j["status"]] = states.get(j["status"], 0) + 1
        print(f"{a.jobs} x `herd exec -d -- true`, {a.parallel} in parallel: wall {wall:.2f} s, "
              f"{accepted:.1f} jobs/s accepted; CLI latency p50 {lat[len(lat)//2]*1000:.0f} ms, "
              f"p90 {lat[int(len(lat)*0.9)]*1000:.0f} ms")
        print(f"head: {len(started)} jobs scheduled, first submit -> last start "
              f"{(last - first)/1000:.2f} s = {sched:.1f} jobs/s; submit -> start p50 "
              f"{waits[len(waits)//2]} ms, max {waits[-1]} ms; states {states}")
        print(f"machine busy CPU during the submits: {busy_ms:.1f} ms per job")
        floor_jobs = a.jobs if a.floor_jobs is None else a.floor_jobs
        if floor_jobs > 0:
            time.sleep(2)  # the last jobs end and their agent settles
            f_rate, f_ms = floor(floor_jobs, a.parallel)
            print(f"anchor: {floor_jobs} jobs of program starts alone (herd-step running bash "
                  f"running herd --version), {a.parallel} in parallel: {f_rate:.1f} jobs/s, "
                  f"{f_ms:.1f} ms machine CPU per job; herd accepted {accepted / f_rate:.2f}x of "
                  f"it")
        print("load average:", open("/proc/loadavg").read().split()[:3])
        ok = accepted >= a.goal and sched >= a.goal and len(started) >= a.jobs
        print(("PASS" if accepted >= a.goal else "FAIL") + f" accepted {accepted:.1f} jobs/s "
              f"(goal >= {a.goal:.0f})")
        print(("PASS" if sched >= a.goal and len(started) >= a.jobs else "FAIL") +
              f" scheduled {sched:.1f} jobs/s (goal >= {a.goal:.0f})")
        return 0 if ok else 1
    finally:
        if c:
            c.close()


if __name__ == "__main__":
    sys.exit(main())
