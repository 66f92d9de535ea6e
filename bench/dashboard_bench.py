#!/usr/bin/env python3
"""issue 25: how fast the web dashboard's pages render with 50 clusters and 5 000 jobs.

Starts `herd-api` in a private home on 127.0.191.2 (TLS, its own CA) with a stand-in `herd`: a
shell script that answers `status -o json` with --clusters clusters (`status NAME` with that one),
`queue NAME -o json` with --jobs-per-cluster jobs each (files written once, so the figure is the
server's and the page's work, not a head's), `nodes` with 2 nodes, and `infra [NAME] -o json`
with every cluster's (or that one's) 2 nodes of 2 GPUs, 1 in use. Warm workers are off (a
stand-in cannot be one), so every read is a `herd` process of the server's: the figures include a
process start per command.

Then, logged in as the admin through the one-time link in headless Chromium
(tests/integration/browser.py), for --reps runs each:
  - the JSON routes alone (/dashboard/api/clusters, .../clusters/C/jobs, .../clusters/C/gpus,
    .../jobs, .../infra), timed from Python;
  - each page, timed inside the page from the route change to the moment its table holds every
    row (clusters: 50 rows; a cluster: its 100 jobs and the timeline; jobs: its first page of
    100 rows, from one request for every cluster's jobs, and the pager counting all 5 000; a
    cluster also its GPU chart; infra: every cluster's 2 node rows).
Prints p50/p90/max per item against the 300 ms target and writes them as JSON under --out.

Usage: dashboard_bench.py [--herd-api PATH] [--clusters 50] [--jobs-per-cluster 100] [--reps 10]
       [--out bench/results]
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from browser import Browser  # noqa: E402

HOST = "127.0.191.2"
TARGET_MS = 300

FAKE_HERD = """#!/bin/sh
# The bench's stand-in for herd: canned -o json answers.
case "$1" in
  status) case "$2" in
            -o) cat "$HERD_BENCH_DATA/status.json" ;;
            *) cat "$HERD_BENCH_DATA/status-$2.json" 2>/dev/null || echo "[]" ;;
          esac ;;
  infra) case "$2" in
           -o) cat "$HERD_BENCH_DATA/infra-all.json" ;;
           *) cat "$HERD_BENCH_DATA/infra-$2.json" 2>/dev/null ||
                { echo "herd: no cluster $2" >&2; exit 102; } ;;
         esac ;;
  queue) case "$2" in
           -o) cat "$HERD_BENCH_DATA/queue-all.json" ;;
           *) cat "$HERD_BENCH_DATA/queue-$2.json" 2>/dev/null || { echo "herd: no cluster $2" >&2; exit 102; } ;;
         esac ;;
  nodes) cat "$HERD_BENCH_DATA/nodes.json" ;;
  jobs) echo "[]" ;;
  *) echo "herd (bench stand-in): $*" >&2; exit 2 ;;
