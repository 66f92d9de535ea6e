"""Managed jobs (`herd jobs`) end to end on `local` netns clusters, as a user drives them: a
2-node job whose worker node dies mid-run is relaunched on a new cluster (config.yaml
`jobs: {node_recovery: cluster}`; replacing the worker alone is one_node_recovery_test's) and
resumes from its checkpoint (same SKYPILOT_TASK_ID, attempt 2); a failing task is retried max_restarts_on_errors
times, then FAILED; a running job is cancelled. Cluster names start with `hmj`."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (HerdEnvTestCase, kill_managed_controllers, namespaces_of,  # noqa: E402
                      netns_available, pids_with_marker)

STEPS = 40  # checkpointed steps of the resumable job, 0.5 s each
# A dead head machine is RECOVERING within kNodeLostAfter (8 s) + kReconnectBackoffMax (3 s) + the
# controller's state write, with room for a loaded machine; under kClientReconnectWindow (30 s),
# which is what it took before the controller probed the head node.
HEAD_LOST_RECOVERING_WITHIN = 20.0


def read(path):
    with open(path) as f:
        return f.read()


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class ManagedJobsTest(HerdEnvTestCase):
    ENV_PREFIX = "hmj"

    @classmethod
    def prepare_env(cls):
        cls.ckpt = os.path.join(cls.h.dir, "ckpt")  # a host directory every local node sees
        os.makedirs(cls.ckpt)
        # These tests drive the whole-cluster relaunch; a lost worker replaced alone on the same
        # cluster is one_node_recovery_test's.
        os.makedirs(cls.h.env["HERD_HOME"], exist_ok=True)
        with open(os.path.join(cls.h.env["HERD_HOME"], "config.yaml"), "w") as f:
            f.write("jobs:\n  node_recovery: cluster\n")

    @classmethod
    def close_env(cls):
        try:
            # Controllers first (they would relaunch what `down` removes), then every cluster.
            kill_managed_controllers(cls.h)
        finally:
            super().close_env()

    @classmethod
    def check_nothing_left(cls):
        left = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout.split() if n.startswith("herd-hmj")]
        assert left == [], left

    def write_task(self, name, text):
        path = os.path.join(self.h.dir, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def queue(self):
        return {j["id"]: j for j in json.loads(self.h.herd("jobs", "queue", "-o", "json").stdout)}

    def launch_detached(self, task):
        p = self.h.herd("jobs", "launch", "-d", "-y", task)
        return int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))

    def wait_for(self, job_id, pred, timeout, what):
        seen = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.queue()[job_id]
            if not seen or seen[-1] != j["status"]:
                seen.append(j["status"])
            if pred(j):
                return j, seen
            time.sleep(0.3)
        self.fail(f"job {job_id}: no {what} within {timeout} s; states seen {seen}; "
                  f"controller log:\n{self.h.controller_log(job_id)}")

    def test_a_node_lost_job_resumes_from_its_checkpoint_on_a_new_cluster(self):
        task = self.write_task("ckpt", f"""
name: hmj-ckpt
num_nodes: 2
resources:
  job_recovery:
    strategy: FAILOVER
    max_restarts_on_errors: 0
envs:
  CKPT_ROOT: {self.ckpt}
run: |
  d=$CKPT_ROOT/$SKYPILOT_TASK_ID
  mkdir -p $d
  echo "attempt=$HERD_ATTEMPT task_id=$SKYPILOT_TASK_ID rank=$SKYPILOT_NODE_RANK" >> $d/attempts.txt
  if [ "$SKYPILOT_NODE_RANK" = 0 ]; then
    step=$(cat $d/step 2>/dev/null || echo 0)
    echo "resuming at step $step (attempt $HERD_ATTEMPT)"
    while [ $step -lt {STEPS} ]; do
      step=$((step + 1)); echo $step > $d/step.tmp && mv $d/step.tmp $d/step
      echo "step $step"
      sleep 0.5
    done
  else
    while [ "$(cat $d/step 2>/dev/null || echo 0)" -lt {STEPS} ]; do sleep 0.2; done
  fi
