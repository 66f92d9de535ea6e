"""Unit tests of the herd Python SDK, without a cluster: the task YAML it writes, the argv it
gives the CLI (a fake `herd` named by $HERD records it and answers with canned output), how CLI
failures and exit codes come back, and examples/mingpt-ddp/sdk_train.py on the same fake.

Run: /usr/bin/python3 python/tests/test_sdk_unit.py
Optional: HERD_CHECK=<path of a real herd binary> also checks that `herd check` reads the YAML
back to the same values."""

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from contextlib import redirect_stderr, redirect_stdout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import herd  # noqa: E402
from herd import yaml_emit  # noqa: E402

SDK_TRAIN = os.path.join(REPO, "examples", "mingpt-ddp", "sdk_train.py")

# The fake CLI. Per call it appends {"argv", "task", "task_mode"} to $FAKE_HERD_LOG ("task": the
# text of the YAML file it was given) and answers from $FAKE_HERD_SCRIPT: {verb: {"stdout",
# "stderr", "rc", "wait_for"}}; "wait_for" makes it wait until that file exists.
FAKE_HERD = textwrap.dedent("""\
    #!{python}
    import json, os, sys, time
    args = sys.argv[1:]
    entry = {{"argv": args}}
    for a in args:
        if a.endswith(".yaml") and os.path.exists(a):
            entry["task"] = open(a, encoding="utf-8").read()
            entry["task_mode"] = os.stat(a).st_mode & 0o777
    with open(os.environ["FAKE_HERD_LOG"], "a") as f:
        f.write(json.dumps(entry) + "\\n")
    with open(os.environ["FAKE_HERD_SCRIPT"]) as f:
        answer = json.load(f).get(args[0] if args else "", {{}})
    while answer.get("wait_for") and not os.path.exists(answer["wait_for"]):
        time.sleep(0.01)
    sys.stderr.write(answer.get("stderr", ""))
    sys.stderr.flush()
    sys.stdout.write(answer.get("stdout", ""))
    sys.exit(answer.get("rc", 0))
    """)

LAUNCH_REPLY = '{"cluster": "c1", "job_id": 3, "head_ip": "10.213.1.1"}\n'


class FakeHerdTest(unittest.TestCase):
    """Each test gets its own fake CLI in a temporary directory, removed afterwards."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="herd-sdk-unit-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.fake = os.path.join(self.dir, "herd")
        with open(self.fake, "w") as f:
            f.write(FAKE_HERD.format(python=sys.executable))
        os.chmod(self.fake, 0o755)
        self.log = os.path.join(self.dir, "calls.jsonl")
        self.script = os.path.join(self.dir, "script.json")
        self.answer({})
        # Local mode whatever the user running the tests is logged in to.
        self.env = {"HERD": self.fake, "FAKE_HERD_LOG": self.log, "FAKE_HERD_SCRIPT": self.script,
                    "HERD_API_SERVER": "local"}
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        self.addCleanup(self._restore_env, saved)

    @staticmethod
    def _restore_env(saved):
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def answer(self, script):
        with open(self.script, "w") as f:
            json.dump(script, f)

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def argvs(self):
        return [c["argv"] for c in self.calls()]


def seed_task():
    """The seed's SDK task (SkyPilot quickstart), unchanged but for the module name."""
    return herd.Task(
        name="minGPT-ddp",
        resources=herd.Resources(cpus=4, accelerators="L4:4"),
        setup=[
            "git clone --depth 1 https://github.com/pytorch/examples || true",
            "cd examples",
            "git filter-branch --prune-empty --subdirectory-filter distributed/minGPT-ddp",
            "uv pip install --system -r requirements.txt",
        ],
        run=[
            "cd examples/mingpt",
            "export LOGLEVEL=INFO",
            "torchrun --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE main.py",
        ],
    )


