"""SkyPilot YAML taken as written (issue 23 item 6), end to end on `local` netns clusters, as a
user drives them: a pipeline file (`---` between tasks, a header) run by `herd launch`, each task
after the previous one, stopping at the first that fails; a `workdir: {url, ref}` cloned from a
local git repository and synced; a managed job whose run exits with one of
`recover_on_exit_codes` is recovered (a new attempt), not failed, with max_restarts_on_errors 0.
Cluster names start with `hyf`."""

import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (HerdEnvTestCase, kill_managed_controllers, namespaces_of,  # noqa: E402
                      netns_available)


def read(path):
    with open(path) as f:
        return f.read()


def git(*args, cwd=None):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                    "init.defaultBranch=main", *args], cwd=cwd, check=True, capture_output=True)


@unittest.skipUnless(netns_available(), "needs root and ip netns")
class YamlFormsTest(HerdEnvTestCase):
    ENV_PREFIX = "hyf"

    @classmethod
    def prepare_env(cls):
        cls.shared = os.path.join(cls.h.dir, "shared")  # a host directory every local node sees
        os.makedirs(cls.shared)

    @classmethod
    def close_env(cls):
        try:
            kill_managed_controllers(cls.h)
        finally:
            super().close_env()

    @classmethod
    def check_nothing_left(cls):
        left = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout.split() if n.startswith("herd-hyf")]
        assert left == [], left

    def write(self, name, text):
        path = os.path.join(self.h.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_pipeline_runs_its_tasks_in_order_and_stops_at_the_first_failure(self):
        order = os.path.join(self.shared, "order.txt")
        pipeline = self.write("pipeline.yaml", f"""name: hyf-pipe
---
name: first
envs:
  ORDER: {order}
run: |
  sleep 1
  echo first >> $ORDER
---
name: second
envs:
  ORDER: {order}
run: |
  grep -qx first $ORDER || exit 9
  echo second >> $ORDER
---
name: third
run: exit 3
---
name: fourth
envs:
  ORDER: {order}
run: echo fourth >> $ORDER
""")
        check = self.h.herd("check", pipeline)
        self.assertIn(b"a pipeline 'hyf-pipe' of 4 tasks", check.stdout)
        p = self.h.herd("launch", "-c", "hyf-pipe", "-y", pipeline, check=False, timeout=400)
        err = p.stderr.decode(errors="replace")
        self.assertEqual(p.returncode, 100, err[-3000:])
        self.assertEqual(read(order), "first\nsecond\n")
        for i, name in enumerate(["first", "second", "third"], 1):
            self.assertIn(f"Pipeline hyf-pipe: task {i} of 4 ({name}) on cluster hyf-pipe", err)
        self.assertNotIn("task 4 of 4", err)
        self.assertIn("Pipeline stopped: task 3 of 4 did not succeed; the 1 after it did not run",
                      err)
        # All three ran as jobs of the one cluster, in order.
        jobs = json.loads(self.h.herd("queue", "hyf-pipe", "-o", "json").stdout)
        self.assertEqual(sorted((j["id"], j["name"], j["status"]) for j in jobs),
                         [(1, "first", "SUCCEEDED"), (2, "second", "SUCCEEDED"),
                          (3, "third", "FAILED")])
        # exec takes one task and says so.
        p = self.h.herd("exec", "hyf-pipe", pipeline, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"a second task (YAML document)", p.stderr)
        self.h.herd("down", "hyf-pipe", "-y")
        self.assertEqual(namespaces_of("hyf-pipe"), [])

    def test_a_git_workdir_is_cloned_at_its_ref_and_synced(self):
        repo = os.path.join(self.h.dir, "repo")
        git("init", "-q", repo)
        with open(os.path.join(repo, "version.txt"), "w") as f:
            f.write("one\n")
        git("add", "version.txt", cwd=repo)
        git("commit", "-q", "-m", "one", cwd=repo)
        git("checkout", "-q", "-b", "feature", cwd=repo)
        with open(os.path.join(repo, "version.txt"), "w") as f:
            f.write("two\n")
        git("commit", "-q", "-am", "two", cwd=repo)
        git("checkout", "-q", "main", cwd=repo)
        task = self.write("gitwd.yaml", f"""name: hyf-git
workdir:
  url: file://{repo}
  ref: feature
run: echo "version=$(cat version.txt) in $PWD"
""")
        p = self.h.herd("launch", "-c", "hyf-git", "-y", task, timeout=400)
        out = p.stdout.decode(errors="replace")
        self.assertRegex(out, r"version=two in \S*sky_workdir")
        # The clone is gone once the launch synced it.
        clones = os.path.join(self.h.env["HERD_HOME"], "git-workdirs")
        self.assertEqual(os.listdir(clones), [])
        # A ref that does not exist: one line naming it, nothing run.
        bad = self.write("gitwd-bad.yaml", f"workdir:\n  url: file://{repo}\n  ref: nosuch\n"
                                           "run: echo never\n")
        p = self.h.herd("exec", "hyf-git", bad, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"workdir: cannot clone file://{repo} at nosuch".encode(), p.stderr)
        self.assertNotIn(b"never", p.stdout)
        self.assertEqual(os.listdir(clones), [])
        self.h.herd("down", "hyf-git", "-y")

    def test_a_managed_job_that_exits_with_a_recover_code_is_recovered_not_failed(self):
        marker = os.path.join(self.shared, "exited-33-once")
        task = self.write("recover.yaml", f"""name: hyf-rec
resources:
  job_recovery:
    max_restarts_on_errors: 0
    recover_on_exit_codes: [33]
envs:
  MARKER: {marker}
run: |
  if [ ! -e $MARKER ]; then touch $MARKER; echo "attempt $HERD_ATTEMPT exits 33"; exit 33; fi
  echo "attempt $HERD_ATTEMPT succeeds"
""")
        p = self.h.herd("jobs", "launch", "-d", "-y", task)
        job_id = int(re.search(rb"Managed job ID: (\d+)", p.stdout).group(1))
        deadline = time.time() + 300
        while time.time() < deadline:
            j = {j["id"]: j for j in json.loads(self.h.herd("jobs", "queue", "-o",
                                                            "json").stdout)}[job_id]
            if j["status"] in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_NO_RESOURCE",
                               "FAILED_CONTROLLER", "CANCELLED"):
                break
            time.sleep(0.5)
        self.assertEqual(j["status"], "SUCCEEDED", j)
        self.assertEqual([a["outcome"] for a in j["attempts"]], ["USER_FAILED", "SUCCEEDED"])
        self.assertIn("exited with 33, one of recover_on_exit_codes", j["attempts"][0]["reason"])
        self.assertEqual(j["recoveries"], 1)
        logs = self.h.herd("jobs", "logs", str(job_id), check=False).stdout.decode()
        self.assertIn("attempt 1 exits 33", logs)
        self.assertIn("attempt 2 succeeds", logs)
        self.assertEqual([c for c in self.h.clusters() if c.startswith("hyf-rec")], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
