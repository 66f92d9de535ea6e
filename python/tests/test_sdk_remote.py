"""Unit tests of the SDK's remote mode, without a cluster: a fake API server (http.server on
127.0.0.1, plain HTTP as the real client allows only to loopback) records what the SDK sends (the
command's args, cluster, task JSON, secrets, uploads, token) and answers with scripted frames
cut at arbitrary places. Also: the frame decoder on every split, the config file and its
environment overrides, api_login, errors with the CLI's exit codes, and the sky shim.

Run: /usr/bin/python3 python/tests/test_sdk_remote.py
Optional: HERD_CHECK=<path of a real herd binary> also runs the real CLI's remote mode against the
same fake server and checks that the SDK sends what it sends (args, task JSON, uploads)."""

import http.server
import io
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
import unittest
from contextlib import redirect_stderr, redirect_stdout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
import herd  # noqa: E402
from herd import _api  # noqa: E402

TOKEN = "herd_0123456789abcdef_" + "A" * 43
LAUNCH_REPLY = b'{"cluster": "c1", "job_id": 7, "head_ip": "10.213.1.1"}\n'


def frames(*items):
    """b"O 3\\nabc..." from ("O", b"abc"), ..."""
    return b"".join(tag.encode() + b" " + str(len(data)).encode() + b"\n" + data
                    for tag, data in items)


class FakeServer:
    """The routes the SDK uses. self.script: {verb: (frames bytes)}; self.calls: the /run bodies;
    self.uploads: {id: tar bytes}; self.seen_tokens: the Authorization headers."""

    def __init__(self):
        self.calls = []
        self.uploads = {}
        self.seen_tokens = []
        self.script = {}
        self.client_gone = threading.Event()
        self.rng = random.Random(7)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def authorized(self):
                auth = self.headers.get("Authorization", "")
                outer.seen_tokens.append(auth)
                if auth != f"Bearer {TOKEN}":
                    self.reply(401, {"error": "unauthenticated: the token is not valid",
                                     "code": "UNAUTHENTICATED"})
                    return False
                return True

            def body(self):
                return self.rfile.read(int(self.headers.get("Content-Length", "0")))

            def stream_until_closed(self, first):
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                piece = first
                try:
                    for _ in range(2000):  # 100 s at most
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                        piece = frames(("O", b""))
                        time.sleep(0.05)
                except OSError:
                    outer.client_gone.set()

            def do_GET(self):
                if not self.authorized():
                    return
                if self.path == "/api/v1/whoami":
                    return self.reply(200, {"user": "alice", "role": "user"})
                self.reply(404, {"error": "no such route", "code": "NOT_FOUND"})

            def do_POST(self):
                body = self.body()
                if not self.authorized():
                    return
                if self.path == "/api/v1/uploads":
                    uid = f"up-{len(outer.uploads):08x}"
                    outer.uploads[uid] = body
                    return self.reply(201, {"id": uid, "bytes": len(body)})
                if self.path != "/api/v1/run":
                    return self.reply(404, {"error": "no such route", "code": "NOT_FOUND"})
                call = json.loads(body)
                outer.calls.append(call)
                verb = call["args"][0]
                if verb == "jobs":
                    verb += "." + call["args"][1]
                answer = outer.script.get(verb)
                if isinstance(answer, tuple):  # (http status, error object)
                    return self.reply(*answer)
                if isinstance(answer, list):  # [frames]: then heartbeats until the client goes
                    return self.stream_until_closed(answer[0])
                if answer is None:
                    answer = frames(("X", b"0"))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-herd-frames")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                # HTTP chunks cut the frames anywhere, down to single bytes.
                i = 0
                while i < len(answer):
                    n = outer.rng.choice((1, 2, 3, 5, 8, 13, 64))
                    piece = answer[i:i + n]
                    i += n
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class RemoteTestBase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="herd-sdk-remote-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.server = FakeServer()
        self.addCleanup(self.server.close)
        env = {"HERD_HOME": os.path.join(self.dir, "herd"), "HERD_API_SERVER":
               self.server.endpoint, "HERD_API_TOKEN": TOKEN, "HERD_API_CA_CERT": None,
               # A CLI run by mistake would fail the tests loudly.
               "HERD": os.path.join(self.dir, "no-such-herd")}
        saved = {k: os.environ.get(k) for k in env}
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.addCleanup(self._restore, saved)

    @staticmethod
    def _restore(saved):
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def make_tree(self):
        """A workdir with a file and a subdirectory, a mount directory and a mount file."""
        work = os.path.join(self.dir, "work")
        os.makedirs(os.path.join(work, "pkg"))
        with open(os.path.join(work, "main.py"), "w") as f:
            f.write("print('hi')\n")
        with open(os.path.join(work, "pkg", "m.py"), "w") as f:
            f.write("X = 1\n")
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        with open(os.path.join(data, "a.txt"), "w") as f:
            f.write("a\n")
        one = os.path.join(self.dir, "one.cfg")
        with open(one, "w") as f:
            f.write("k=v\n")
        return work, data, one

    def task(self):
        work, data, one = self.make_tree()
        return herd.Task(
            name="train", num_nodes=2, workdir=work,
            resources=herd.Resources(cpus="4+", memory="32GB", accelerators={"L4": 4},
                                     infra="AWS/us-east-1", ports=[8080, "10000-10100"],
                                     disk_size=100, use_spot=True,
                                     image_id="docker:registry.local/train:1"),
            envs={"EPOCHS": 3, "DATA": "/data", "FLAG": True},
            secrets={"HF_TOKEN": "s3cret"},
            file_mounts={"/data": data, "~/one.cfg": one},
            setup=["pip install x", "echo set"], run="echo $EPOCHS")

    @staticmethod
    def members(tar_bytes):
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
            return sorted(m.name.lstrip("./") or "." for m in t.getmembers())