class TaskYamlTest(unittest.TestCase):

    def test_seed_task_yaml(self):
        self.assertEqual(seed_task().to_yaml(), textwrap.dedent("""\
            name: "minGPT-ddp"
            resources:
              cpus: 4
              accelerators: "L4:4"
            setup: |-
              git clone --depth 1 https://github.com/pytorch/examples || true
              cd examples
              git filter-branch --prune-empty --subdirectory-filter distributed/minGPT-ddp
              uv pip install --system -r requirements.txt
            run: |-
              cd examples/mingpt
              export LOGLEVEL=INFO
              torchrun --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE main.py
            """))

    def test_lists_are_joined_with_newlines_and_strings_kept(self):
        t = herd.Task(setup=["a", "", "b"], run="echo hi\n")
        self.assertEqual(t.setup, "a\n\nb")
        self.assertEqual(t.run, "echo hi\n")
        # An empty line stays empty; a trailing newline is kept with "|" (not "|-").
        self.assertEqual(t.to_yaml(), "setup: |-\n  a\n\n  b\nrun: |\n  echo hi\n")
        self.assertEqual(herd.Task(run=[]).run, "")
        self.assertEqual(herd.Task(run=["only"]).to_yaml(), 'run: "only"\n')

    def test_all_fields_in_order(self):
        t = herd.Task(
            "full", num_nodes=2, workdir="/src/proj", file_mounts={"/data": "/local/data"},
            envs={"N": 2, "F": 0.5, "B": True, "S": "x", "REQ": None}, secrets={"TOKEN": "t0p"},
            resources=herd.Resources(cpus="4+", memory=32, accelerators={"L4": 4},
                                     infra="aws/us-east-1", ports=[8080, "10000-10100"],
                                     disk_size=100, use_spot=True,
                                     image_id="docker:nvcr.io/nvidia/pytorch:24.01-py3"),
            setup="pip install x", run="python main.py")
        self.assertEqual(t.to_yaml(), textwrap.dedent("""\
            name: "full"
            num_nodes: 2
            resources:
              cpus: "4+"
              memory: 32
              accelerators: "L4:4"
              infra: "aws/us-east-1"
              ports:
                - 8080
                - "10000-10100"
              disk_size: 100
              use_spot: true
              image_id: "docker:nvcr.io/nvidia/pytorch:24.01-py3"
            envs:
              "N": "2"
              F: "0.5"
              B: "True"
              S: "x"
              REQ: null
            secrets:
              TOKEN: "t0p"
            workdir: "/src/proj"
            file_mounts:
              "/data": "/local/data"
            setup: "pip install x"
            run: "python main.py"
            """))
        self.assertNotIn("t0p", repr(t))

    def test_empty_task_and_resources(self):
        self.assertEqual(herd.Task().to_yaml(), "")
        self.assertEqual(herd.Task(resources=herd.Resources()).to_yaml(), "")
        self.assertEqual(herd.Resources(accelerators={"A100": 8, "H100": 8}).to_yaml_config(),
                         {"accelerators": ["A100:8", "H100:8"]})
        self.assertEqual(herd.Resources(accelerators="H100", cpus=0.5).to_yaml_config(),
                         {"cpus": 0.5, "accelerators": "H100"})
        r = herd.Resources(cpus=4, accelerators="L4:4")
        self.assertEqual(r.copy(cpus=8).to_yaml_config(), {"cpus": 8, "accelerators": "L4:4"})
        self.assertEqual(r.cpus, 4)

    def test_strings_are_quoted_and_escaped(self):
        t = herd.Task(envs={"Q": 'say "hi" \\ there', "TAB": "a\tb", "U": "héllo ✓",
                            "CTL": "x\x01\x7f\u2028", "NUM": "007", "Y": "yes"},
                      file_mounts={"~/.netrc": "/abs/.netrc"})
        self.assertEqual(t.to_yaml(), textwrap.dedent("""\
            envs:
              Q: "say \\"hi\\" \\\\ there"
              TAB: "a\\tb"
              U: "héllo ✓"
              CTL: "x\\x01\\x7f\\u2028"
              NUM: "007"
              "Y": "yes"
            file_mounts:
              "~/.netrc": "/abs/.netrc"
            """))
        self.assertEqual(yaml_emit.quote("\U0001F600\x85"), '"\U0001F600\\x85"')
        # Keys YAML 1.1 reads as booleans or null (y, N, yes, null, ...) are quoted too.
        self.assertEqual(yaml_emit.dump({"yes": 1, "a-b": 2, "ok_1": 3, "Null": 4}),
                         '"yes": 1\n"a-b": 2\nok_1: 3\n"Null": 4\n')

    def test_scripts_a_literal_block_cannot_hold_are_quoted(self):
        for script in ["  indented first\nline", "a\n \nb", "tab\there\nx", "two\n\n",
                       "\nleading newline", "cr\r\nlf"]:
            with self.subTest(script=script):
                self.assertEqual(herd.Task(run=script).to_yaml(),
                                 "run: " + yaml_emit.quote(script) + "\n")
        # Indentation after the first line and trailing spaces are fine in a block.
        self.assertEqual(herd.Task(run="for i in 1; do\n  echo $i  \ndone").to_yaml(),
                         "run: |-\n  for i in 1; do\n    echo $i  \n  done\n")

    def test_relative_paths_are_made_absolute_from_the_current_directory(self):
        cwd = os.getcwd()
        tmp = tempfile.mkdtemp(prefix="herd-sdk-cwd-")
        self.addCleanup(shutil.rmtree, tmp, True)
        os.chdir(tmp)
        self.addCleanup(os.chdir, cwd)
        t = herd.Task(workdir=".", file_mounts={"/r/a": "data/a", "/r/h": "~/x",
                                                "/r/v": "${HOME}/y", "/r/s3": "s3://b/k"})
        real = os.path.realpath(tmp)
        self.assertEqual(os.path.realpath(t.workdir), real)
        self.assertEqual(os.path.realpath(os.path.dirname(t.file_mounts["/r/a"])),
                         os.path.join(real, "data"))
        self.assertEqual(t.file_mounts["/r/h"], os.path.expanduser("~/x"))
        self.assertEqual(t.file_mounts["/r/v"], "${HOME}/y")
        self.assertEqual(t.file_mounts["/r/s3"], "s3://b/k")
        self.assertEqual(herd.Task(workdir="${HOME}/w").workdir, "${HOME}/w")

    def test_invalid_arguments_raise(self):
        cases = [
            (ValueError, lambda: herd.Task(envs={"1BAD": "x"})),
            (ValueError, lambda: herd.Task(envs={"A-B": "x"})),
            (TypeError, lambda: herd.Task(envs={"A": ["x"]})),
            (ValueError, lambda: herd.Task(num_nodes=0)),
            (ValueError, lambda: herd.Task(num_nodes=True)),
            (TypeError, lambda: herd.Task(run=123)),
            (TypeError, lambda: herd.Task(setup=["ok", 1])),
            (TypeError, lambda: herd.Task(resources={"cpus": 4})),
            (TypeError, lambda: herd.Resources(cpus=True)),
            (ValueError, lambda: herd.Resources(cpus=0)),
            (TypeError, lambda: herd.Resources(accelerators=4)),
            (ValueError, lambda: herd.Resources(disk_size=-1)),
            (TypeError, lambda: herd.Resources(use_spot="yes")),
            (TypeError, lambda: herd.Resources(image_id="")),
            (TypeError, lambda: herd.Resources(image_id=["docker:x"])),
            (ValueError, lambda: herd.Task(run="\ud800").to_yaml()),
            (ValueError, lambda: herd.Task(resources=herd.Resources(
                cpus=float("inf"))).to_yaml()),
        ]
        for error, make in cases:
            with self.subTest(error=error):
                self.assertRaises(error, make)

    def test_to_yaml_file_is_private(self):
        tmp = tempfile.mkdtemp(prefix="herd-sdk-yaml-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "t.yaml")
        text = herd.Task("n", secrets={"K": "v"}).to_yaml(path)
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read(), text)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)


