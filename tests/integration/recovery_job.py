"""A checkpointed multi-node managed job for recovery tests and the recovery bench: every rank of
every attempt appends one line (attempt, rank, its node's address and hostname) to a file in a
host directory every local node sees; rank 0 counts STEPS steps of 0.5 s, each saved as the
checkpoint, and resumes from it; the other ranks wait until the count is done."""

import os
import re


def task_yaml(name, num_nodes, ckpt_root, steps):
    """The task's YAML (job_recovery FAILOVER, no restarts on errors)."""
    return f"""
name: {name}
num_nodes: {num_nodes}
resources:
  job_recovery:
    strategy: FAILOVER
    max_restarts_on_errors: 0
envs:
  CKPT_ROOT: {ckpt_root}
run: |
  d=$CKPT_ROOT/$SKYPILOT_TASK_ID
  mkdir -p $d
  ip=$(echo "$SKYPILOT_NODE_IPS" | sed -n "$((SKYPILOT_NODE_RANK + 1))p")
  echo "attempt=$HERD_ATTEMPT rank=$SKYPILOT_NODE_RANK ip=$ip host=$(hostname) t=$(date +%s.%N)" >> $d/attempts.txt
  if [ "$SKYPILOT_NODE_RANK" = 0 ]; then
    step=$(cat $d/step 2>/dev/null || echo 0)
    echo "resuming at step $step (attempt $HERD_ATTEMPT)"
    while [ $step -lt {steps} ]; do
      step=$((step + 1)); echo $step > $d/step.tmp && mv $d/step.tmp $d/step
      echo "step $step"
      sleep 0.5
    done
  else
    while [ "$(cat $d/step 2>/dev/null || echo 0)" -lt {steps} ]; do sleep 0.2; done
  fi
"""


def job_dir(ckpt_root, task_id):
    return os.path.join(ckpt_root, task_id)


def step(ckpt_root, task_id):
    """The checkpointed step (0 before the first)."""
    try:
        with open(os.path.join(job_dir(ckpt_root, task_id), "step")) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def attempts(ckpt_root, task_id):
    """{attempt: {rank: {"ip", "host", "t"}}} from the ranks' lines so far."""
    out = {}
    try:
        with open(os.path.join(job_dir(ckpt_root, task_id), "attempts.txt")) as f:
            text = f.read()
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"attempt=(\d+) rank=(\d+) ip=(\S*) host=(\S+) t=(\S+)$", line)
        if m:
            out.setdefault(int(m.group(1)), {})[int(m.group(2))] = {
                "ip": m.group(3), "host": m.group(4), "t": float(m.group(5))}
    return out
