"""Packaging checks on the built artifacts: herdlet links only glibc dynamically (so it runs on any
x86-64 Linux with glibc >= 2.36), the systemd units pass `systemd-analyze verify` without a word,
herdlet-supervise restarts and stops as documented, and the .deb has the right layout and fields.

Run by ctest (packaging/CMakeLists.txt), one suite per test: packaging_test.py <SuiteName>."""

import os
import re
import shutil
import select
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from herd_env import wait_for  # noqa: E402

HERD = os.environ.get("HERD", "herd")
HERDLET = os.environ.get("HERDLET", "herdlet")
HERDLET_UPLOAD = os.environ.get("HERDLET_UPLOAD", HERDLET + ".upload")
BUILD_DIR = os.environ.get("HERD_BUILD_DIR", "")
SOURCE_DIR = os.environ.get(
    "HERD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STATIC_AGENT = os.environ.get("HERD_STATIC_AGENT", "ON") == "ON"
VERSION = os.environ.get("HERD_VERSION", "")
PACKAGING = os.path.join(SOURCE_DIR, "packaging")

# The newest glibc symbol version herdlet may need: Debian 12's (packaging/README.md).
GLIBC_FLOOR = (2, 36)
# Shared objects that belong to glibc itself.
GLIBC_LIBS = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "libdl.so.2",
              "libpthread.so.0", "librt.so.1"}


def run(args, timeout=120, check=True, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}\nstdout:\n{p.stdout}\n"
                             f"stderr:\n{p.stderr}")
    return p


def render(template, herdlet_bin, config, workdir, home, restart_sec="1"):
    """What controller/bootstrap's RenderUnit does to a template."""
    with open(os.path.join(PACKAGING, template)) as f:
        text = f.read()
    for key, value in (("@HERDLET_BIN@", herdlet_bin), ("@CONFIG@", config),
                       ("@WORKDIR@", workdir), ("@HOME@", home), ("@RESTART_SEC@", restart_sec)):
        text = text.replace(key, value)
    return text


@unittest.skipUnless(STATIC_AGENT, "herdlet is linked dynamically in this build "
                     "(HERD_STATIC_AGENT=OFF or a sanitizer build)")
