#!/usr/bin/env python3
"""issue 26 item 4: a 1000-job array submitted as one request, against the same jobs submitted one
by one (as a sweep is without arrays: SkyPilot's 100 separate submissions, skypilot#9461).

A head on 127.0.33.10 (a LoopbackCluster: real herdlet, real TLS, the real `herd` CLI over
--endpoint), one node declared with --cpus CPUs (every job takes the default 0.5 CPU, so up to
2 x CPUs run at once). Measured, in one run:

  array       `herd exec --array 0-(N-1) -d -- true`: the CLI's wall time (one request; the head
              stores all N jobs in one transaction before it answers) -> jobs/s submitted; then
              from the head's own records (queue -o json): the time from the submit to the last
              job's start -> jobs/s scheduled (placed and their processes started), and to the last
              job's end -> jobs/s completed.
  one-by-one  --single S separate `herd exec -d -- true` CLI calls, sequential: jobs/s submitted.

Target (the issue): at least 500 jobs/s scheduled (Slurm documents 500 jobs/s sustained). The
report prints the measured rates and their ratio to the target and to the one-by-one baseline;
it says nothing passes that did not. With the default --cpus 512 every job of the array fits at
once, so "scheduled" is the head's own rate (placing a job, recording it RUNNING, sending its
StartProcess); with fewer CPUs the last jobs wait for earlier ones to end and "scheduled" is
bounded by how fast this machine runs `true` jobs (the "completed" rate).

Usage: array_bench.py [--herd PATH] [--herdlet PATH] [--jobs 1000] [--single 50] [--cpus 512]
                      [--out bench/results]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--herd", default=os.path.join(REPO, "build", "controller", "herd"))
    ap.add_argument("--herdlet", default=os.path.join(REPO, "build", "agent", "herdlet"))
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--single", type=int, default=50)
    ap.add_argument("--cpus", type=int, default=512)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    os.environ["HERD"], os.environ["HERDLET"] = a.herd, a.herdlet
    import loopback_cluster as lc  # reads HERD/HERDLET at import
    cluster = lc.LoopbackCluster("hbarr", ["127.0.33.10"], gpus_per_node=0, cpus=a.cpus)
    try:
        def herd(*args, timeout=600):
            return lc.run([a.herd, *args[:1], *cluster.target(), *args[1:]], timeout=timeout)

        def queue():
            return json.loads(herd("queue", "-o", "json").stdout)

        # Warm-up: one job, so the first timed request pays no first-connection costs.
        herd("exec", "--", "true")

        t0 = time.time()
        p = herd("exec", "--array", f"0-{a.jobs - 1}", "-d", "--", "true")
        submit_s = time.time() - t0
        assert b"Job array submitted" in p.stderr, p.stderr
        deadline = time.time() + 600
        while True:
            jobs = [j for j in queue() if j.get("array_size") == a.jobs]
            if len(jobs) == a.jobs and all(j["status"] in ("SUCCEEDED", "FAILED", "CANCELLED",
                                                           "FAILED_DRIVER") for j in jobs):
                break
            if time.time() > deadline:
                raise SystemExit("the array did not finish within 600 s")
            time.sleep(0.5)
        bad = [j for j in jobs if j["status"] != "SUCCEEDED"]
        submitted = min(j["submitted_at_ms"] for j in jobs)
        last_start = max(j["started_at_ms"] for j in jobs)
        last_end = max(j["ended_at_ms"] for j in jobs)
        sched_s = (last_start - submitted) / 1000
        done_s = (last_end - submitted) / 1000

        t0 = time.time()
        for _ in range(a.single):
            herd("exec", "-d", "--", "true")
        single_s = time.time() - t0
    finally:
        cluster.close()

    rate = lambda n, s: n / s if s > 0 else float("inf")  # noqa: E731
    sub_rate, sched_rate = rate(a.jobs, submit_s), rate(a.jobs, sched_s)
    done_rate, single_rate = rate(a.jobs, done_s), rate(a.single, single_s)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lines = [
        f"# Job arrays: {a.jobs} jobs in one request ({stamp})",
        "",
        f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end. "
        f"One node declared with {a.cpus} CPUs (up to {2 * a.cpus} jobs at once).",
        "",
        "| measure | time (s) | jobs/s |",
        "|---|---|---|",
        f"| array: submit (CLI wall time, one request) | {submit_s:.3f} | {sub_rate:.0f} |",
        f"| array: submit to last job started (scheduled) | {sched_s:.3f} | {sched_rate:.0f} |",
        f"| array: submit to last job ended (completed) | {done_s:.3f} | {done_rate:.0f} |",
        f"| one by one: {a.single} `herd exec -d` | {single_s:.3f} | {single_rate:.0f} |",
        "",
        f"Jobs not SUCCEEDED: {len(bad)}.",
        f"Scheduled rate / target 500 jobs/s: {sched_rate / 500:.2f}x "
        f"({'meets' if sched_rate >= 500 else 'MISSES'} the target).",
        f"Submit rate, array / one by one: {sub_rate / single_rate:.1f}x.",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"array-{stamp}.md"), "w") as f:
        f.write(report)


if __name__ == "__main__":
    main()