class FrameDecoderTest(unittest.TestCase):
    STREAM = frames(("R", b"req-1"), ("O", b""), ("E", b"progress\r"), ("O", b"x" * 300),
                    ("O", "é\n".encode()), ("X", b"100"))

    def decode(self, pieces):
        got = []
        d = _api.FrameDecoder(lambda tag, payload: got.append((tag, payload)))
        for p in pieces:
            d.feed(p)
        self.assertEqual(d.pending(), 0)
        return got

    def test_every_split_gives_the_same_frames(self):
        whole = self.decode([self.STREAM])
        self.assertEqual([t for t, _ in whole], ["R", "O", "E", "O", "O", "X"])
        self.assertEqual(whole[-1], ("X", b"100"))
        s = self.STREAM
        for i in range(len(s) + 1):
            self.assertEqual(self.decode([s[:i], s[i:]]), whole, i)
        for i in range(0, len(s), 7):
            for j in range(i, len(s), 11):
                self.assertEqual(self.decode([s[:i], s[i:j], s[j:]]), whole, (i, j))
        self.assertEqual(self.decode([s[i:i + 1] for i in range(len(s))]), whole)

    def test_malformed_headers_fail_and_stay_failed(self):
        for bad in (b"Z 1\nx", b"O x\n", b"O -1\n", b"O 999999999\n", b"O" + b"1" * 40):
            d = _api.FrameDecoder(lambda *a: None)
            with self.assertRaises(ValueError, msg=bad):
                d.feed(bad)
            with self.assertRaises(ValueError):
                d.feed(frames(("X", b"0")))


