"""Jobs in containers (`image_id: docker:IMAGE`, `--image-id`) on a 2-node local cluster, driven
as a user drives herd: the image is built here from this machine's own installed Debian files (the
packages' files as dpkg lists them, plus a marker file only the image has) and imported with
`podman import`; nothing is pulled from the internet. mmdebstrap would build the same image from
the Debian archive, but costs ~1 min for the bare system and several more for python3-torch on
these 2-core machines; the host's files cost seconds (the torch image ~1-2 min, built only for
the DDP test).

Checked: setup and run in the image on both nodes with the SKYPILOT_* variables, the node's
network and the workdir bound in; the job's exit code; `exec` reusing the same container; `cancel`
killing a job in the container; an image that does not exist (a one-line error naming it); the
2-node minGPT DDP job with torchrun in a torch image (CONTAINER_TORCH=0 skips it); `down`
removing the containers. The images the test made are removed, also after a failure."""

import contextlib
import glob
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from herd_env import (HerdEnvTestCase, netns_available, pids_with_marker,  # noqa: E402
                      wait_for)
from s3_server import free_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "mingpt-ddp")
CLUSTER = "ctrtest"
IMAGE = "localhost/herd-test:1"
TORCH_IMAGE = "localhost/herd-test-torch:1"
MARKER = "/herd-test-image"
PODMAN = ["podman", "--runtime", "/usr/sbin/runc"]
BASE_PACKAGES = ["bash", "coreutils", "dash", "grep", "sed", "base-files", "procps", "hostname"]


def has_podman():
    return shutil.which("podman") is not None and os.path.exists("/usr/sbin/runc")


def has_registry():
    return shutil.which("docker-registry") is not None and shutil.which("htpasswd") is not None


def has_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          capture_output=True).returncode == 0


def dpkg_closure(packages):
    """The installed packages these need (Depends and Pre-Depends, first installed alternative),
    read from dpkg's status file."""
    status, provides = {}, {}
    with open("/var/lib/dpkg/status") as f:
        for block in f.read().split("\n\n"):
            fields, key = {}, None
            for line in block.splitlines():
                if line.startswith(" ") and key:
                    fields[key] += line
                elif ":" in line:
                    key, _, value = line.partition(":")
                    fields[key] = value.strip()
            name = fields.get("Package")
            if not name or not fields.get("Status", "").endswith(" installed"):
                continue
            status[name] = fields
            for p in fields.get("Provides", "").split(","):
                if p.strip():
                    provides.setdefault(re.split(r"[ (]", p.strip())[0], name)
    seen, todo = set(), list(packages)
    while todo:
        name = todo.pop()
        if name in seen or name not in status:
            continue
        seen.add(name)
        deps = status[name].get("Depends", "") + "," + status[name].get("Pre-Depends", "")
        for alternatives in deps.split(","):
            for alt in alternatives.split("|"):
                dep = re.split(r"[ (:]", alt.strip())[0]
                dep = dep if dep in status else provides.get(dep)
                if dep:
                    todo.append(dep)
                    break
    return seen


def package_files(packages):
    files = set()
    for name in packages:
        for suffix in ("", ":amd64", ":all"):
            path = f"/var/lib/dpkg/info/{name}{suffix}.list"
            if os.path.exists(path):
                with open(path) as f:
                    files.update(line.rstrip("\n") for line in f if line.strip())
    return files


def alternatives(files):
    """The update-alternatives links (made by maintainer scripts, so in no package's file list)
    whose chosen target is one of files: [(link, /etc/alternatives/NAME)], and those names."""
    found = []
    adir = "/var/lib/dpkg/alternatives"
    for name in os.listdir(adir):
        with open(os.path.join(adir, name)) as f:
            lines = f.read().split("\n")
        if len(lines) < 2:
            continue
        # mode, master link, then (slave name, slave link) pairs up to an empty line.
        pairs = [(name, lines[1])]
        i = 2
        while i + 1 < len(lines) and lines[i]:
            pairs.append((lines[i], lines[i + 1]))
            i += 2
        for alt, link in pairs:
            chosen = os.path.join("/etc/alternatives", alt)
            if os.path.islink(chosen) and os.path.realpath(chosen) in files:
                found.append((link, chosen))
    return found


