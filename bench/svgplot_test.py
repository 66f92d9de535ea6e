"""bench/svgplot.py: the chart is well-formed SVG whose lines go through the data as drawn (a
higher value is higher on the page, the x order kept), with every series named in the legend and
text escaped."""

import os
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svgplot  # noqa: E402

NS = {"svg": "http://www.w3.org/2000/svg"}


class SvgPlotTest(unittest.TestCase):
    def test_series_are_drawn_through_their_points(self):
        svg = svgplot.line_chart("`true` on N nodes", "nodes", "ms", [
            ("herd", [(2, 10.0), (8, 20.0), (4, 12.0)]),
            ("srun <slurm>", [(2, 50.0), (4, 80.0), (8, 160.0)]),
        ])
        root = ET.fromstring(svg)
        lines = root.findall("svg:polyline[@class='series']", NS)
        self.assertEqual([l.get("data-name") for l in lines], ["herd", "srun <slurm>"])
        for line, ys in zip(lines, ([10, 12, 20], [50, 80, 160])):
            pts = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
            self.assertEqual(len(pts), 3)
            xs = [x for x, _ in pts]
            self.assertEqual(xs, sorted(xs))  # drawn in x order, whatever order was given
            page_y = [y for _, y in pts]
            # page y grows downwards: larger values are drawn higher (smaller y)
            self.assertEqual(page_y, sorted(page_y, reverse=True))
        # both series use one scale: srun's 160 is the highest point of the chart
        top = min(float(c.get("cy")) for c in root.findall("svg:circle", NS))
        srun_pts = [tuple(map(float, p.split(","))) for p in lines[1].get("points").split()]
        self.assertEqual(top, srun_pts[-1][1])
        texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
        self.assertIn("srun <slurm>", texts)  # escaped in the file, read back as written
        self.assertIn("`true` on N nodes", texts)

    def test_ticks_cover_the_range_with_round_steps(self):
        self.assertEqual(svgplot.nice_ticks(0, 160), [0, 50, 100, 150, 200])
        self.assertEqual(svgplot.nice_ticks(2, 8), [2, 4, 6, 8])
        ticks = svgplot.nice_ticks(0, 0.37)
        self.assertLessEqual(ticks[0], 0)
        self.assertGreaterEqual(ticks[-1], 0.37)

    def test_no_points_is_an_error(self):
        with self.assertRaises(ValueError):
            svgplot.line_chart("t", "x", "y", [("a", [])])


if __name__ == "__main__":
    unittest.main()
