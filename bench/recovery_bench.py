#!/usr/bin/python3
"""Managed-job recovery from a lost worker node (issue 26 item 3): the time from the fault to all
ranks running again, replacing the lost worker alone (the default) against relaunching the whole
cluster (herd's config.yaml `jobs: {node_recovery: cluster}`), in one run on this machine.

Each round launches an N-node managed job (tests/integration/recovery_job.py: a checkpointed
run that writes one line per rank and attempt with the time it started), waits for its step-4
checkpoint, SIGKILLs every process of worker 1's network namespace (a machine that is gone) and
measures, from that moment:
  recovering  the job shows RECOVERING in `herd jobs queue` (polled every 0.1 s): the head
              declared the node lost and the controller decided
  running     the job shows RUNNING again (the attempt was submitted)
  all ranks   the last rank of attempt 2 started (its own line's time)
The two modes alternate round by round (each round its own HERD_HOME), so the machine's load
weighs on both alike. Prints a table with medians and the ratios; writes
bench/results/<stamp>-recovery.md. Needs root (the local provider makes network namespaces)."""

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import herd_env  # noqa: E402
import recovery_job  # noqa: E402
from herd_env import (HerdEnv, kill_managed_controllers, kill_netns, launch_managed,  # noqa: E402
                      wait_managed)

MODES = ("replace", "cluster")  # jobs.node_recovery
STEPS = 40


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def one_round(mode, nodes):
    """One fault and recovery in a fresh env: {"recovering", "running", "all_ranks"} seconds after
    the fault, and the cluster the job recovered on."""
    env = HerdEnv(f"hrb{mode[0]}")
    try:
        os.makedirs(env.env["HERD_HOME"], exist_ok=True)
        with open(os.path.join(env.env["HERD_HOME"], "config.yaml"), "w") as f:
            f.write(f"jobs:\n  node_recovery: {mode}\n")
        ckpt = os.path.join(env.dir, "ckpt")
        os.makedirs(ckpt)
        task = os.path.join(env.dir, "job.yaml")
        with open(task, "w") as f:
            f.write(recovery_job.task_yaml(f"hrb{mode[0]}", nodes, ckpt, STEPS))
        job_id = launch_managed(env, task)
        j, _, _ = wait_managed(env, job_id, lambda j: j["status"] == "RUNNING", 300, "RUNNING")
        cluster, task_id = j["cluster"], j["task_id"]
        deadline = time.time() + 120
        while recovery_job.step(ckpt, task_id) < 4:
            if time.time() > deadline:
                raise RuntimeError(f"no checkpoint:\n{env.controller_log(job_id)}")
            time.sleep(0.05)
        kill_netns(f"herd-{cluster}-1")
        killed_at = time.time()
        _, recovering_at, _ = wait_managed(env, job_id, lambda j: j["status"] == "RECOVERING",
                                           120, "RECOVERING")
        j, running_at, _ = wait_managed(env, job_id, lambda j: j["status"] == "RUNNING", 300,
                                        "RUNNING again")
        deadline = time.time() + 120
        while len(recovery_job.attempts(ckpt, task_id).get(2, {})) < nodes:
            if time.time() > deadline:
                raise RuntimeError(f"attempt 2 not on every rank:\n{env.controller_log(job_id)}")
            time.sleep(0.05)
        ranks = recovery_job.attempts(ckpt, task_id)[2]
        out = {"recovering": recovering_at - killed_at, "running": running_at - killed_at,
               "all_ranks": max(r["t"] for r in ranks.values()) - killed_at,
               "cluster": "same" if j["cluster"] == cluster else "new"}
        env.herd("jobs", "cancel", str(job_id), check=False)
        return out
    finally:
        try:
            kill_managed_controllers(env)
        finally:
            env.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--herd", default=os.environ.get("HERD") or
                    os.path.join(REPO, "build", "controller", "herd"))
    ap.add_argument("--reps", type=int, default=3, help="rounds per mode")
    ap.add_argument("--nodes", type=int, default=3, help="nodes of the job (>= 2)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    args = ap.parse_args()
    if args.nodes < 2:
        ap.error("--nodes must be at least 2 (worker 1 is killed)")
    if os.geteuid() != 0:
        sys.exit("recovery_bench: needs root (the local provider makes network namespaces)")
    herd_env.HERD = args.herd
    results = {m: [] for m in MODES}
    loads = [load()]
    for rep in range(args.reps):
        for mode in MODES:
            r = one_round(mode, args.nodes)
            results[mode].append(r)
            loads.append(load())
            print(f"round {rep + 1} {mode}: RECOVERING {r['recovering']:.2f} s, RUNNING "
                  f"{r['running']:.2f} s, all ranks {r['all_ranks']:.2f} s ({r['cluster']} "
                  f"cluster), load {loads[-1]}", flush=True)
    lines = [f"# Recovery from a lost worker: {args.nodes}-node managed job, {args.reps} rounds "
             "per mode", "",
             f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; herd {args.herd}; "
             f"load average (1 min) before and after each round: {' '.join(loads)}", "",
             "Seconds from the SIGKILL of every process of worker 1's namespace (median, then "
             "every round):", "",
             "| mode | RECOVERING | RUNNING again | all ranks running again | cluster |",
             "|---|---|---|---|---|"]
    med = {}
    for mode in MODES:
        rs = results[mode]
        med[mode] = {k: statistics.median(r[k] for r in rs)
                     for k in ("recovering", "running", "all_ranks")}

        def cell(k):
            return f"{med[mode][k]:.2f} ({', '.join(f'{r[k]:.2f}' for r in rs)})"
        label = "one node replaced" if mode == "replace" else "whole cluster relaunched"
        lines.append(f"| {label} | {cell('recovering')} | {cell('running')} | "
                     f"{cell('all_ranks')} | {', '.join(sorted({r['cluster'] for r in rs}))} |")
    lines.append("")
    for k, what in (("recovering", "RECOVERING"), ("running", "RUNNING again"),
                    ("all_ranks", "all ranks running again")):
        lines.append(f"- {what}: one node / whole cluster = "
                     f"{med['replace'][k] / med['cluster'][k]:.2f}")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-recovery.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
