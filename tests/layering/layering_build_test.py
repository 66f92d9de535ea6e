"""Builds the probes of tests/layering/CMakeLists.txt in the build folder given: each file that
includes across sides must fail to compile because the header is not found (not for any other
reason), and the file that includes only what it may must compile."""

import subprocess
import sys
import unittest

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"

FORBIDDEN = {
    "controller_includes_agent": "agent/core/head.hpp",
    "agent_includes_controller": "controller/ops/cluster_ops.hpp",
    "shared_includes_agent": "agent/sched/scheduler.hpp",
}


def build(target):
    return subprocess.run(["cmake", "--build", BUILD, "--target", f"layering_{target}"],
                          capture_output=True, text=True, timeout=280)


class LayeringBuildTest(unittest.TestCase):
    def test_allowed_includes_compile(self):
        p = build("controller_includes_shared")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_cross_side_includes_do_not_compile(self):
        for probe, header in FORBIDDEN.items():
            with self.subTest(probe=probe):
                p = build(probe)
                out = p.stdout + p.stderr
                self.assertNotEqual(p.returncode, 0, out)
                self.assertIn(f"{header}: No such file or directory", out)


if __name__ == "__main__":
    unittest.main()