class ConfigTest(RemoteTestBase):
    def test_file_then_environment_overrides_and_local(self):
        for k in ("HERD_API_SERVER", "HERD_API_TOKEN"):
            os.environ.pop(k)
        self.assertIsNone(_api.load_config())
        _api.save_config(_api.ApiConfig("https://10.0.0.5:8443", "tok", "/ca dir/ca.crt"))
        path = _api.config_path()
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(_api.load_config(),
                         _api.ApiConfig("https://10.0.0.5:8443", "tok", "/ca dir/ca.crt"))
        os.environ["HERD_API_TOKEN"] = "other"
        os.environ["HERD_API_CA_CERT"] = "/x.crt"
        self.assertEqual(_api.load_config(),
                         _api.ApiConfig("https://10.0.0.5:8443", "other", "/x.crt"))
        os.environ["HERD_API_SERVER"] = "https://h:1"
        self.assertEqual(_api.load_config().endpoint, "https://h:1")
        os.environ["HERD_API_SERVER"] = "local"
        self.assertIsNone(_api.load_config())
        self.assertIsNone(herd.api_info())
        del os.environ["HERD_API_CA_CERT"]

    def test_hand_written_config_forms(self):
        os.environ.pop("HERD_API_SERVER")
        os.environ.pop("HERD_API_TOKEN")
        os.makedirs(_api.herd_home())
        with open(_api.config_path(), "w") as f:
            f.write("# mine\nother: 1\napi_server:\n    endpoint: 'https://a:1'  \n"
                    "    token: \"t\\\"x\"   # quoted\n")
        self.assertEqual(_api.load_config(), _api.ApiConfig("https://a:1", 't"x', ""))
        with open(_api.config_path(), "w") as f:
            f.write("api_server: 3\n")
        with self.assertRaises(herd.HerdError) as e:
            herd.status()
        self.assertEqual(e.exception.returncode, 2)
        self.assertIn("config.yaml:1:1: api_server: expected a mapping", str(e.exception))

    def test_endpoint_rules_as_the_cli(self):
        for url, what in (("http://10.1.2.3:80", "only allowed to a loopback"),
                          ("ftp://h", "must start with https://"),
                          ("https://h:1/api", "only a scheme, a host and a port")):
            with self.assertRaises(_api.ApiError) as e:
                _api.Client(_api.ApiConfig(url))
            self.assertIn(what, e.exception.message)
            self.assertEqual(e.exception.returncode, 2)
        self.assertEqual(_api.Client(_api.ApiConfig("https://h")).port, 443)
        self.assertFalse(_api.Client(_api.ApiConfig("http://[::1]:5")).tls)
        os.environ["HERD_API_SERVER"] = "http://10.1.2.3:80"
        with self.assertRaises(herd.HerdError) as e:
            herd.queue("c1")
        self.assertEqual(e.exception.returncode, 2)
        self.assertIn("plain http:// is only allowed to a loopback", str(e.exception))

    def test_api_login_checks_the_token_and_writes_the_config(self):
        for k in ("HERD_API_SERVER", "HERD_API_TOKEN"):
            os.environ.pop(k)
        with self.assertRaises(herd.HerdError) as e:
            herd.api_login(self.server.endpoint, "wrong")
        self.assertEqual(e.exception.returncode, 2)
        self.assertIn("unauthenticated: the token is not valid", str(e.exception))
        self.assertFalse(os.path.exists(_api.config_path()))
        ca = os.path.join(self.dir, "ca.crt")
        who = herd.api_login(self.server.endpoint, TOKEN, ca_cert=ca)
        self.assertEqual(who, {"user": "alice", "role": "user"})
        self.assertEqual(stat.S_IMODE(os.stat(_api.config_path()).st_mode), 0o600)
        with open(_api.config_path()) as f:
            self.assertEqual(f.read(), f"api_server:\n  endpoint: {self.server.endpoint}\n"
                             f"  token: {TOKEN}\n  ca_cert: {ca}\n")
        self.assertEqual(herd.api_info(), {"endpoint": self.server.endpoint, "ca_cert": ca})
        herd.api_logout()
        self.assertIsNone(herd.api_info())


