#!/usr/bin/env python3
"""A/B of two herd binaries, interleaved, on one machine in one window (bench/README.md).

  bench/ab.py launch --a OLD --b NEW [--nodes 64] [--reps 3]
      cold `herd launch -c hp2... --num-nodes N -y -- true` with A then B (order swapped every
      rep), each cluster torn down before the next; prints every run's phases and the medians.
  bench/ab.py exec --a OLD --b NEW [--nodes 2] [--reps 20]
      one N-node cluster launched by A, then `herd exec C --num-nodes N -- true` with A and B
      alternately; prints the medians (ms). With --trace also the medians of each HERD_TRACE stage.
  bench/ab.py agent --a HERD --herdlet-a OLD --herdlet-b NEW [--nodes 2] [--reps 20]
      agent-side A/B: two N-node clusters, one running herdlet OLD and one NEW (HERDLET_BINARY),
      then `herd exec --num-nodes N -- true` (the one herd binary) on each alternately.

Needs root (the local provider makes network namespaces). Clusters are named with --prefix
(default hp2) and torn down at the end, also on failure or Ctrl-C.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite import Env, BenchError, log, load, ms  # noqa: E402

TRACE = re.compile(r"herd trace:\s+([0-9.]+) ms \(\+\s*([0-9.]+)\) (.*?)(?: \[cpu [0-9.]+ ms\])?$")


def launch_ab(args, env):
    res = {"A": [], "B": []}
    for rep in range(args.reps):
        order = ["A", "B"] if rep % 2 == 0 else ["B", "A"]
        for which in order:
            env.herd = getattr(args, which.lower())
            name = f"{args.prefix}{which.lower()}{rep}"
            l0 = load()
            secs, phases = env.launch(name, args.nodes, "--", "true")
            env.down(name)
            res[which].append(secs)
            log(f"{which} rep {rep}: {secs:.2f} s (load {l0:.1f}) " +
                ", ".join(f"{k}={v:.2f}" for k, v in phases.items()))
    for which in ("A", "B"):
        v = res[which]
        print(f"{which}: median {statistics.median(v):.2f} s, runs " +
              " ".join(f"{x:.2f}" for x in v))


def interleaved_execs(args, env, commands, labels):
    """One warm-up, then args.reps rounds of commands["A"] and commands["B"] (argv lists of a warm
    `herd exec`), their order swapped every round; prints each side's median and, with --trace,
    the median increment of each HERD_TRACE stage. Returns each side's times (ms)."""
    res = {"A": [], "B": []}
    stages = {"A": {}, "B": {}}
    tenv = dict(env.env, HERD_TRACE="1") if args.trace else None
    for which in ("A", "B"):  # warm-up: each side's first exec renews nothing afterwards
        env.run(commands[which])
    for rep in range(args.reps):
        for which in (["A", "B"] if rep % 2 == 0 else ["B", "A"]):
            secs, _, text = env.run(commands[which], env=tenv)
            res[which].append(ms(secs))
            for line in text.splitlines():
                m = TRACE.search(line)
                if m:
                    stages[which].setdefault(m.group(3), []).append(float(m.group(2)))
    for which in ("A", "B"):
        v = res[which]
        print(f"{which} ({labels[which]}): median {statistics.median(v):.1f} ms, "
              f"min {min(v):.1f}, max {max(v):.1f}, n={len(v)}")
        for stage, d in stages[which].items():
            print(f"    {stage:40s} median +{statistics.median(d):6.2f} ms (n={len(d)})")
    return res


def exec_ab(args, env):
    """Two herd binaries against one cluster."""
    name = f"{args.prefix}x"
    env.herd = args.a
    env.launch(name, args.nodes)
    tail = [name, "--num-nodes", str(args.nodes), "--", "true"]
    interleaved_execs(args, env, {"A": [args.a, "exec", *tail], "B": [args.b, "exec", *tail]},
                      {"A": args.a, "B": args.b})


def agent_ab(args, env):
    """One herd binary against two clusters, one per herdlet binary."""
    names = {"A": f"{args.prefix}a", "B": f"{args.prefix}b"}
    base = env.env
    for which in ("A", "B"):
        env.env = dict(base, HERDLET_BINARY=getattr(args, f"herdlet_{which.lower()}"))
        env.launch(names[which], args.nodes)
    env.env = base
    interleaved_execs(
        args, env,
        {w: [args.a, "exec", names[w], "--num-nodes", str(args.nodes), "--", "true"]
         for w in ("A", "B")},
        {w: "herdlet " + getattr(args, f"herdlet_{w.lower()}") for w in ("A", "B")})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["launch", "exec", "agent"])
    ap.add_argument("--a", required=True, help="herd binary A (before)")
    ap.add_argument("--b", help="herd binary B (after); not for agent")
    ap.add_argument("--herdlet-a", help="agent: herdlet binary A (before)")
    ap.add_argument("--herdlet-b", help="agent: herdlet binary B (after)")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--reps", type=int)
    ap.add_argument("--prefix", default="hp2")
    ap.add_argument("--trace", action="store_true", help="exec: HERD_TRACE=1, stage medians")
    args = ap.parse_args()
    if args.mode == "agent":
        if not (args.herdlet_a and args.herdlet_b):
            ap.error("agent needs --herdlet-a and --herdlet-b")
        args.herdlet_a, args.herdlet_b = map(os.path.abspath, (args.herdlet_a, args.herdlet_b))
        args.b = args.a
    elif not args.b:
        ap.error(f"{args.mode} needs --b")
    args.a, args.b = os.path.abspath(args.a), os.path.abspath(args.b)
    if args.nodes is None:
        args.nodes = 64 if args.mode == "launch" else 2
    if args.reps is None:
        args.reps = 3 if args.mode == "launch" else 20
    if os.geteuid() != 0:
        ap.error("needs root (the local provider makes network namespaces)")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    env = Env(args.a, tempfile.mkdtemp(prefix="herd-ab-"))
    log(f"load at start {load():.2f}")
    code = 1
    try:
        {"launch": launch_ab, "exec": exec_ab, "agent": agent_ab}[args.mode](args, env)
        code = 0
    except (BenchError, KeyboardInterrupt) as e:
        log(f"failed: {e}; commands in {env.log_path}")
    finally:
        env.herd = args.a
        env.down_all()
        log(f"load at end {load():.2f}")
        if code == 0:  # a failed run keeps its command log (named above)
            shutil.rmtree(env.workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
