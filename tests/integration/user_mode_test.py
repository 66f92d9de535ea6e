"""The whole CLI as a normal user: the `local` provider's user mode (loopback addresses, a
user-mode sshd and a home per node), launch, exec, down. Run as root, the test makes a throwaway
user in a private mount namespace (a bind-mounted copy of /etc/passwd) and drops to it."""

import os
import shutil
import subprocess
import tempfile
import unittest

HERD = os.environ.get("HERD", "herd")
UID = 61017


def can_drop():
    return os.geteuid() == 0 and shutil.which("setpriv") and shutil.which("unshare")


@unittest.skipUnless(can_drop(), "needs root (to make the throwaway user), setpriv and unshare")
class UserModeTest(unittest.TestCase):
    def test_launch_exec_down_as_a_normal_user(self):
        tmp = tempfile.mkdtemp(prefix="herd-usermode-")
        try:
            os.chmod(tmp, 0o755)
            home = os.path.join(tmp, "home")
            os.makedirs(home)
            os.chown(home, UID, UID)
            with open("/etc/passwd") as f, open(os.path.join(tmp, "passwd"), "w") as g:
                g.write(f.read() + f"herdtest:x:{UID}:{UID}::{home}:/bin/bash\n")
            with open("/etc/group") as f, open(os.path.join(tmp, "group"), "w") as g:
                g.write(f.read() + f"herdtest:x:{UID}:\n")
            herd = f"env HOME={home} HERD_HOME={home}/herd USER=herdtest {HERD}"
            with open(os.path.join(tmp, "as_user.sh"), "w") as f:
                f.write(f"cd {home} && {herd} launch -c users --num-nodes 2 -y -- "
                        "'echo rank $SKYPILOT_NODE_RANK home $HOME uid $(id -u)' && "
                        f"{herd} exec users --num-nodes 2 -- 'echo again $SKYPILOT_NODE_RANK'\n"
                        f"rc=$?\n{herd} down users -y\nexit $rc\n")
            script = (f"mount --bind {tmp}/passwd /etc/passwd && "
                      f"mount --bind {tmp}/group /etc/group && "
                      f"exec setpriv --reuid={UID} --regid={UID} --clear-groups sh {tmp}/as_user.sh")
            p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                script], capture_output=True, text=True, timeout=180)
            out = p.stdout
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            nodes = f"{home}/herd/clusters/users/provider/nodes"
            self.assertRegex(out, rf"\(head, rank=0, pid=\d+\) rank 0 home {nodes}/users-head/home "
                                  rf"uid {UID}\n")
            self.assertRegex(out, rf"\(worker1, rank=1, pid=\d+, ip=127\.\d+\.\d+\.2\) rank 1 home "
                                  rf"{nodes}/users-worker1/home uid {UID}\n")
            self.assertIn("again 1\n", out)
            self.assertIn("Cluster users terminated.", p.stderr)
            # Zombies excepted: PID 1 here reaps orphans slowly (ENVIRONMENT.md).
            ps = subprocess.run(["ps", "-u", str(UID), "-o", "stat=,args="], capture_output=True,
                                text=True).stdout.splitlines()
            alive = [line for line in ps if not line.strip().startswith("Z")]
            self.assertEqual(alive, [], "processes of the user survived down")
            self.assertFalse(os.path.exists(f"{home}/herd/clusters/users"))
        finally:
            subprocess.run(["pkill", "-9", "-u", str(UID)])
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
