"""scripts/aws_catalog.py against a small committed sample of AWS's formats
(tests/unit/testdata/aws_catalog): two regions' EC2 offer files (products + terms.OnDemand, with
the Windows, dedicated, reserved-capacity, SQL and storage products that must be left out), a
describe-spot-price-history output (the newest Linux price per zone wins) and a
describe-instance-type-offerings output (rows per zone). The output must equal expected.csv,
which herd's own catalog parser reads in optimizer_test."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "aws_catalog.py")
DATA = os.path.join(HERE, "..", "tests", "unit", "testdata", "aws_catalog")
sys.path.insert(0, HERE)
import aws_catalog  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class AwsCatalogTest(unittest.TestCase):
    def data(self, name):
        return os.path.join(DATA, name)

    def test_sample_gives_expected_csv(self):
        p = run("--offer", self.data("offer-us-east-1.json"), "--offer",
                self.data("offer-us-west-2.json"), "--spot", self.data("spot-us-east-1.json"),
                "--offerings", self.data("offerings-us-east-1.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.data("expected.csv")) as f:
            self.assertEqual(p.stdout, f.read())
        rows = [line.split(",") for line in p.stdout.splitlines() if not line.startswith("#")]
        self.assertEqual(rows[0], aws_catalog.COLUMNS)
        p4d = [r for r in rows if r[0] == "p4d.24xlarge"]
        # One Linux/shared/used price; spot per zone, the newest (9.5 at 12:00, not 9.9 at 10:00).
        self.assertEqual([(r[5], r[6], r[8]) for r in p4d],
                         [("21.9576", "9.5", "us-east-1a"), ("21.9576", "8.7", "us-east-1b")])
        self.assertNotIn("x2iedn.xlarge", p.stdout)  # not a default family
        self.assertIn("p6-b200.48xlarge,B200,8,192,2048,113.9328,,us-west-2,\n", p.stdout)

    def test_families_and_output_file(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "aws.csv")
            p = run("--offer", self.data("offer-us-east-1.json"), "--families", "x2iedn",
                    "--date", "2025-07-01", "-o", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                text = f.read()
        self.assertIn("AWS price list of 2025-07-01", text)
        self.assertTrue(text.endswith("x2iedn.xlarge,,,4,128,0.83363,,us-east-1,\n"), text)

    def test_bad_inputs_are_one_line_errors(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.json")
            with open(bad, "w") as f:
                f.write('{"SpotPriceHistory": []}')
            p = run("--offer", bad)
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stderr,
                             f"aws_catalog: {bad}: not an EC2 offer file (no products / "
                             "terms.OnDemand)\n")
            with open(bad, "w") as f:
                f.write("{")
            p = run("--offer", bad)
            self.assertEqual(p.returncode, 2)
            self.assertTrue(p.stderr.startswith(f"aws_catalog: {bad}: Expecting"), p.stderr)
            p = run("--offer", self.data("offer-us-east-1.json"), "--families", "z9")
            self.assertEqual(p.returncode, 2)
            self.assertIn("no instance type of the chosen families", p.stderr)


if __name__ == "__main__":
    unittest.main()
