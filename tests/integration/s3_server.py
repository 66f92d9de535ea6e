"""A real S3-compatible server for the bucket tests: s3rver from npm (scripts/install-deps.sh), SigV4
checked, over a data directory of the test's own, on an address the test gives; and the test's own
view of its buckets through rclone on this machine. stop() kills it; start() again serves the
same data (on another address if need be)."""

import os
import shutil
import signal
import socket
import subprocess
import unittest

from herd_env import netns_available, pids_with_marker, wait_for

S3RVER = os.path.join(os.environ.get("HERD_S3RVER_DIR",
                                     os.path.expanduser("~/.cache/herd/s3rver")),
                      "node_modules", ".bin", "s3rver")
KEY = "S3RVER"  # s3rver's fixed access key and secret


def have_tools():
    """s3rver, node, rclone and FUSE: what a bucket mount test needs on this machine."""
    return bool(os.path.exists(S3RVER) and shutil.which("rclone") and shutil.which("node") and
                os.path.exists("/dev/fuse"))


def free_port(addr):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, data_dir):
        self.dir = data_dir
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        self.endpoint = None

    def start(self, addr):
        """s3rver on addr (over the data it already holds); a running one is stopped first."""
        self.stop()
        port = free_port(addr)
        self.proc = subprocess.Popen(["node", S3RVER, "-d", self.dir, "-a", addr, "-p", str(port),
                                      "--silent"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.endpoint = f"http://{addr}:{port}"

        def up():
            try:
                socket.create_connection((addr, port), timeout=1).close()
                return True
            except OSError:
                return False
        assert wait_for(up, 20), "s3rver did not start"

    def stop(self):
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def use_in(self, env):
        """Points a herd environment (a dict) at the server, as a user's AWS settings would."""
        env.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1",
                   AWS_ENDPOINT_URL_S3=self.endpoint)
        for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
            env.pop(k, None)

    def rclone(self, *args, input=None):
        """rclone on this machine against the server (remote "t"), given `input` on stdin: the
        CompletedProcess (text)."""
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        env.update(RCLONE_CONFIG_T_TYPE="s3", RCLONE_CONFIG_T_PROVIDER="Other",
                   RCLONE_CONFIG_T_ACCESS_KEY_ID=KEY, RCLONE_CONFIG_T_SECRET_ACCESS_KEY=KEY,
                   RCLONE_CONFIG_T_ENDPOINT=self.endpoint, RCLONE_CONFIG_T_FORCE_PATH_STYLE="true")
        return subprocess.run(["rclone", *args], capture_output=True, text=True, env=env,
                              timeout=60, input=input)

    def objects(self, bucket):
        """The bucket's object names, sorted; None when the bucket does not exist."""
        assert self.proc is not None and self.proc.poll() is None, "s3rver is gone"
        p = self.rclone("lsf", "-R", "--files-only", "--retries", "1", f"t:{bucket}")
        return sorted(p.stdout.split()) if p.returncode == 0 else None


def needs_bucket_tools(cls):
    """Skips a bucket suite on a machine without what it needs."""
    return unittest.skipUnless(
        netns_available() and have_tools(),
        "needs root, ip netns, rclone, /dev/fuse and s3rver (scripts/install-deps.sh)")(cls)


class BucketSuite:
    """What the bucket suites (HerdEnvTestCase classes with an S3Server) share: nothing of theirs
    left running at the end, and files written into the suite's directory."""

    @classmethod
    def check_nothing_left(cls):
        left = pids_with_marker(cls.h.dir)
        assert left == [], f"processes of the suite left (rclone, s3rver): {left}"

    def write(self, name, text):
        path = os.path.join(self.h.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path