esac
"""


def write_data(d, clusters, jobs_per_cluster):
    now = int(time.time() * 1000)
    states = ["SUCCEEDED", "FAILED", "CANCELLED", "RUNNING", "PENDING"]
    cl = []
    every = []  # `queue -o json` without a cluster: every cluster's jobs, each with its cluster
    infra_cl = []  # `infra -o json`: every cluster with its nodes' GPUs

    def infra_item(clusters_):
        return {"infra": "local", "kind": "local", "usable": True, "reason": "bench",
                "gpus": sum(c["gpus"] for c in clusters_),
                "gpus_in_use": sum(c["gpus_in_use"] for c in clusters_),
                "nodes": sum(len(c["nodes"]) for c in clusters_), "clusters": clusters_}
    for c in range(clusters):
        name = f"bench-{c:02d}"
        nodes = [{"name": f"{name}-{i}", "ip": f"10.0.{c}.{i + 1}", "is_head": i == 0}
                 for i in range(2)]
        cl.append({"name": name, "infra": "local", "status": "UP", "lost_nodes": [],
                   "resources": "2x(cpus=4, L4:2)", "autostop": 30,
                   "launched_at_ms": now - 3600_000, "nodes": nodes, "head_answered": True})
        jobs = []
        for j in range(jobs_per_cluster, 0, -1):
            st = states[j % len(states)] if j < jobs_per_cluster - 2 else "RUNNING"
            start = now - 3600_000 + j * 30_000
            ended = 0 if st in ("RUNNING", "PENDING") else start + 20_000
            jobs.append({"id": j, "name": f"train-{j}", "user": "admin", "status": st,
                         "submitted_at_ms": start - 1000,
                         "started_at_ms": 0 if st == "PENDING" else start,
                         "ended_at_ms": ended, "num_nodes": 2, "resources": "L4:2",
                         "log_path": "", "exit_codes": [0, 1] if st == "FAILED" else [],
                         "nodes": [n["name"] for n in nodes],
                         "first_failed_rank": 1 if st == "FAILED" else -1,
                         "first_failed_node": nodes[1]["name"] if st == "FAILED" else "",
                         "message": "", "attempt": 1, "task_id": 0})
        with open(os.path.join(d, f"queue-{name}.json"), "w") as f:
            json.dump(jobs, f)
        with open(os.path.join(d, f"status-{name}.json"), "w") as f:
            json.dump([cl[-1]], f)
        infra_cl.append({"name": name, "infra": "local", "status": "UP",
                         "resources": "2x(cpus=4, L4:2)", "gpus": 4, "gpus_in_use": 2,
                         "gpus_known": True,
                         "nodes": [{"node_id": n["name"], "hostname": n["name"],
                                    "address": n["ip"], "is_head": n["is_head"], "cpus": 4,
                                    "gpus": 2, "gpu_names": ["L4", "L4"], "gpus_in_use": 1,
                                    "alive": True, "status": "UP", "drained": False}
                                   for n in nodes]})
        with open(os.path.join(d, f"infra-{name}.json"), "w") as f:
            json.dump([infra_item([infra_cl[-1]])], f)
        every.extend(dict(j, cluster=name) for j in jobs)
    with open(os.path.join(d, "queue-all.json"), "w") as f:
        json.dump(every, f)
    with open(os.path.join(d, "status.json"), "w") as f:
        json.dump(cl, f)
    with open(os.path.join(d, "infra-all.json"), "w") as f:
        json.dump([infra_item(infra_cl)], f)
    with open(os.path.join(d, "nodes.json"), "w") as f:
        json.dump([{"node_id": f"n{i}", "address": "", "hostname": "", "cpus": 4, "gpus": 2,
                    "gpu_source": "fake", "is_head": i == 0, "alive": True, "status": "UP",
                    "silent_ms": 0} for i in range(2)], f)
    return [c["name"] for c in cl]


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--herd-api", default=os.environ.get("HERD_API", "herd-api"))
    ap.add_argument("--clusters", type=int, default=50)
    ap.add_argument("--jobs-per-cluster", type=int, default=100)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results"))
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="herd-dashbench-")
    server = browser = None
    try:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        names = write_data(data, a.clusters, a.jobs_per_cluster)
        fake = os.path.join(tmp, "herd")
        with open(fake, "w") as f:
            f.write(FAKE_HERD)
        os.chmod(fake, 0o755)
        home = os.path.join(tmp, "api")
        # The server samples the GPUs of the users whose home holds clusters (its GPU sampler,
        # a pass at start): the admin's home holds the stand-in's, so the charts have samples.
        for name in names:
            os.makedirs(os.path.join(home, "users", "admin", "herd", "clusters", name))
        port = free_port()
        server = subprocess.Popen(
            [a.herd_api, "--home", home, "--host", HOST, "--port", str(port), "--herd", fake,
             "--warm-workers", "0"], env=dict(os.environ, HERD_BENCH_DATA=data),
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "w"),
            start_new_session=True)
        ctx = None
        deadline = time.monotonic() + 30
        while True:
            try:
                ctx = ssl.create_default_context(cafile=os.path.join(home, "tls", "ca.crt"))
                c = http.client.HTTPSConnection(HOST, port, context=ctx, timeout=10)
                c.request("GET", "/api/v1/health")
                if c.getresponse().status == 200:
                    break
            except (OSError, ssl.SSLError):
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("herd-api did not come up: see " + tmp + "/server.log")
            time.sleep(0.2)
        with open(os.path.join(home, "admin.token")) as f:
            token = f.read().strip()
        conn = http.client.HTTPSConnection(HOST, port, context=ctx, timeout=30)
        conn.request("POST", "/api/v1/dashboard/login-code", "{}",
                     {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        path = json.loads(conn.getresponse().read())["path"]
        endpoint = f"https://{HOST}:{port}"

        browser = Browser()
        page = browser.page()
        page.goto(endpoint + path)
        page.wait_for("document.getElementById('who').textContent.startsWith('admin')")
        session = {c["name"]: c for c in page.cookies()}["herd_session"]["value"]

        results = {}

        conn.close()

        def api_time(route):
            # A connection per call (the server closes idle ones), timed after its handshake.
            c = http.client.HTTPSConnection(HOST, port, context=ctx, timeout=60)
            c.connect()
            t = time.perf_counter()
            c.request("GET", route, headers={"Cookie": f"herd_session={session}"})
            r = c.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t) * 1000
            c.close()
            assert r.status == 200, (route, r.status, body[:300])
            return ms

        page_js = """(async () => {
          const t0 = performance.now();
          location.hash = %s;
          while (!(%s)) {
            if (performance.now() - t0 > 60000) {
              throw new Error("not drawn within 60 s; rows: " +
                              document.querySelectorAll('main tbody tr').length + "; " +
                              document.querySelector('main').innerText.slice(0, 300));
            }
            await new Promise(r => requestAnimationFrame(r));
          }
          return performance.now() - t0;
        })()"""
        total_jobs = a.clusters * a.jobs_per_cluster
        mid = names[len(names) // 2]
        pages = {
            "page: clusters": ("#/clusters",
                               f"document.querySelectorAll('main tbody tr').length === "
                               f"{a.clusters}"),
            "page: a cluster": (f"#/cluster/{mid}",
                                "document.querySelector('svg.timeline') && "
                                "document.querySelector('svg.gpu-chart') && "
                                f"document.querySelectorAll('main tbody tr').length === "
                                f"{a.jobs_per_cluster + 2}"),
            # A page of rows (JOBS_PER_PAGE in app.js) and the pager counting them all.
            "page: jobs": ("#/jobs", f"document.querySelectorAll('main tbody tr').length === "
                                     f"{min(total_jobs, 100)}" +
                           ("" if total_jobs <= 100 else
                            " && (document.querySelector('.pager-range') || {}).textContent === "
                            f"'Jobs 1\\u2013100 of {total_jobs}'")),
            # (The h1 too: the page before may have drawn as many rows.)
            "page: infra": ("#/infra", "document.querySelector('main h1').textContent === "
                                       "'Infra' && document.querySelectorAll('main tbody tr')"
                                       f".length === {2 * a.clusters}"),
        }
        api_time("/dashboard/api/me")
        for _ in range(a.reps):
            results.setdefault("api: clusters", []).append(api_time("/dashboard/api/clusters"))
            results.setdefault("api: a cluster's jobs", []).append(
                api_time(f"/dashboard/api/clusters/{mid}/jobs"))
            results.setdefault("api: a cluster's GPUs", []).append(
                api_time(f"/dashboard/api/clusters/{mid}/gpus"))
            results.setdefault("api: infra", []).append(api_time("/dashboard/api/infra"))
            results.setdefault("api: every job (a page)", []).append(
                api_time("/dashboard/api/jobs?offset=0&limit=100"))
            for label, (hash_, done) in pages.items():
                page.eval("location.hash = '#/none'")
                results.setdefault(label, []).append(
                    page.eval(page_js % (json.dumps(hash_), done), timeout=120))

        print(f"dashboard: {a.clusters} clusters, {total_jobs} jobs, {a.reps} runs "
              f"(target {TARGET_MS} ms)")
        print(f"{'item':28} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}  verdict")
        report = {}
        for label, v in results.items():
            p50, p90 = statistics.median(v), pct(v, 90)
            report[label] = {"p50_ms": p50, "p90_ms": p90, "max_ms": max(v), "runs": v}
            verdict = "ok" if p90 < TARGET_MS else "OVER"
            print(f"{label:28} {p50:8.1f} {p90:8.1f} {max(v):8.1f}  {verdict}")
        os.makedirs(a.out, exist_ok=True)
        out = os.path.join(a.out, time.strftime("%Y%m%d-%H%M%S") + "-dashboard.json")
        with open(out, "w") as f:
            json.dump({"clusters": a.clusters, "jobs": total_jobs, "results": report}, f,
                      indent=1)
        print("written:", out)
    finally:
        if browser:
            browser.close()
        if server and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