""")
        t0 = time.time()
        job_id = self.launch_detached(task)
        j, _ = self.wait_for(job_id, lambda j: j["status"] == "RUNNING", 120, "RUNNING")
        first = j["cluster"]
        self.assertEqual(first, f"hmj-ckpt-{job_id}-1")
        task_id = j["task_id"]
        self.assertTrue(task_id.startswith("sky-managed-") and task_id.endswith(f"_{job_id}"),
                        task_id)
        step_file = os.path.join(self.ckpt, task_id, "step")
        deadline = time.time() + 60
        while time.time() < deadline:
            if os.path.exists(step_file) and int(read(step_file) or 0) >= 4:
                break
            time.sleep(0.2)
        else:
            self.fail(f"no step 4 checkpoint; controller log:\n{self.h.controller_log(job_id)}")

        # The worker node dies: kill -9 everything in its namespace (sshd, supervisor, herdlet,
        # the rank's processes), as a machine that is gone.
        worker_ns = f"herd-{first}-1"
        self.assertIn(worker_ns, namespaces_of(first))
        pids = subprocess.run(["ip", "netns", "pids", worker_ns], capture_output=True,
                              text=True).stdout.split()
        self.assertTrue(pids)
        killed_at = time.time()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass

        j, seen = self.wait_for(job_id, lambda j: j["status"] == "RECOVERING", 60, "RECOVERING")
        recovering_at = time.time()
        j, seen2 = self.wait_for(job_id, lambda j: j["status"] == "RUNNING", 120,
                                 "RUNNING again")
        running_again_at = time.time()
        self.assertEqual(j["recoveries"], 1)
        self.assertEqual(j["cluster"], f"hmj-ckpt-{job_id}-2")
        table = self.h.herd("jobs", "queue").stdout.decode()
        self.assertRegex(table, r"ID\s+NAME\s+RESOURCES\s+SUBMITTED\s+DURATION\s+#RECOVERIES\s+"
                                r"STATUS\s+CLUSTER")
        self.assertRegex(table, rf"\n{job_id}\s+hmj-ckpt\s.*\s1\s+RUNNING\s+hmj-ckpt-{job_id}-2")
        # The cluster's own queue shows the attempt and the shared task id.
        cjob = json.loads(self.h.herd("queue", j["cluster"], "-o", "json").stdout)[0]
        self.assertEqual((cjob["attempt"], cjob["task_id"]), (2, task_id))
        # The old cluster is gone before the new one runs.
        self.assertNotIn(first, self.h.clusters())
        self.assertEqual(namespaces_of(first), [])

        j, _ = self.wait_for(job_id, lambda j: j["status"] not in ("RUNNING", "RECOVERING"), 120,
                             "the end")
        self.assertEqual(j["status"], "SUCCEEDED", self.h.controller_log(job_id))
        self.assertEqual([a["attempt"] for a in j["attempts"]], [1, 2])
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"])
        self.assertIn("lost", j["attempts"][0]["reason"])

        lines = read(os.path.join(self.ckpt, task_id, "attempts.txt")).split("\n")
        seen_ids = {re.search(r"task_id=(\S+)", l).group(1) for l in lines if l}
        self.assertEqual(seen_ids, {task_id})
        self.assertEqual(sorted({re.search(r"attempt=(\d+)", l).group(1) for l in lines if l}),
                         ["1", "2"])
        self.assertEqual(int(read(step_file)), STEPS)

        logs = self.h.herd("jobs", "logs", str(job_id), check=False)
        out = logs.stdout.decode()
        self.assertEqual(logs.returncode, 0, out[-3000:])
        self.assertIn(f"=== herd jobs: job {job_id}, attempt 1 on cluster {first} ===", out)
        self.assertIn(f"=== herd jobs: job {job_id}, attempt 2 on cluster hmj-ckpt-{job_id}-2 ===",
                      out)
        self.assertIn("resuming at step 0 (attempt 1)", out)
        resumed = int(re.search(r"resuming at step (\d+) \(attempt 2\)", out).group(1))
        self.assertGreaterEqual(resumed, 4)  # not from step 0
        self.assertNotIn("step 1\n", out.split("attempt 2 on cluster")[1])
        # Nothing of either attempt is left.
        self.assertEqual([c for c in self.h.clusters() if c.startswith("hmj-ckpt")], [])
        self.assertEqual(namespaces_of(f"hmj-ckpt-{job_id}-2"), [])
        print(f"\nnode loss -> RECOVERING {recovering_at - killed_at:.1f} s, -> RUNNING again "
              f"{running_again_at - killed_at:.1f} s; resumed at step {resumed}; whole job "
              f"{time.time() - t0:.1f} s; states {seen + seen2}", file=sys.stderr)

    def test_b_user_error_is_retried_max_restarts_on_errors_times_then_failed(self):
        task = self.write_task("fail", """
name: hmj-fail
resources:
  job_recovery: {max_restarts_on_errors: 1}