class RemoteCallsTest(RemoteTestBase):
    def test_launch_sends_args_task_secrets_uploads_and_token(self):
        self.server.script["launch"] = frames(
            ("R", b"req-1"), ("E", b"Provisioning 2 nodes\r"), ("O", b""),
            ("E", b"Running setup\n"), ("O", LAUNCH_REPLY), ("X", b"0"))
        task = self.task()
        request = herd.launch(task, "c1", idle_minutes_to_autostop=10, down=True)
        progress = io.StringIO()
        job_id, handle = herd.stream_and_get(request, output=progress)
        self.assertEqual(job_id, 7)
        self.assertEqual(handle, herd.ClusterHandle("c1", "10.213.1.1"))
        self.assertEqual(progress.getvalue(), "Provisioning 2 nodes\rRunning setup\n")
        (call,) = self.server.calls
        self.assertEqual(call["args"], ["launch", "-c", "c1", "-d", "-i", "10", "--down", "-o",
                                        "json", "--task-json", "task.json"])
        self.assertEqual(call["cluster"], "c1")
        self.assertEqual(call["secrets"], {"HF_TOKEN": "s3cret"})
        self.assertEqual(set(self.server.seen_tokens), {f"Bearer {TOKEN}"})
        sent = json.loads(call["task"])
        self.assertEqual(sent, {
            "name": "train", "workdir": "workdir", "num_nodes": 2,
            "resources": {"cpus": 4, "cpus_at_least": True, "memory_gb": 32,
                          "memory_at_least": False, "accelerator": "L4",
                          "accelerator_count": 4, "infra": "aws/us-east-1",
                          "ports": ["8080", "10000-10100"], "disk_size": 100, "use_spot": True,
                          "instance_type": "", "container_image": "registry.local/train:1",
                          "any_of": [], "ordered": []},
            "envs": {"DATA": "/data", "EPOCHS": "3", "FLAG": "True"},
            # mounts/N in the order of the remote paths; a file keeps its name.
            "file_mounts": {"/data": "mounts/0", "~/one.cfg": "mounts/1/one.cfg"},
            "setup": "pip install x\necho set", "run": "echo $EPOCHS"})
        self.assertNotIn("s3cret", call["task"])
        self.assertEqual(sorted(call["uploads"]), ["mounts/0", "mounts/1", "workdir"])
        up = self.server.uploads
        self.assertEqual(self.members(up[call["uploads"]["workdir"]]),
                         [".", "main.py", "pkg", "pkg/m.py"])
        self.assertEqual(self.members(up[call["uploads"]["mounts/0"]]), [".", "a.txt"])
        self.assertEqual(self.members(up[call["uploads"]["mounts/1"]]), ["one.cfg"])

    def test_exec_and_command_strings(self):
        self.server.script["exec"] = frames(("R", b"r"), ("O", LAUNCH_REPLY), ("X", b"0"))
        self.assertEqual(herd.get(herd.exec("echo hi", "c1"))[0], 7)
        (call,) = self.server.calls
        self.assertEqual(call["args"], ["exec", "c1", "-d", "-o", "json", "--task-json",
                                        "task.json"])
        self.assertNotIn("uploads", call)
        self.assertNotIn("secrets", call)
        self.assertEqual(json.loads(call["task"])["run"], "echo hi")
        self.assertEqual(json.loads(call["task"])["resources"]["cpus_at_least"], False)

    def test_reads_parse_the_streamed_json(self):
        self.server.script["status"] = frames(
            ("O", b'[{"name": "c1", "status": "UP"}, '), ("O", b'{"name": "c2", "status": '
                                                          b'"STOPPED"}]\n'), ("X", b"0"))
        self.server.script["queue"] = frames(
            ("O", b'[{"id": 1, "status": "SUCCEEDED"}, {"id": 2, "status": "RUNNING"}]'),
            ("X", b"0"))
        self.assertEqual([c["name"] for c in herd.status()], ["c1", "c2"])
        self.assertEqual(herd.status("c2"), [{"name": "c2", "status": "STOPPED"}])
        self.assertEqual([j["id"] for j in herd.queue("c1", skip_finished=True)], [2])
        self.assertEqual(herd.job_status("c1"), {2: "RUNNING"})
        args = [c["args"] for c in self.server.calls]
        self.assertEqual(args[:3], [["status", "-o", "json"], ["status", "-o", "json"],
                                    ["queue", "c1", "-o", "json"]])
        self.assertNotIn("cluster", self.server.calls[0])
        self.assertEqual(self.server.calls[2]["cluster"], "c1")

    def test_tail_logs_streams_and_returns_the_job_code(self):
        self.server.script["logs"] = frames(
            ("O", b"(head, rank=0) step 1\n"), ("E", b"Job 3 finished: FAILED\n"),
            ("O", "(worker1, rank=1) é\n".encode()), ("X", b"100"))
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = herd.tail_logs("c1", 3, follow=False)
        self.assertEqual(code, herd.JOB_FAILED)
        self.assertEqual(out.getvalue(), "(head, rank=0) step 1\n(worker1, rank=1) é\n")
        self.assertEqual(err.getvalue(), "Job 3 finished: FAILED\n")
        self.assertEqual(self.server.calls[0]["args"], ["logs", "c1", "3", "--no-follow"])
        self.assertEqual(self.server.calls[0]["cluster"], "c1")

    def test_mutating_calls_and_managed_jobs(self):
        self.server.script["jobs.launch"] = frames(("R", b"r"), ("O", b"Managed job ID: 4\n"),
                                                   ("X", b"0"))
        self.server.script["jobs.queue"] = frames(("O", b'[{"id": 4, "status": "RUNNING"}]'),
                                                  ("X", b"0"))
        herd.cancel("c1", [1, 2])
        herd.cancel("c1", all=True)
        herd.stop("c1")
        herd.start("c1")
        herd.down("c1")
        self.assertEqual(herd.jobs.launch(herd.Task(run="echo m", num_nodes=2), infra="local"),
                         4)
        self.assertEqual(herd.jobs.queue(), [{"id": 4, "status": "RUNNING"}])
        herd.jobs_cancel(4)
        got = [(c["args"], c.get("cluster")) for c in self.server.calls]
        self.assertEqual(got[:5], [(["cancel", "c1", "1", "2", "-y"], "c1"),
                                   (["cancel", "c1", "-a", "-y"], "c1"),
                                   (["stop", "c1", "-y"], "c1"), (["start", "c1", "-y"], "c1"),
                                   (["down", "c1", "-y"], "c1")])
        self.assertEqual(got[5], (["jobs", "launch", "--infra", "local", "-d", "--task-json",
                                   "task.json"], None))
        self.assertEqual(json.loads(self.server.calls[5]["task"])["num_nodes"], 2)
        self.assertEqual(got[6:], [(["jobs", "queue", "-o", "json"], None),
                                   (["jobs", "cancel", "4", "-y"], None)])

    def test_failures_have_the_clis_messages_and_exit_codes(self):
        self.server.script["down"] = frames(
            ("R", b"r"), ("E", b"herd: cluster c9 does not exist (see `herd status`)\n"),
            ("X", b"102"))
        with self.assertRaises(herd.HerdError) as e:
            herd.down("c9")
        self.assertEqual(e.exception.returncode, 102)
        self.assertEqual(str(e.exception), "herd down failed: herd: cluster c9 does not exist "
                         "(see `herd status`) (exit code 102)")
        # A refused token: exit 2, the server's message.
        os.environ["HERD_API_TOKEN"] = "stale"
        with self.assertRaises(herd.HerdError) as e:
            herd.status()
        self.assertEqual(e.exception.returncode, 2)
        self.assertIn("unauthenticated: the token is not valid", str(e.exception))
        with self.assertRaises(herd.HerdError) as e:
            herd.stream_and_get(herd.launch("echo", "c1"), output=io.StringIO())
        self.assertEqual(e.exception.returncode, 2)
        os.environ["HERD_API_TOKEN"] = TOKEN
        # A name another user holds; an error object from the server.
        self.server.script["launch"] = (409, {"error": "cluster name c1 is taken on this "
                                              "server; choose another name",
                                              "code": "ALREADY_EXISTS"})
        with self.assertRaises(herd.HerdError) as e:
            herd.get(herd.launch("echo", "c1"))
        self.assertEqual(e.exception.returncode, 1)
        self.assertIn("is taken on this server", str(e.exception))
        # A stream cut before its exit code.
        self.server.script["queue"] = frames(("O", b"[]"))
        with self.assertRaises(herd.HerdError) as e:
            herd.queue("c1")
        self.assertIn("ended the stream before the command's exit code", str(e.exception))
        # The task checked before anything is sent, as the CLI's parser would.
        for task, what in ((herd.Task(run="x", envs={"A": None}), "envs.A is required"),
                           (herd.Task(run="x", resources=herd.Resources(ports="70000")),
                            "port 1-65535"),
                           (herd.Task(run="x", workdir="/no/such/dir"), "is not a directory"),
                           (herd.Task(run="x", resources=herd.Resources(accelerators="L4:x")),
                            "must be a positive number")):
            n = len(self.server.calls)
            with self.assertRaises(herd.HerdError) as e:
                herd.get(herd.launch(task, "c1"))
            self.assertEqual(e.exception.returncode, 2)
            self.assertIn(what, str(e.exception))
            self.assertEqual(len(self.server.calls), n)
        # Unreachable server: exit 1, naming it.
        os.environ["HERD_API_SERVER"] = "http://127.0.0.1:1"
        with self.assertRaises(herd.HerdError) as e:
            herd.status()
        self.assertEqual(e.exception.returncode, 1)
        self.assertIn("API server http://127.0.0.1:1", str(e.exception))

    def test_interrupt_closes_the_stream_as_ctrl_c_does(self):
        from herd import _process
        self.server.script["logs"] = [frames(("O", b"step 1\n"))]
        proc = _process.start(["logs", "c1"])
        self.assertEqual(proc.stdout.read(7), b"step 1\n")
        self.assertIsNone(proc.poll())
        _process.interrupt(proc)
        self.assertEqual(proc.returncode, herd.JOB_NOT_FINISHED)
        self.assertIn(b"Detached; the command was interrupted on the server", proc.stderr.read())
        proc.stdout.close()
        proc.stderr.close()
        self.assertTrue(self.server.client_gone.wait(10), "the server still streams")

    def test_variables_in_paths_are_substituted(self):
        work, data, _ = self.make_tree()
        os.environ["HERD_TEST_DATA_DIR"] = data
        self.addCleanup(os.environ.pop, "HERD_TEST_DATA_DIR")
        task = herd.Task(run="x", envs={"SUB": "pkg"}, workdir=os.path.join(work, "${SUB}"),
                         file_mounts={"/d/$SUB": "$HERD_TEST_DATA_DIR"})
        encoded, _ = _api.encode_task(task)
        self.assertEqual(encoded["workdir"], os.path.join(work, "pkg"))
        self.assertEqual(encoded["file_mounts"], {"/d/pkg": data})