def build_image(tag, packages, dirname):
    """A tarball of the packages' files as installed here (paths through the usr-merge links
    resolved), the usr-merge links, a marker and a root passwd entry; imported as tag."""
    rootfs = os.path.join(dirname, tag.replace("/", "_").replace(":", "_") + ".tar")
    entries = {}
    for path in sorted(package_files(dpkg_closure(packages))):
        if not os.path.lexists(path) or path == "/.":
            continue
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        entries[real.lstrip("/")] = path
    real_files = {os.path.realpath(p) for p in entries.values()}
    for link, chosen in alternatives(real_files):
        for path in (link, chosen):
            real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            entries[real.lstrip("/")] = path
    for path in ("/etc/ld.so.cache", "/etc/ld.so.conf"):
        entries[path.lstrip("/")] = path
    with tarfile.open(rootfs, "w") as tar:
        def add_dir(name, mode=0o755):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        made = ["usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "root", "proc",
                "sys", "dev", "run", "var", "var/tmp"]
        for d in made:
            add_dir(d)
        add_dir("tmp", 0o1777)
        for link in ("bin", "sbin", "lib", "lib64"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "usr/" + link
            tar.addfile(info)
        done = set(made + ["tmp", "bin", "sbin", "lib", "lib64"])
        for name in sorted(entries):
            parts = name.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in done:
                    done.add(parent)
                    tar.add("/" + parent, arcname=parent, recursive=False)
            if name not in done:
                done.add(name)
                tar.add(entries[name], arcname=name, recursive=False)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/bash\n"),
                           ("etc/group", "root:x:0:\n"),
                           (MARKER.lstrip("/"), "inside the herd test image\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    subprocess.run([*PODMAN, "import", "-q", rootfs, tag], check=True, capture_output=True,
                   timeout=600)
    os.unlink(rootfs)


def herd_containers():
    """(name, label) of the containers any herd agent started that podman knows of."""
    out = subprocess.run([*PODMAN, "ps", "-a", "--filter", "label=herd.agent", "--format",
                          "{{.Names}} {{index .Labels \"herd.agent\"}}"],
                         capture_output=True, text=True, timeout=60).stdout
    return [tuple(line.split(" ", 1)) for line in out.splitlines() if line.strip()]


def ours(containers):
    return [c for c in containers if re.search(rf"@{CLUSTER}-", c[1])]


REGISTRY_ADDR = "127.0.235.1"
REGISTRY_USER = "herd-test-user"


class Registry:
    """docker-registry (distribution 2.8) with htpasswd auth over a data directory of the test's
    own. A node namespace has a loopback of its own: the registry runs once on this machine's
    127.0.235.1 (for the test's push) and once in each node's network namespace on the same
    address and port, every process serving the same files. stop() ends them all and removes
    the files."""

    def __init__(self, dirname, password):
        self.dir = dirname
        os.makedirs(os.path.join(self.dir, "data"))
        self.port = free_port(REGISTRY_ADDR)
        self.procs = []
        htpasswd = subprocess.run(["htpasswd", "-Bbn", REGISTRY_USER, password],
                                  capture_output=True, text=True, check=True).stdout
        with open(os.path.join(self.dir, "htpasswd"), "w") as f:
            f.write(htpasswd)
        self.config = os.path.join(self.dir, "config.yml")
        with open(self.config, "w") as f:
            f.write(f"""version: 0.1
log: {{level: error, accesslog: {{disabled: true}}}}
storage: {{filesystem: {{rootdirectory: {self.dir}/data}}}}
http: {{addr: "{REGISTRY_ADDR}:{self.port}"}}
auth: {{htpasswd: {{realm: herd-test, path: {self.dir}/htpasswd}}}}
""")

    @property
    def server(self):
        return f"{REGISTRY_ADDR}:{self.port}"

    def start(self, netns=None):
        enter = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
        log = open(os.path.join(self.dir, f"registry-{netns or 'host'}.log"), "w")
        self.procs.append(subprocess.Popen([*enter, "docker-registry", "serve", self.config],
                                           stdout=log, stderr=log, start_new_session=True))
        log.close()
        probe = [*enter, "bash", "-c", f"exec 3<>/dev/tcp/{REGISTRY_ADDR}/{self.port}"]
        assert wait_for(lambda: subprocess.run(probe, capture_output=True).returncode == 0, 20), \
            f"the registry did not start in {netns or 'this machine'}"

    def stop(self):
        try:
            for p in self.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        finally:
            self.procs = []
            shutil.rmtree(self.dir, ignore_errors=True)


TASK = f"""
name: in-container
num_nodes: 2
resources:
  image_id: docker:{IMAGE}
workdir: .
setup: |
  echo "setup on $(hostname): $(cat {MARKER})"
run: |
  echo "rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES: $(cat {MARKER})"
  env | grep '^SKYPILOT_' | sort | sed "s/^/rank $SKYPILOT_NODE_RANK env: /"
  echo "rank $SKYPILOT_NODE_RANK workdir: $(pwd) $(cat workdir-file)"
  echo "rank $SKYPILOT_NODE_RANK host: $(hostname)"
  echo "rank $SKYPILOT_NODE_RANK previous: $(cat /tmp/herd-proof 2>/dev/null || echo none)"
  echo $SKYPILOT_NODE_RANK-$$ > /tmp/herd-proof
"""


@unittest.skipUnless(netns_available() and has_podman(), "needs root, ip netns, podman and runc")
class ContainerTest(HerdEnvTestCase):
    ENV_PREFIX = "container"
    CLUSTER = CLUSTER

    @classmethod
    def prepare_env(cls):
        cls.images = []
        cls.task_dir = os.path.join(cls.h.dir, "task")
        os.makedirs(cls.task_dir)
        with open(os.path.join(cls.task_dir, "task.yaml"), "w") as f:
            f.write(TASK)
        with open(os.path.join(cls.task_dir, "workdir-file"), "w") as f:
            f.write("synced-from-the-workdir\n")
        t0 = time.time()
        build_image(IMAGE, BASE_PACKAGES, cls.h.dir)
        cls.images.append(IMAGE)
        print(f"image {IMAGE} built in {time.time() - t0:.1f} s", file=sys.stderr)
        os.chdir(cls.task_dir)

    @classmethod
    def launch_args(cls):
        return ("launch", "-c", CLUSTER, "-y", "task.yaml")

    @classmethod
    def close_env(cls):
        cls.left_after_down = None
        try:
            super().close_env()
            cls.left_after_down = ours(herd_containers())
        finally:
            for c in ours(herd_containers()):  # what a failed `down` left
                subprocess.run([*PODMAN, "rm", "-f", "-t", "0", c[0]], capture_output=True)
            for image in cls.images:
                subprocess.run([*PODMAN, "rmi", "-f", image], capture_output=True, timeout=120)

    @classmethod
    def check_nothing_left(cls):
        # `down` itself removed the nodes' containers (close_env removes leftovers after looking).
        assert cls.left_after_down == [], cls.left_after_down
        assert ours(herd_containers()) == [], herd_containers()

    def test_1_launch_runs_in_the_image_on_both_nodes(self):
        out = self.launch.stdout.decode()
        err = self.launch.stderr.decode()
        self.assertIn("Job finished (status: SUCCEEDED).", err)
        ips = [n["ip"] for n in self.h.clusters()[CLUSTER]["nodes"]]
        for rank in (0, 1):
            self.assertIn(f"rank {rank} of 2: inside the herd test image", out)
            self.assertIn(f"rank {rank} env: SKYPILOT_NODE_RANK={rank}", out)
            self.assertIn(f"rank {rank} env: SKYPILOT_NUM_NODES=2", out)
            self.assertRegex(out, rf"rank {rank} env: SKYPILOT_TASK_ID=\S+")
            self.assertIn(f"rank {rank} workdir: /root/sky_workdir synced-from-the-workdir", out)
        for node in ("head", "worker1"):
            self.assertIn(f"setup on {CLUSTER}-{node}: inside the herd test image", out)
        # The node's network: SKYPILOT_NODE_IPS lists the nodes' own addresses, hostnames are the
        # nodes'.
        self.assertIn(f"rank 0 env: SKYPILOT_NODE_IPS={ips[0]}", out)
        self.assertIn(f"rank 0 host: {CLUSTER}-head", out)
        # One container per node, of the image.
        self.assertEqual(len(ours(herd_containers())), 2, herd_containers())

    def test_2_exit_code_as_without_a_container(self):
        p = self.h.herd("exec", CLUSTER, "--image-id", f"docker:{IMAGE}", "--",
                        "cat /herd-test-image; exit 7", check=False)
        self.assertEqual(p.returncode, 100, p.stderr)  # a failed job, as SkyPilot exits
        self.assertIn("inside the herd test image", p.stdout.decode())
        jobs = json.loads(self.h.herd("queue", CLUSTER, "-o", "json").stdout)
        last = max(jobs, key=lambda j: j["id"])
        self.assertEqual(last["status"], "FAILED")
        self.assertEqual(last["exit_codes"][0], 7)

    def test_3_exec_reuses_the_container(self):
        before = ours(herd_containers())
        # Each run leaves /tmp/herd-proof in its node's container (a path only the container
        # has): the next exec of the task finds the launch's there.
        p = self.h.herd("exec", CLUSTER, "task.yaml")
        out = p.stdout.decode()
        for rank in (0, 1):
            self.assertRegex(out, rf"rank {rank} previous: {rank}-\d+\n")
        # A command with --image-id: the same container too (the workdir is always bound).
        p = self.h.herd("exec", CLUSTER, "--image-id", f"docker:{IMAGE}", "--",
                        "echo proof: $(cat /tmp/herd-proof)")
        self.assertRegex(p.stdout.decode(), r"proof: 0-\d+")
        self.assertEqual(sorted(ours(herd_containers())), sorted(before))

    def test_4_cancel_kills_the_job_in_the_container(self):
        marker = "herd-container-cancel-417"
        p = self.h.herd("exec", CLUSTER, "-d", "--image-id", f"docker:{IMAGE}", "--",
                        f"sleep 1000 # {marker}")
        job = int(re.search(rb"Job submitted, ID: (\d+)", p.stderr).group(1))
        self.assertTrue(wait_for(lambda: pids_with_marker(marker), timeout=60),
                        "the job never ran")
        self.h.herd("cancel", CLUSTER, str(job), "-y")
        self.assertTrue(wait_for(lambda: not pids_with_marker(marker), timeout=30),
                        f"left running: {pids_with_marker(marker)}")
        st = self.h.herd("logs", CLUSTER, str(job), "--status", check=False)
        self.assertEqual(st.returncode, 103, st.stdout)  # CANCELLED

    def test_5_an_image_that_does_not_exist(self):
        before = ours(herd_containers())
        p = self.h.herd("exec", CLUSTER, "--image-id", "docker:localhost/herd-no-such-image:1",
                        "--", "true", check=False)
        self.assertEqual(p.returncode, 100)
        text = p.stdout.decode() + p.stderr.decode()
        error = re.compile(r"herd: node \S+, image localhost/herd-no-such-image:1: cannot start "
                           r"the container: .+")
        self.assertTrue([ln for ln in text.splitlines() if error.search(ln)], text[-3000:])
        self.assertEqual(sorted(ours(herd_containers())), sorted(before))  # nothing started

    def node_dir(self, node):
        dirs = glob.glob(os.path.join(self.h.env["HERD_HOME"], "**", "provider", "nodes",
                                      f"{CLUSTER}-{node}"),
                         recursive=True)
        self.assertEqual(len(dirs), 1, dirs)
        return dirs[0]

    @contextlib.contextmanager
    def podman_hidden(self, node):
        """podman is not there for new processes of the node: an empty file bound over it in the
        node's own mount namespace (its sshd's; private propagation, so this machine keeps it)."""
        with open(os.path.join(self.node_dir(node), "sshd.pid")) as f:
            sshd = f.read().strip()
        empty = os.path.join(self.h.dir, "no-podman")
        open(empty, "w").close()
        podman = shutil.which("podman")
        enter = ["nsenter", f"--target={sshd}", "--mount"]
        subprocess.run([*enter, "mount", "--bind", empty, podman], check=True, timeout=30)
        try:
            yield
        finally:
            subprocess.run([*enter, "umount", podman], check=True, timeout=30)

    def job_ids(self):
        return sorted(j["id"] for j in json.loads(self.h.herd("queue", CLUSTER, "-o",
                                                              "json").stdout))

    def test_5a_a_node_without_a_runtime_fails_the_launch(self):
        jobs, before = self.job_ids(), sorted(ours(herd_containers()))
        with self.podman_hidden("worker1"):
            p = self.h.herd("launch", "-c", CLUSTER, "-y", "task.yaml", check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err[-3000:])
        self.assertEqual([ln for ln in err.splitlines() if ln.startswith("herd: ")],
                         [f"herd: node {CLUSTER}-worker1, image {IMAGE}: no container runtime: "
                          "podman is not installed (no container runtime)"], err[-3000:])
        # Nothing submitted, nothing started.
        self.assertEqual(self.job_ids(), jobs)
        self.assertEqual(sorted(ours(herd_containers())), before)
        # The node has its runtime again: the same launch goes through.
        p = self.h.herd("launch", "-c", CLUSTER, "-y", "task.yaml")
        self.assertIn("Job finished (status: SUCCEEDED).", p.stderr.decode())

    def test_5aa_an_exec_with_an_image_on_a_node_without_a_runtime_fails_at_once(self):
        jobs, before = self.job_ids(), sorted(ours(herd_containers()))
        with self.podman_hidden("worker1"):
            p = self.h.herd("exec", CLUSTER, "--image-id", f"docker:{IMAGE}", "--",
                            "echo should not run", check=False)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err[-3000:])
        # The same one line as the launch's, nothing submitted, nothing started.
        self.assertEqual([ln for ln in err.splitlines() if ln.startswith("herd: ")],
                         [f"herd: node {CLUSTER}-worker1, image {IMAGE}: no container runtime: "
                          "podman is not installed (no container runtime)"], err[-3000:])
        self.assertNotIn(b"should not run", p.stdout)
        self.assertNotIn("Job submitted", err)
        self.assertEqual(self.job_ids(), jobs)
        self.assertEqual(sorted(ours(herd_containers())), before)
        # With its runtime back, the same exec runs.
        p = self.h.herd("exec", CLUSTER, "--image-id", f"docker:{IMAGE}", "--",
                        "echo ran in $(cat /herd-test-image)")
        self.assertIn(b"ran in inside the herd test image", p.stdout)

    @unittest.skipUnless(has_registry(), "needs docker-registry and htpasswd")
    def test_5b_a_private_registry(self):
        password = "herd-registry-pw-7d1"
        registry = Registry(os.path.join(self.h.dir, "registry"), password)
        confs = []
        try:
            registry.start()
            private = f"{registry.server}/herd/private:1"
            self.images.append(private)  # pulled into the machine's store: removed at the end
            subprocess.run([*PODMAN, "push", "-q", "--tls-verify=false", "--creds",
                            f"{REGISTRY_USER}:{password}", IMAGE, f"docker://{private}"],
                           check=True, capture_output=True, timeout=300)
            # The nodes' podman speaks plain HTTP to it (a user's registries.conf in their home)
            # and reaches it in their own namespace.
            for i, node in enumerate(("head", "worker1")):
                conf = os.path.join(self.node_dir(node), "home", ".config", "containers",
                                    "registries.conf")
                os.makedirs(os.path.dirname(conf), exist_ok=True)
                with open(conf, "w") as f:
                    f.write(f'[[registry]]\nlocation = "{registry.server}"\ninsecure = true\n')
                confs.append(conf)
                registry.start(f"herd-{CLUSTER}-{i}")

            def launch(pw):
                return self.h.herd("launch", "-c", CLUSTER, "-y", "--image-id", f"docker:{private}",
                                   "--env", f"SKYPILOT_DOCKER_USERNAME={REGISTRY_USER}",
                                   "--env", f"SKYPILOT_DOCKER_SERVER={registry.server}",
                                   "--secret", f"SKYPILOT_DOCKER_PASSWORD={pw}", "task.yaml",
                                   check=False, timeout=600)

            jobs, before = self.job_ids(), sorted(ours(herd_containers()))
            p = launch("not-the-password")
            err = p.stderr.decode()
            self.assertEqual(p.returncode, 1, err[-3000:])
            lines = [ln for ln in err.splitlines() if ln.startswith("herd: ")]
            self.assertEqual(len(lines), 1, err[-3000:])
            self.assertRegex(lines[0], rf"^herd: node {CLUSTER}-head, image {re.escape(private)}: "
                                       rf"the registry {re.escape(registry.server)} refused the "
                                       rf"login of {REGISTRY_USER}: .+ \(and 1 other node\)$")
            self.assertEqual(self.job_ids(), jobs)
            self.assertEqual(sorted(ours(herd_containers())), before)

            p = launch(password)
            out, err = p.stdout.decode(), p.stderr.decode()
            self.assertEqual(p.returncode, 0, err[-3000:] + out[-3000:])
            for rank in (0, 1):
                self.assertIn(f"rank {rank} of 2: inside the herd test image", out)
            self.assertEqual(len(ours(herd_containers())), len(before) + 2, herd_containers())
            for text in (out, err, self.h.herd("queue", CLUSTER, "-o", "json").stdout.decode()):
                self.assertNotIn(password, text)
        finally:
            for conf in confs:
                os.unlink(conf)
            registry.stop()

    @unittest.skipIf(os.environ.get("CONTAINER_TORCH") == "0" or not has_torch(),
                     "CONTAINER_TORCH=0, or no python3-torch on this machine to build from")
    def test_6_minGPT_ddp_in_a_torch_image(self):
        t0 = time.time()
        build_image(TORCH_IMAGE, BASE_PACKAGES + ["python3-torch", "python3"], self.h.dir)
        self.images.append(TORCH_IMAGE)
        print(f"image {TORCH_IMAGE} built in {time.time() - t0:.1f} s", file=sys.stderr)
        os.chdir(EXAMPLE)
        # launch on the UP cluster: its setup installs the torchrun shim the host test needs too
        # (ENVIRONMENT.md), here inside the image.
        p = self.h.herd("launch", "-c", CLUSTER, "-y", "--image-id", f"docker:{TORCH_IMAGE}",
                        "--env", "MAX_EPOCHS=1", "--env", "MAX_ITERS=6",
                        "--env", "SNAPSHOT_PATH=container_snapshot.pt",
                        "train-multinode-cpu.yaml", timeout=600, check=False)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-3000:] + out[-3000:])
        self.assertEqual(len(set(re.findall(r"world_size=4 rank=(\d)", out))), 4, out[-3000:])
        os.chdir(self.task_dir)


if __name__ == "__main__":
    unittest.main(verbosity=2)