run: |
  echo "failing on attempt $HERD_ATTEMPT"
  exit 1
""")
        p = self.h.herd("jobs", "launch", "-y", task, check=False)
        self.assertEqual(p.returncode, 100, p.stderr.decode()[-2000:])
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        j = self.queue()[job_id]
        self.assertEqual(j["status"], "FAILED")
        self.assertEqual([a["attempt"] for a in j["attempts"]], [1, 2])
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["USER_FAILED", "USER_FAILED"])
        self.assertEqual(j["recoveries"], 0)
        self.assertEqual(j["restarts_on_errors"], 1)
        logs = self.h.herd("jobs", "logs", str(job_id), check=False)
        self.assertEqual(logs.returncode, 100)
        out = logs.stdout.decode()
        self.assertIn("failing on attempt 1", out)
        self.assertIn("failing on attempt 2", out)
        self.assertNotIn("failing on attempt 3", out)
        self.assertEqual([c for c in self.h.clusters() if c.startswith("hmj-fail")], [])
        # Cancelling a job that ended is a no-op that says so.
        c = self.h.herd("jobs", "cancel", str(job_id), check=False)
        self.assertEqual(c.returncode, 0)
        self.assertIn(f"Managed job {job_id} already ended (FAILED); nothing to cancel.",
                      c.stdout.decode())

    def test_c_cancel_a_running_job_leaves_nothing(self):
        task = self.write_task("cancel", """
name: hmj-cancel
run: |
  exec -a hmj-cancel-marker sleep 300
""")
        # Launched in the foreground, then Ctrl-C: the CLI detaches, the job keeps running.
        cli = self.h.popen("jobs", "launch", "-y", task)
        line = cli.stdout.readline()
        job_id = int(re.search(rb"Managed job ID: (\d+)", line).group(1))
        j, _ = self.wait_for(job_id, lambda j: j["status"] == "RUNNING", 120, "RUNNING")
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=30)
        self.assertEqual(cli.returncode, 101, err.decode())
        self.assertIn(f"Reattach with: herd jobs logs {job_id}", err.decode())
        time.sleep(1)
        self.assertEqual(self.queue()[job_id]["status"], "RUNNING")
        cluster = j["cluster"]
        deadline = time.time() + 30
        while not pids_with_marker("hmj-cancel-marker") and time.time() < deadline:
            time.sleep(0.2)
        self.assertTrue(pids_with_marker("hmj-cancel-marker"))
        controller = j["controller_pid"]
        c = self.h.herd("jobs", "cancel", str(job_id), check=False)
        self.assertEqual(c.returncode, 0, c.stderr.decode())
        self.assertIn(f"Managed job {job_id}: CANCELLED", c.stdout.decode())
        self.assertEqual(self.queue()[job_id]["status"], "CANCELLED")
        self.assertNotIn(cluster, self.h.clusters())
        self.assertEqual(namespaces_of(cluster), [])
        self.assertEqual(pids_with_marker("hmj-cancel-marker"), [])
        # The controller process exits once the job is CANCELLED.
        marker = f"_controller\0{job_id}\0"
        deadline = time.time() + 10
        while controller in pids_with_marker(marker) and time.time() < deadline:
            time.sleep(0.1)
        self.assertNotIn(controller, pids_with_marker(marker))
        logs = self.h.herd("jobs", "logs", str(job_id), check=False)
        self.assertEqual(logs.returncode, 103)

    def test_d_bad_input_is_refused_and_changes_nothing(self):
        before = self.h.herd("jobs", "queue", "-o", "json").stdout
        bad = self.write_task("bad", "run: echo x\nresources:\n  job_recovery: SOMETIMES\n")
        p = self.h.herd("jobs", "launch", "-y", bad, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"{bad}:3:17: resources.job_recovery: expected a recovery strategy",
                      p.stderr.decode())
        self.assertEqual(self.h.herd("jobs", "queue", "-o", "json").stdout, before)
        for cmd in (["logs", "999"], ["cancel", "999"]):
            p = self.h.herd("jobs", *cmd, check=False)
            self.assertEqual(p.returncode, 102, cmd)
            self.assertIn("managed job 999 not found", p.stderr.decode())


    def test_e_head_node_lost_is_recovered_as_an_unreachable_cluster(self):
        task = self.write_task("head", """
name: hmj-head
num_nodes: 2
run: |
  echo "attempt $HERD_ATTEMPT rank $SKYPILOT_NODE_RANK"
  if [ "$HERD_ATTEMPT" = 1 ]; then sleep 300; fi