@unittest.skipUnless(os.environ.get("HERD_CHECK"), "set HERD_CHECK to a built herd binary")
class SameAsTheCliTest(RemoteTestBase):
    """The real CLI in remote mode against the fake server: the SDK sends the same."""

    def cli(self, *args):
        env = dict(os.environ)
        env.pop("HERD", None)
        p = subprocess.run([os.environ["HERD_CHECK"], *args], env=env, capture_output=True,
                           timeout=120, cwd=self.dir)
        return p

    def test_launch_body_matches_the_cli(self):
        self.server.script["launch"] = frames(("R", b"r"), ("O", LAUNCH_REPLY), ("X", b"0"))
        task = self.task()
        path = os.path.join(self.dir, "task.yaml")
        task.to_yaml(path)
        p = self.cli("launch", "-c", "c1", path, "-d", "-i", "10", "--down", "-o", "json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["job_id"], 7)
        herd.get(herd.launch(task, "c1", idle_minutes_to_autostop=10, down=True))
        cli, sdk = self.server.calls
        self.assertEqual(sorted(cli["args"]), sorted(sdk["args"]))
        self.assertEqual(json.loads(cli["task"]), json.loads(sdk["task"]))
        for k in ("cluster", "secrets"):
            self.assertEqual(cli[k], sdk[k])
        self.assertEqual(sorted(cli["uploads"]), sorted(sdk["uploads"]))
        for place in cli["uploads"]:
            self.assertEqual(self.members(self.server.uploads[cli["uploads"][place]]),
                             self.members(self.server.uploads[sdk["uploads"][place]]), place)

    def test_small_tasks_match_the_cli(self):
        self.server.script["exec"] = frames(("R", b"r"), ("O", LAUNCH_REPLY), ("X", b"0"))
        tasks = [herd.Task(run="echo hi"),
                 herd.Task(name="n", setup="s", run=["a", "b"],
                           resources=herd.Resources(cpus=0.5, memory="8+", accelerators="T4:0.5",
                                                    infra="k8s/ctx/a", ports="8080")),
                 herd.Task(run="x", resources=herd.Resources(accelerators=["A100:8", "H100:8"],
                                                             memory=16, infra="local"))]
        for i, task in enumerate(tasks):
            path = os.path.join(self.dir, f"t{i}.yaml")
            task.to_yaml(path)
            p = self.cli("exec", "c1", path, "-d", "-o", "json")
            self.assertEqual(p.returncode, 0, p.stderr)
            herd.get(herd.exec(task, "c1"))
            cli, sdk = self.server.calls[-2:]
            self.assertEqual(cli["args"], sdk["args"])
            self.assertEqual(json.loads(cli["task"]), json.loads(sdk["task"]), i)

    def test_cli_reads_the_config_api_login_writes(self):
        for k in ("HERD_API_SERVER", "HERD_API_TOKEN"):
            os.environ.pop(k)
        herd.api_login(self.server.endpoint, TOKEN)
        self.server.script["queue"] = frames(("O", b"[]\n"), ("X", b"0"))
        p = self.cli("queue", "c1", "-o", "json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.server.calls[-1]["args"], ["queue", "c1", "-o", "json"])
        self.assertEqual(self.server.seen_tokens[-1], f"Bearer {TOKEN}")


SKY_SCRIPT = textwrap.dedent("""\
    import sky
    task = sky.Task(name="minGPT-ddp", resources=sky.Resources(cpus=4, accelerators="L4:4"),
                    setup=["echo setup"], run=["echo run"])
    request = sky.launch(task=task, cluster_name="mingpt")
    job_id, _ = sky.stream_and_get(request)
    print("JOB", job_id, sky.__file__)
    code = sky.tail_logs("mingpt", job_id, follow=True)
    sky.stream_and_get(sky.down("mingpt"))
    raise SystemExit(code)
    """)


class SkyShimTest(RemoteTestBase):
    def run_script(self, extra_path=None, via_module=True):
        script = os.path.join(self.dir, "train.py")
        with open(script, "w") as f:
            f.write(SKY_SCRIPT)
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        if via_module:
            argv = [sys.executable, "-m", "herd.sky_shim", script]
        else:
            env["PYTHONPATH"] = os.path.join(REPO, "python", "herd", "sky_compat")
            argv = [sys.executable, script]
        if extra_path:
            env["PYTHONPATH"] += os.pathsep + extra_path
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,
                              cwd=self.dir)

    def test_the_seed_script_runs_through_the_shim(self):
        self.server.script["launch"] = frames(("R", b"r"), ("O", LAUNCH_REPLY), ("X", b"0"))
        self.server.script["logs"] = frames(("O", b"run\n"), ("X", b"0"))
        for via_module in (True, False):
            self.server.calls.clear()
            p = self.run_script(via_module=via_module)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("JOB 7 " + os.path.join(REPO, "python", "herd", "sky_compat"),
                          p.stdout)
            self.assertIn("run\n", p.stdout)
            self.assertEqual([c["args"][0] for c in self.server.calls], ["launch", "logs",
                                                                         "down"])
            self.assertEqual(json.loads(self.server.calls[0]["task"])["resources"]["accelerator"],
                             "L4")

    def test_a_real_skypilot_is_never_shadowed(self):
        real = os.path.join(self.dir, "site")
        os.makedirs(os.path.join(real, "sky"))
        with open(os.path.join(real, "sky", "__init__.py"), "w") as f:
            f.write("import sys\nprint('REAL SKYPILOT')\nsys.exit(5)\n")
        for via_module in (True, False):
            p = self.run_script(extra_path=real, via_module=via_module)
            self.assertEqual(p.returncode, 5, p.stderr)
            self.assertIn("REAL SKYPILOT", p.stdout)
            self.assertIn("SkyPilot", p.stderr)
            self.assertEqual(self.server.calls, [])
        # Without the opt-in there is no `sky` at all.
        p = subprocess.run([sys.executable, "-c", "import sky"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("No module named 'sky'", p.stderr)


if __name__ == "__main__":
    unittest.main()