class StaticAgentTest(unittest.TestCase):
    def test_only_glibc_is_dynamic(self):
        needed = re.findall(r"NEEDED\s+(\S+)", run(["objdump", "-p", HERDLET]).stdout)
        self.assertIn("libc.so.6", needed)
        self.assertEqual([n for n in needed if n not in GLIBC_LIBS], [], needed)
        ldd = run(["ldd", HERDLET]).stdout
        libs = [line.split()[0] for line in ldd.splitlines() if line.strip()]
        self.assertEqual([lib for lib in libs if os.path.basename(lib) not in GLIBC_LIBS], [], ldd)
        for lib in ("libstdc++", "libssl", "libcrypto", "libprotobuf", "libuv", "libyaml",
                    "libsqlite", "libboost", "libgcc_s", "libz"):
            self.assertNotIn(lib, ldd)

    def test_glibc_symbol_versions_are_at_most_the_floor(self):
        dynsyms = run(["objdump", "-T", HERDLET]).stdout
        versions = set(re.findall(r"\(([^)]+)\)", dynsyms))
        self.assertTrue(versions, dynsyms[:2000])
        self.assertEqual({v for v in versions if not v.startswith("GLIBC_")}, set())
        glibc = [tuple(int(x) for x in v[len("GLIBC_"):].split(".")[:2])
                 for v in versions if re.fullmatch(r"GLIBC_\d+(\.\d+)*", v)]
        self.assertTrue(glibc)
        self.assertLessEqual(max(glibc), GLIBC_FLOOR,
                             f"herdlet needs glibc {max(glibc)}; packaging/README.md says "
                             f"{GLIBC_FLOOR}")

    def test_upload_copy_has_no_debug_info_and_runs(self):
        full, upload = os.path.getsize(HERDLET), os.path.getsize(HERDLET_UPLOAD)
        self.assertLess(upload, full // 2, (full, upload))
        sections = run(["objdump", "-h", HERDLET_UPLOAD]).stdout
        self.assertNotIn(".debug_info", sections)
        self.assertEqual(run([HERDLET_UPLOAD, "--version"]).stdout.strip(), VERSION or
                         run([HERDLET, "--version"]).stdout.strip())


class UnitFilesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="herd-units-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.workdir = os.path.join(self.dir, "agent")
        os.makedirs(self.workdir)
        self.config = os.path.join(self.workdir, "herdlet.yaml")
        with open(self.config, "w") as f:
            f.write("role: head\n")

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def verify(self, path, user=False):
        """systemd-analyze's output: it exits 0 even on bad values, so any word is a failure."""
        env = dict(os.environ)
        args = ["systemd-analyze"]
        if user:
            runtime = tempfile.mkdtemp(prefix="herd-xdg-")
            self.addCleanup(shutil.rmtree, runtime, True)
            env["XDG_RUNTIME_DIR"] = runtime
            args.append("--user")
        p = run(args + ["verify", path], check=False, env=env)
        return p.returncode, (p.stdout + p.stderr).strip()

    def test_system_unit_verifies_cleanly(self):
        text = render("herdlet.service", HERDLET, self.config, self.workdir, "/root")
        self.assertNotIn("@", text)
        for line in ("Type=simple", "KillMode=process", "Restart=on-failure",
                     "LimitNOFILE=1048576", "RestartSec=1",
                     f"ExecStart={HERDLET} --config {self.config}",
                     f"WorkingDirectory={self.workdir}", "Environment=HOME=/root",
                     "WantedBy=multi-user.target"):
            self.assertIn(line + "\n", text)
        self.assertEqual(self.verify(self.write("herdlet.service", text)), (0, ""))

    def test_user_unit_verifies_cleanly(self):
        text = render("herdlet-user.service", HERDLET, self.config, self.workdir, "/home/u")
        self.assertNotIn("@", text)
        self.assertIn("KillMode=process\n", text)
        self.assertIn("WantedBy=default.target\n", text)
        path = self.write("herdlet.service", text)
        self.assertEqual(self.verify(path), (0, ""))
        self.assertEqual(self.verify(path, user=True), (0, ""))

    def test_verify_is_sensitive(self):
        # The check above can fail: a misspelt value and a missing binary are reported.
        text = render("herdlet.service", HERDLET, self.config, self.workdir, "/root")
        bad = self.write("herdlet.service", text.replace("KillMode=process", "KillMode=proces"))
        self.assertIn("proces", self.verify(bad)[1])
        missing = self.write("herdlet.service",
                             text.replace(HERDLET, os.path.join(self.dir, "no-herdlet")))
        self.assertNotEqual(self.verify(missing)[1], "")

    def test_packaged_unit_is_rendered_for_the_package_paths(self):
        if not BUILD_DIR:
            self.skipTest("HERD_BUILD_DIR not set")
        with open(os.path.join(BUILD_DIR, "packaging", "deb", "herdlet.service")) as f:
            text = f.read()
        self.assertEqual(text, render("herdlet.service", "/usr/bin/herdlet",
                                      "/etc/herd/herdlet.yaml", "/var/lib/herd", "/root"))


FAKE_HERDLET = """#!/bin/sh
# Exits with the status given in $HOME/exits (one per start, then runs until SIGTERM).
# The trap comes before $HOME/starts is written: the test sends SIGTERM as soon as it sees the
# count, and an untrapped TERM would kill the shell without a trace.
# With --ready-fd N (the supervisor's first start only) it reports its pid there once it "runs".
trap 'echo "got TERM" >>"$HOME/term"; exit 0' TERM
echo "$*" >>"$HOME/args"
n=$(cat "$HOME/starts" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$HOME/starts"
code=$(sed -n "${n}p" "$HOME/exits")
if [ -n "$code" ]; then exit "$code"; fi
if [ "${3:-}" = --ready-fd ]; then eval "echo \\$\\$ >&$4; exec $4>&-"; fi
while :; do sleep 0.1 & wait $!; done
"""


class SuperviseTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="herd-supervise-")
        self.addCleanup(self.cleanup)
        self.herdlet = os.path.join(self.dir, "herdlet")
        with open(self.herdlet, "w") as f:
            f.write(FAKE_HERDLET)
        os.chmod(self.herdlet, 0o755)
        self.proc = None

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, exits, ready_fd=None):
        """ready_fd: the write end of a pipe, given to the supervisor as its descriptor 3."""
        with open(os.path.join(self.dir, "exits"), "w") as f:
            f.write("".join(f"{c}\n" for c in exits))
        env = dict(os.environ, HOME=self.dir)
        cmd = ["/bin/sh", os.path.join(PACKAGING, "herdlet-supervise"), "--backoff-initial", "1",
               "--backoff-max", "2", self.herdlet, os.path.join(self.dir, "herdlet.yaml")]
        fds = ()
        if ready_fd is not None:
            cmd = ["/bin/sh", "-c", f'exec "$@" 3>&{ready_fd} {ready_fd}>&-', "sh", cmd[0], cmd[1],
                   "--ready-fd", "3", *cmd[2:]]
            fds = (ready_fd,)
        self.proc = subprocess.Popen(cmd, cwd=self.dir, env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     pass_fds=fds)

    def read(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f.read()
        except FileNotFoundError:
            return ""


    def test_restarts_with_backoff_and_stops_on_sigterm(self):
        t0 = time.time()
        self.start([3, 3, 3])
        self.assertTrue(wait_for(lambda: self.read("starts").strip() == "4", 12),
                        self.read("herdlet.log"))
        took = time.time() - t0
        log = self.read("herdlet.log")
        # 1 s, then doubled to 2 s, then capped at 2 s.
        self.assertIn("status 3; restarting in 1s", log)
        self.assertIn("status 3; restarting in 2s", log)
        self.assertNotIn("restarting in 4s", log)
        self.assertGreater(took, 4.5)
        self.assertEqual(self.read("supervise.pid").strip(), str(self.proc.pid))
        herdlet_pid = int(self.read("herdlet.pid"))
        os.kill(herdlet_pid, 0)
        os.kill(self.proc.pid, signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=10), 0)
        self.assertEqual(self.read("term"), "got TERM\n")  # herdlet got SIGTERM from it
        self.assertEqual(self.read("supervise.pid"), "")
        self.assertEqual(self.read("herdlet.pid"), "")
        self.assertIn("stopped", self.read("herdlet.log"))

    def test_a_clean_exit_is_not_restarted(self):
        self.start([0])
        self.assertEqual(self.proc.wait(timeout=10), 0)
        self.assertEqual(self.read("starts").strip(), "1")
        self.assertIn("status 0; not restarting", self.read("herdlet.log"))
        self.assertEqual(self.read("supervise.pid"), "")

    def read_to_eof(self, fd, within):
        """All a pipe gives until end of file, failing the test if that takes longer than WITHIN."""
        out = b""
        deadline = time.time() + within
        while True:
            r, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
            self.assertTrue(r, f"no end of file within {within} s (got {out!r})")
            chunk = os.read(fd, 4096)
            if not chunk:
                return out.decode()
            out += chunk

    def test_ready_fd_reports_the_first_herdlet_running(self):
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.start([], ready_fd=w)
        os.close(w)
        # End of file comes right after the pid: the supervisor kept no copy of the descriptor.
        got = self.read_to_eof(r, 10)
        self.assertTrue(wait_for(lambda: self.read("herdlet.pid").strip() != "", 5))
        self.assertEqual(got, self.read("herdlet.pid"))
        self.assertIn("--ready-fd 3", self.read("args"))

    def test_ready_fd_gives_end_of_file_when_herdlet_exits_first_and_not_again(self):
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        t0 = time.time()
        self.start([3], ready_fd=w)
        os.close(w)
        self.assertEqual(self.read_to_eof(r, 10), "")
        self.assertLess(time.time() - t0, 1.0, "end of file before the 1 s restart delay")
        self.assertTrue(wait_for(lambda: self.read("starts").strip() == "2", 10),
                        self.read("herdlet.log"))
        starts = self.read("args").splitlines()
        self.assertIn("--ready-fd 3", starts[0])
        self.assertNotIn("--ready-fd", starts[1])  # a restart reports to nobody

    def test_bad_ready_fd(self):
        p = run(["/bin/sh", os.path.join(PACKAGING, "herdlet-supervise"), "--ready-fd", "x;id",
                 "h", "c"], check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--ready-fd wants a descriptor 0-9, not 'x;id'", p.stderr)

    def test_bad_usage(self):
        p = run(["/bin/sh", os.path.join(PACKAGING, "herdlet-supervise"), "only-one"], check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage:", p.stderr)


class HerdletReadyFdTest(unittest.TestCase):
    """herdlet --ready-fd, the other half of herdlet-supervise --ready-fd (its success, the pid on
    the descriptor, is what bootstrap_test's namespace case reads through the start script)."""

    def test_a_herdlet_that_cannot_start_gives_end_of_file_and_its_error(self):
        d = tempfile.mkdtemp(prefix="herd-readyfd-")
        self.addCleanup(shutil.rmtree, d, True)
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        p = subprocess.Popen([HERDLET, "--config", os.path.join(d, "missing.yaml"), "--ready-fd",
                              str(w)], pass_fds=(w,), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        os.close(w)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("missing.yaml", err)
        self.assertEqual(os.read(r, 100), b"")  # end of file, no pid

    def test_a_descriptor_that_is_not_open_is_refused(self):
        p = run([HERDLET, "--config", "/dev/null", "--ready-fd", "97"], check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--ready-fd 97: not an open descriptor", p.stderr)


class DebPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BUILD_DIR or not shutil.which("cpack") or not shutil.which("dpkg-deb"):
            raise unittest.SkipTest("needs HERD_BUILD_DIR, cpack and dpkg-deb")
        cls.dir = tempfile.mkdtemp(prefix="herd-deb-")
        try:
            out = os.path.join(cls.dir, "out")
            run(["cpack", "-G", "DEB", "-B", out, "--config",
                 os.path.join(BUILD_DIR, "CPackConfig.cmake")], timeout=240)
            debs = [f for f in os.listdir(out) if f.endswith(".deb")]
            if len(debs) != 1:
                raise AssertionError(f"expected one .deb in {out}: {os.listdir(out)}")
            cls.deb = os.path.join(out, debs[0])
            cls.root = os.path.join(cls.dir, "root")
            run(["dpkg-deb", "-x", cls.deb, cls.root])
        except BaseException:
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_control_fields(self):
        info = run(["dpkg-deb", "-I", self.deb]).stdout
        fields = dict(re.findall(r"^ (\S+): (.*)$", info, re.M))
        self.assertEqual(fields["Package"], "herd")
        if VERSION:
            self.assertEqual(fields["Version"], VERSION)
        self.assertEqual(fields["Architecture"], "amd64")
        self.assertIn("<", fields["Maintainer"])
        self.assertIn("distributed PyTorch", fields["Description"])
        depends = [d.strip().split()[0] for d in fields["Depends"].split(",")]
        self.assertIn("openssh-client", depends)
        self.assertIn("rsync", depends)
        self.assertEqual(os.path.basename(self.deb), f"herd_{fields['Version']}_amd64.deb")

    def test_layout(self):
        files = sorted(os.path.relpath(os.path.join(d, f), self.root)
                       for d, _, fs in os.walk(self.root) for f in fs)
        self.assertEqual(files, ["usr/bin/herd", "usr/bin/herd-api", "usr/bin/herdlet",
                                 "usr/lib/systemd/system/herd-api.service",
                                 "usr/lib/systemd/system/herdlet.service",
                                 "usr/share/herd/herdlet-supervise"])
        for exe in ("usr/bin/herd", "usr/bin/herd-api", "usr/bin/herdlet",
                    "usr/share/herd/herdlet-supervise"):
            mode = os.stat(os.path.join(self.root, exe)).st_mode
            self.assertTrue(mode & stat.S_IXOTH, exe)
        self.assertTrue(os.path.isdir(os.path.join(self.root, "var/lib/herd")))
        with open(os.path.join(self.root, "usr/share/herd/herdlet-supervise")) as f, \
                open(os.path.join(PACKAGING, "herdlet-supervise")) as g:
            self.assertEqual(f.read(), g.read())

    def test_packaged_binaries_run_and_are_stripped(self):
        herdlet = os.path.join(self.root, "usr/bin/herdlet")
        self.assertEqual(run([herdlet, "--version"]).stdout.strip(),
                         run([HERDLET, "--version"]).stdout.strip())
        self.assertNotIn(".debug_info", run(["objdump", "-h", herdlet]).stdout)
        herd = os.path.join(self.root, "usr/bin/herd")
        self.assertEqual(run([herd, "--help"]).returncode, 0)
        self.assertEqual(run([herd, "--version"]).stdout.strip(),
                         VERSION or run([herdlet, "--version"]).stdout.strip())

    def test_packaged_unit(self):
        with open(os.path.join(self.root, "usr/lib/systemd/system/herdlet.service")) as f:
            text = f.read()
        self.assertIn("ExecStart=/usr/bin/herdlet --config /etc/herd/herdlet.yaml\n", text)
        self.assertIn("KillMode=process\n", text)
        self.assertNotIn("@", text)

    def test_packaged_api_server_unit(self):
        with open(os.path.join(self.root, "usr/lib/systemd/system/herd-api.service")) as f:
            text = f.read()
        self.assertIn("ExecStart=/usr/bin/herd-api --home /var/lib/herd/api --herd /usr/bin/herd "
                      "$HERD_API_ARGS\n", text)
        self.assertIn("EnvironmentFile=-/etc/default/herd-api\n", text)
        # Managed jobs' controllers outlive a restart of the server.
        self.assertIn("KillMode=process\n", text)
        self.assertNotIn("@", text)
        api = os.path.join(self.root, "usr/bin/herd-api")
        self.assertEqual(run([api, "--version"]).stdout.strip(),
                         run([os.path.join(self.root, "usr/bin/herd"), "--version"]).stdout.strip())


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:])