@unittest.skipUnless(os.environ.get("HERD_CHECK") and os.path.exists(os.environ["HERD_CHECK"]),
                     "HERD_CHECK (a built herd binary) not given")
class HerdCheckReadsBackTest(unittest.TestCase):
    """The real task parser reads the emitted YAML back to exactly the SDK's values."""

    def check(self, task):
        tmp = tempfile.mkdtemp(prefix="herd-sdk-check-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "task.yaml")
        task.to_yaml(path)
        p = subprocess.run([os.environ["HERD_CHECK"], "check", path, "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_scripts_envs_and_resources_round_trip(self):
        scripts = ["a\n\nb\n", "  lead\nx", "t\tab\n", "two\n\n", "é ✓ \U0001F600",
                   'q "x" \\ y', "x\x01\x7f", "for i in 1; do\n  echo $i  \ndone"]
        for script in scripts:
            with self.subTest(script=script):
                got = self.check(herd.Task("rt", setup=script, run=[script, "end"],
                                           envs={"V": script, "yes": "no"}))
                self.assertEqual(got["setup"], script)
                self.assertEqual(got["run"], script + "\nend")
                self.assertEqual(got["envs"], {"V": script, "yes": "no"})
        got = self.check(herd.Task("r", num_nodes=3, workdir="/tmp", resources=herd.Resources(
            cpus="4+", memory=16, accelerators="L4:4", disk_size=50)))
        self.assertEqual(got["name"], "r")
        self.assertEqual(got["num_nodes"], 3)
        self.assertEqual(got["workdir"], "/tmp")
        r = got["resources"]
        self.assertEqual((r["cpus"], r["cpus_at_least"], r["memory_gb"]), (4, True, 16))
        self.assertEqual((r["accelerator"], r["accelerator_count"], r["disk_size"]),
                         ("L4", 4, 50))


class LaunchExecTest(FakeHerdTest):

    def test_launch_argv_task_file_and_result(self):
        self.answer({"launch": {"stdout": LAUNCH_REPLY, "stderr": "Provisioning 1 node...\n"}})
        task = seed_task()
        err = io.StringIO()
        job_id, handle = herd.stream_and_get(herd.launch(task=task, cluster_name="c1"),
                                             output=err)
        self.assertEqual(job_id, 3)
        self.assertEqual(handle, herd.ClusterHandle(cluster_name="c1", head_ip="10.213.1.1"))
        self.assertEqual(err.getvalue(), "Provisioning 1 node...\n")
        (call,) = self.calls()
        argv = call["argv"]
        self.assertEqual(argv[:3], ["launch", "-c", "c1"])
        self.assertTrue(argv[3].endswith(".yaml"))
        self.assertEqual(argv[4:], ["-d", "-y", "-o", "json"])
        self.assertEqual(call["task"], task.to_yaml())
        self.assertEqual(call["task_mode"], 0o600)
        self.assertFalse(os.path.exists(argv[3]), "the temporary task file was left behind")

    def test_launch_flags(self):
        self.answer({"launch": {"stdout": LAUNCH_REPLY}})
        herd.get(herd.launch(herd.Task(run="x"), "c1", idle_minutes_to_autostop=10, down=True,
                             no_setup=True))
        argv = self.argvs()[0]
        self.assertEqual(argv[4:], ["-d", "-y", "-i", "10", "--down", "--no-setup", "-o",
                                    "json"])
        self.assertRaises(ValueError, herd.launch, herd.Task(run="x"), "c1",
                          idle_minutes_to_autostop=-1)
        self.assertRaises(ValueError, herd.launch, herd.Task(run="x"), "")
        self.assertRaises(TypeError, herd.launch, 42, "c1")

    def test_launch_without_a_name_makes_one_and_the_cli_can_rename(self):
        self.answer({"launch": {"stdout": '{"job_id": 1}\n'}})
        job_id, handle = herd.get(herd.launch("echo hi"))
        argv = self.argvs()[0]
        self.assertRegex(argv[2], r"^herd-[0-9a-f]{6}$")
        self.assertEqual((job_id, handle.cluster_name, handle.head_ip), (1, argv[2], None))
        self.assertEqual(self.calls()[0]["task"], 'run: "echo hi"\n')

    def test_exec_argv(self):
        self.answer({"exec": {"stdout": '{"cluster": "c1", "job_id": 4, "head_ip": "h"}'}})
        job_id, handle = herd.stream_and_get(herd.exec(herd.Task(run="x"), cluster_name="c1"),
                                             output=io.StringIO())
        self.assertEqual((job_id, handle.head_ip), (4, "h"))
        argv = self.argvs()[0]
        self.assertEqual(argv[:2], ["exec", "c1"])
        self.assertEqual(argv[3:], ["-d", "-o", "json"])

    def test_launch_returns_before_the_cli_finishes(self):
        go = os.path.join(self.dir, "go")
        self.answer({"launch": {"stdout": LAUNCH_REPLY, "wait_for": go}})
        request = herd.launch(herd.Task(run="x"), "c1")
        self.assertFalse(request.done())
        open(go, "w").close()
        self.assertEqual(herd.get(request)[0], 3)
        self.assertTrue(request.done())
        self.assertEqual(herd.get(request)[0], 3, "a result can be read twice")

    def test_progress_shows_only_when_streamed(self):
        self.answer({"launch": {"stdout": LAUNCH_REPLY, "stderr": "step 1\rstep 2\n"}})
        err = io.StringIO()
        with redirect_stderr(err):
            herd.get(herd.launch(herd.Task(run="x"), "c1"))
        self.assertEqual(err.getvalue(), "")
        with redirect_stderr(err):
            herd.stream_and_get(herd.launch(herd.Task(run="x"), "c1"))
        self.assertEqual(err.getvalue(), "step 1\rstep 2\n")

    def test_launch_failure_raises_with_message_and_exit_code(self):
        self.answer({"launch": {"stderr": "Provisioning...\nError: no node has 4 CPUs\n",
                                "rc": 2}})
        with self.assertRaises(herd.HerdError) as cm:
            herd.stream_and_get(herd.launch(herd.Task(run="x"), "c1"), output=io.StringIO())
        e = cm.exception
        self.assertEqual(e.returncode, 2)
        self.assertEqual(e.message, "herd launch failed: Error: no node has 4 CPUs")
        self.assertIn("Provisioning...", e.stderr)
        self.assertEqual(e.command[0], self.fake)
        self.assertIn("exit code 2", str(e))
        self.assertFalse(os.path.exists(self.argvs()[0][3]))

    def test_quiet_failure_carries_all_of_stderr(self):
        self.answer({"launch": {"stderr": "task.yaml:1:1: run: bad\ntask.yaml:2:1: x: bad\n",
                                "rc": 2}})
        with self.assertRaises(herd.HerdError) as cm:
            herd.get(herd.launch(herd.Task(run="x"), "c1"))
        self.assertIn("run: bad\ntask.yaml:2:1: x: bad", cm.exception.message)

    def test_reply_without_a_job_raises(self):
        for stdout in ["", "not json", '{"cluster": "c1"}', '{"job_id": "3"}', "[1]"]:
            with self.subTest(stdout=stdout):
                self.answer({"launch": {"stdout": stdout}})
                with self.assertRaises(herd.HerdError) as cm:
                    herd.get(herd.launch(herd.Task(run="x"), "c1"))
                self.assertEqual(cm.exception.returncode, 0)
                self.assertIn("no job", cm.exception.message)

    def test_progress_line_before_the_json_is_tolerated(self):
        self.answer({"launch": {"stdout": "note\n" + LAUNCH_REPLY}})
        self.assertEqual(herd.get(herd.launch(herd.Task(run="x"), "c1"))[0], 3)

    def test_missing_binary(self):
        os.environ["HERD"] = os.path.join(self.dir, "no-such-herd")
        # The SDK's task directories go to a temporary directory of this test's own: the
        # system's may hold other tests' directories, empty for a moment (tests run in parallel).
        private = os.path.join(self.dir, "tmp")
        os.mkdir(private)
        saved, tempfile.tempdir = tempfile.tempdir, private
        try:
            with self.assertRaises(herd.HerdError) as cm:
                herd.launch(herd.Task(run="x"), "c1")
        finally:
            tempfile.tempdir = saved
        self.assertEqual(cm.exception.returncode, 127)
        self.assertIn("no-such-herd", cm.exception.message)
        self.assertEqual(os.listdir(private), [], "a task directory was left behind")
        with self.assertRaises(herd.HerdError):
            herd.down("c1")

    def test_non_requests_pass_through(self):
        self.assertIsNone(herd.stream_and_get(None))
        self.assertEqual(herd.get([1]), [1])

    def test_unwaited_launch_finishes_before_the_script_exits(self):
        done = os.path.join(self.dir, "done")
        self.answer({"launch": {"stdout": LAUNCH_REPLY, "stderr": "provisioned\n",
                                "wait_for": done}})
        code = (f"import sys; sys.path.insert(0, {os.path.join(REPO, 'python')!r}); "
                "import herd, threading, time; herd.launch(herd.Task(run='x'), 'c1'); "
                f"threading.Timer(0.3, lambda: open({done!r}, 'w').close()).start()")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, env=os.environ)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("waiting for `herd launch` of cluster c1", p.stderr)
        self.assertIn("provisioned", p.stderr)
        self.assertEqual(len(self.calls()), 1)


class LogsTest(FakeHerdTest):

    def tail(self, *args, **kwargs):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = herd.tail_logs(*args, **kwargs)
        return code, out.getvalue(), err.getvalue()

    def test_follow_streams_stdout_and_returns_exit_code(self):
        log = "(head, rank=0, pid=1) hello\n(worker1, rank=1, pid=2, ip=10.0.0.2) hi\n"
        self.answer({"logs": {"stdout": log, "stderr": "Job finished (status: SUCCEEDED).\n"}})
        code, out, err = self.tail("c1", 7, follow=True)
        self.assertEqual((code, out), (0, log))
        self.assertIn("Job finished", err)
        self.assertEqual(self.argvs(), [["logs", "c1", "7"]])

    def test_output_the_terminal_cannot_encode_is_replaced_not_fatal(self):
        self.answer({"logs": {"stdout": "loss ✓ 2.5\n" * 20000, "rc": 100}})
        raw = io.BytesIO()
        ascii_out = io.TextIOWrapper(raw, encoding="ascii", write_through=True)
        with redirect_stdout(ascii_out):
            code = herd.tail_logs("c1", 1)
        self.assertEqual(code, 100)
        self.assertEqual(raw.getvalue(), b"loss ? 2.5\n" * 20000)

    def test_no_follow_and_latest_job(self):
        self.tail("c1", 7, follow=False)
        self.tail("c1")
        self.assertEqual(self.argvs(), [["logs", "c1", "7", "--no-follow"], ["logs", "c1"]])

    def test_job_exit_codes_pass_through(self):
        for rc in (herd.JOB_FAILED, herd.JOB_NOT_FINISHED, herd.JOB_NOT_FOUND,
                   herd.JOB_CANCELLED):
            with self.subTest(rc=rc):
                self.answer({"logs": {"stdout": "partial\n", "rc": rc}})
                self.assertEqual(self.tail("c1", 1)[:2], (rc, "partial\n"))

    def test_other_exit_codes_raise(self):
        self.answer({"logs": {"stderr": "Error: cluster 'nope' does not exist\n", "rc": 1}})
        with self.assertRaises(herd.HerdError) as cm:
            self.tail("nope", 1)
        self.assertEqual(cm.exception.returncode, 1)
        self.assertEqual(cm.exception.message,
                         "herd logs failed: Error: cluster 'nope' does not exist")
        self.assertRaises(ValueError, herd.tail_logs, "c1", -1)
        self.assertRaises(ValueError, herd.tail_logs, "c1", "3")


class ClusterCallsTest(FakeHerdTest):
    JOBS = [{"id": 1, "name": "a", "status": "SUCCEEDED", "exit_codes": [0, 0]},
            {"id": 2, "name": "b", "status": "FAILED", "exit_codes": [1, 137],
             "first_failed_rank": 0, "first_failed_node": "head", "message": "x"},
            {"id": 3, "name": "c", "status": "RUNNING", "exit_codes": []}]

    def test_queue(self):
        self.answer({"queue": {"stdout": json.dumps(self.JOBS)}})
        self.assertEqual(herd.queue("c1"), self.JOBS)
        self.assertEqual([j["id"] for j in herd.queue("c1", skip_finished=True)], [3])
        self.assertEqual(herd.job_status("c1", [2, 9]), {2: "FAILED", 9: None})
        self.assertEqual(herd.job_status("c1"), {3: "RUNNING"})
        self.assertEqual(self.argvs()[0], ["queue", "c1", "-o", "json"])

    def test_status(self):
        clusters = [{"name": "a", "status": "UP", "nodes": []},
                    {"name": "b", "status": "STOPPED", "nodes": []}]
        self.answer({"status": {"stdout": json.dumps(clusters)}})
        self.assertEqual(herd.status(), clusters)
        self.assertEqual(herd.status("b"), clusters[1:])
        self.assertEqual(herd.status(["a", "zz"]), clusters[:1])
        self.assertEqual(self.argvs()[0], ["status", "-o", "json"])

    def test_bad_json_raises(self):
        self.answer({"status": {"stdout": "NAME STATUS\n"}, "queue": {"stdout": "{}"}})
        self.assertRaises(herd.HerdError, herd.status)
        self.assertRaises(herd.HerdError, herd.queue, "c1")

    def test_cancel_down_stop_start_argv(self):
        herd.cancel("c1", 5)
        herd.cancel("c1", job_ids=[5, 6])
        herd.cancel("c1", all=True)
        herd.down("c1")
        herd.stop("c1")
        herd.start("c1")
        self.assertEqual(self.argvs(), [
            ["cancel", "c1", "5", "-y"], ["cancel", "c1", "5", "6", "-y"],
            ["cancel", "c1", "-a", "-y"], ["down", "c1", "-y"], ["stop", "c1", "-y"],
            ["start", "c1", "-y"]])
        self.assertRaises(ValueError, herd.cancel, "c1")
        self.assertRaises(ValueError, herd.cancel, "c1", [])
        self.assertRaises(ValueError, herd.cancel, "c1", 1, all=True)

    def test_failures_carry_stderr_and_exit_code(self):
        self.answer({"down": {"stderr": "Error: cluster 'c1' does not exist\n", "rc": 1},
                     "queue": {"stderr": "Error: head unreachable\n", "rc": 3}})
        with self.assertRaises(herd.HerdError) as cm:
            herd.down("c1")
        self.assertEqual((cm.exception.returncode, cm.exception.message),
                         (1, "herd down failed: Error: cluster 'c1' does not exist"))
        with self.assertRaises(herd.HerdError) as cm:
            herd.queue("c1")
        self.assertEqual(cm.exception.returncode, 3)


class SdkTrainScriptTest(FakeHerdTest):
    """examples/mingpt-ddp/sdk_train.py against the fake CLI and a fake scp."""

    def setUp(self):
        super().setUp()
        bin_dir = os.path.join(self.dir, "bin")
        os.mkdir(bin_dir)
        self.scp_log = os.path.join(self.dir, "scp.log")
        with open(os.path.join(bin_dir, "scp"), "w") as f:
            f.write(f'#!/bin/sh\necho "$@" >> {self.scp_log}\nexit ${{FAKE_SCP_RC:-0}}\n')
        os.chmod(os.path.join(bin_dir, "scp"), 0o755)
        self.path = bin_dir + os.pathsep + os.environ.get("PATH", "")

    def run_script(self, *args, scp_rc=0):
        env = dict(os.environ, PATH=self.path, FAKE_SCP_RC=str(scp_rc))
        return subprocess.run([sys.executable, SDK_TRAIN, *args], capture_output=True,
                              text=True, timeout=120, env=env, cwd=self.dir)

    def test_success_launches_follows_copies_and_tears_down(self):
        self.answer({"launch": {"stdout": '{"cluster": "m", "job_id": 1, "head_ip": "h"}'},
                     "logs": {"stdout": "[CPU0] Epoch 3 | Training snapshot saved\n"}})
        p = self.run_script("--cluster", "m", "--snapshot-out", "out.pt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Training snapshot saved", p.stdout)
        calls = self.calls()
        self.assertEqual([c["argv"][0] for c in calls], ["launch", "logs", "down"])
        self.assertEqual(calls[1]["argv"], ["logs", "m", "1"])
        self.assertEqual(calls[2]["argv"], ["down", "m", "-y"])
        with open(self.scp_log) as f:
            self.assertEqual(f.read().split(),
                             ["-q", "-F", os.path.expanduser("~/.ssh/config"), "-o",
                              "BatchMode=yes", "m:sky_workdir/gpt_snapshot.pt", "out.pt"])
        task = calls[0]["task"]
        here = os.path.dirname(SDK_TRAIN)
        self.assertIn("num_nodes: 2\n", task)
        self.assertIn(f"workdir: {yaml_emit.quote(here)}\n", task)
        self.assertIn('  NPROC_PER_NODE: "2"\n', task)
        self.assertIn("  bash install_torchrun_shim.sh\n", task)
        self.assertIn("    --node_rank=${SKYPILOT_NODE_RANK} \\\n", task)
        self.assertNotIn("MINGPT_FAIL_RANK", task)

    def test_run_matches_the_multinode_cpu_yaml(self):
        # The SDK script's run is the YAML's `run: |` block, line for line.
        with open(os.path.join(os.path.dirname(SDK_TRAIN), "train-multinode-cpu.yaml")) as f:
            yaml_text = f.read()
        block = yaml_text.split("\nrun: |\n", 1)[1]
        yaml_run = [line[2:] for line in block.splitlines()]
        self.answer({"launch": {"stdout": LAUNCH_REPLY}})
        self.run_script("--keep")
        task = self.calls()[0]["task"]
        sdk_run = [line[2:] for line in task.split("\nrun: |-\n", 1)[1].splitlines()]
        self.assertEqual(sdk_run, yaml_run)

    def test_fail_rank_exits_with_the_log_code_and_still_tears_down(self):
        self.answer({"launch": {"stdout": LAUNCH_REPLY}, "logs": {"rc": 100}})
        p = self.run_script("--fail-rank", "1", "--num-nodes", "3")
        self.assertEqual(p.returncode, 100, p.stderr)
        calls = self.calls()
        self.assertEqual([c["argv"][0] for c in calls], ["launch", "logs", "down"])
        self.assertIn('  MINGPT_FAIL_RANK: "1"\n', calls[0]["task"])
        self.assertIn("num_nodes: 3\n", calls[0]["task"])
        self.assertFalse(os.path.exists(self.scp_log), "scp ran after a failed job")

    def test_keep_leaves_the_cluster_and_scp_failure_is_an_error(self):
        self.answer({"launch": {"stdout": LAUNCH_REPLY}})
        p = self.run_script("--keep", scp_rc=1)
        self.assertEqual(p.returncode, 1)
        self.assertIn("could not copy gpt_snapshot.pt", p.stderr)
        self.assertEqual([c["argv"][0] for c in self.calls()], ["launch", "logs"])

    def test_launch_failure_reports_and_tears_down(self):
        self.answer({"launch": {"stderr": "Error: out of addresses\n", "rc": 2}})
        p = self.run_script()
        self.assertEqual(p.returncode, 1)
        self.assertIn("herd launch failed: Error: out of addresses", p.stderr)
        self.assertEqual([c["argv"][0] for c in self.calls()], ["launch", "down"])


if __name__ == "__main__":
    unittest.main()