""")
        job_id = self.launch_detached(task)
        j, _ = self.wait_for(job_id, lambda j: j["status"] == "RUNNING", 120, "RUNNING")
        head_ns = f"herd-{j['cluster']}-0"
        time.sleep(1)  # the ranks have started
        killed_at = time.time()
        for p in subprocess.run(["ip", "netns", "pids", head_ns], capture_output=True,
                                text=True).stdout.split():
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass
        # The controller's stream to the head drops; after kNodeLostAfter (8 s) without the head
        # it probes the head node's sshd, which is gone too: the cluster counts as lost then (what
        # a preempted head looks like), not after the whole kClientReconnectWindow (30 s).
        self.wait_for(job_id, lambda j: j["status"] == "RECOVERING", 90, "RECOVERING")
        recovering_at = time.time()
        self.assertLess(recovering_at - killed_at, HEAD_LOST_RECOVERING_WITHIN,
                        self.h.controller_log(job_id))
        j, _ = self.wait_for(job_id, lambda j: j["status"] not in ("RUNNING", "RECOVERING"), 120,
                             "the end")
        self.assertEqual(j["status"], "SUCCEEDED", self.h.controller_log(job_id))
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["NODE_LOST", "SUCCEEDED"])
        self.assertIn("head", j["attempts"][0]["reason"])
        self.assertEqual(j["recoveries"], 1)
        out = self.h.herd("jobs", "logs", str(job_id)).stdout.decode()
        self.assertIn("attempt 2 rank 0", out)
        self.assertIn("attempt 2 rank 1", out)
        self.assertEqual([c for c in self.h.clusters() if c.startswith("hmj-head")], [])
        print(f"\nhead node lost -> RECOVERING {recovering_at - killed_at:.1f} s",
              file=sys.stderr)

    def test_f_a_dead_controller_is_shown_as_failed_controller(self):
        task = self.write_task("orphan", """
name: hmj-orphan
run: sleep 300
""")
        job_id = self.launch_detached(task)
        j, _ = self.wait_for(job_id, lambda j: j["status"] == "RUNNING", 120, "RUNNING")
        self.assertIn(j["controller_pid"], pids_with_marker(f"_controller\0{job_id}\0"))
        os.kill(j["controller_pid"], signal.SIGKILL)
        j, _ = self.wait_for(job_id, lambda j: j["status"] != "RUNNING", 10, "FAILED_CONTROLLER")
        self.assertEqual(j["status"], "FAILED_CONTROLLER")
        self.assertIn(f"herd down {j['cluster']}", j["message"])
        self.assertRegex(self.h.herd("jobs", "queue").stdout.decode(),
                         rf"\n{job_id}\s+hmj-orphan\s.*FAILED_CONTROLLER\s+{j['cluster']}")
        self.assertEqual(self.h.herd("jobs", "logs", str(job_id), check=False).returncode, 100)
        # Cancelling it now is a no-op; the user downs the cluster the message names.
        c = self.h.herd("jobs", "cancel", str(job_id))
        self.assertIn("already ended (FAILED_CONTROLLER)", c.stdout.decode())
        self.h.herd("down", j["cluster"], "-y")

    def test_g_secrets_reach_the_job_but_no_file(self):
        value = "s3cr3t-hmj-value"
        # Two more of 100 KB each: more in all than one environment variable can carry (128 KiB),
        # which is how the controller once got them.
        big = [f"{value}-big{i}-" + "b" * 100_000 for i in range(2)]
        digest = hashlib.sha256((value + "".join(big)).encode()).hexdigest()
        p = self.h.herd("jobs", "launch", "-y", "-n", "hmj-secret", "--secret",
                        f"HMJ_TOKEN={value}", "--secret", f"HMJ_BIG0={big[0]}", "--secret",
                        f"HMJ_BIG1={big[1]}", "--",
                        'printf %s "$HMJ_TOKEN$HMJ_BIG0$HMJ_BIG1" | sha256sum')
        self.assertIn(digest, p.stdout.decode())  # the job had the values
        self.assertNotIn(value, p.stdout.decode())
        for root, _, files in os.walk(self.h.env["HERD_HOME"]):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    found = value.encode() in f.read()
                self.assertFalse(found, f"the secret is in {os.path.join(root, name)}")
        self.assertNotIn(value, self.h.herd("jobs", "queue", "-o", "json").stdout.decode())


if __name__ == "__main__":
    unittest.main(verbosity=2)
