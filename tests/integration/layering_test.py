"""Layering: the controller (controller/) and the agent (agent/) never use each other's code; what
both need lives in shared/, which uses neither. Checked on the source tree: #include lines of every
C/C++ file, and the targets each CMakeLists.txt links (test programs are exempt: a test may drive
an agent with the controller's client). Run as a test, or by hand: layering_test.py [ROOT]."""

import os
import re
import shutil
import sys
import tempfile
import unittest

# Layer -> layers whose code it must not use.
FORBIDDEN = {
    "controller": {"agent"},
    "agent": {"controller"},
    "shared": {"agent", "controller"},
}
SOURCE_EXT = (".c", ".cc", ".cpp", ".h", ".hpp")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
DEFINE_RE = re.compile(r"\badd_(?:library|executable)\s*\(\s*([A-Za-z0-9_.+-]+)")
LINK_RE = re.compile(r"\btarget_link_libraries\s*\(([^)]*)\)", re.S)


def _files(root, layer, match):
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, layer)):
        dirnames.sort()
        for name in sorted(filenames):
            if match(name):
                yield os.path.join(dirpath, name)


def include_violations(root):
    out = []
    for layer, banned in FORBIDDEN.items():
        for path in _files(root, layer, lambda n: n.endswith(SOURCE_EXT)):
            with open(path, errors="replace") as f:
                text = f.read()
            for m in INCLUDE_RE.finditer(text):
                top = m.group(1).split("/", 1)[0]
                if top in banned:
                    line = text.count("\n", 0, m.start()) + 1
                    out.append(f"{os.path.relpath(path, root)}:{line}: {layer}/ includes "
                               f"\"{m.group(1)}\"")
    return out


def _cmake_files(root):
    files = {}
    for layer in FORBIDDEN:
        for path in _files(root, layer, lambda n: n == "CMakeLists.txt"):
            with open(path) as f:
                # Comments out, so a commented-out line neither defines nor links anything.
                files[path] = (layer, re.sub(r"#[^\n]*", "", f.read()))
    return files


def link_violations(root):
    files = _cmake_files(root)
    owner = {}  # target -> layer that defines it
    for layer, text in files.values():
        for name in DEFINE_RE.findall(text):
            owner[name] = layer
    out = []
    for path, (layer, text) in files.items():
        for m in LINK_RE.finditer(text):
            words = m.group(1).split()
            if not words:
                continue
            target, deps = words[0], words[1:]
            if owner.get(target) != layer:
                continue  # a test program (herd_unit_test) or a target of another folder
            for dep in deps:
                if owner.get(dep) in FORBIDDEN[layer]:
                    out.append(f"{os.path.relpath(path, root)}: {target} ({layer}/) links {dep} "
                               f"({owner[dep]}/)")
    return out


def violations(root):
    return include_violations(root) + link_violations(root)


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class LayeringTest(unittest.TestCase):
    def test_controller_and_agent_do_not_use_each_other(self):
        found = violations(os.environ.get("HERD_SOURCE_DIR", ROOT))
        self.assertEqual(found, [], "\n".join(found))

    def test_the_check_finds_each_kind_of_violation(self):
        # A small tree with one violation of each kind: the check must name them all.
        tmp = tempfile.mkdtemp(prefix="herd-layering-")
        try:
            def write(rel, text):
                path = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
            write("agent/sched/CMakeLists.txt", "add_library(herd_sched s.cpp)\n")
            write("agent/sched/s.cpp", '#include "shared/sched/feasibility.hpp"\n'
                  '#include "controller/ops/cluster_ops.hpp"\n')
            write("controller/core/CMakeLists.txt",
                  "add_library(herd_cc sdk.cpp)\ntarget_link_libraries(herd_cc PUBLIC\n"
                  "  herd_feasibility\n  herd_sched)\n"
                  "# target_link_libraries(herd_cc herd_sched)\n"
                  "herd_unit_test(t SOURCES t.cpp LIBS herd_cc herd_sched)\n"
                  "target_link_libraries(t PRIVATE herd_sched)\n")
            write("controller/core/sdk.cpp", "// agent/x.hpp\n#include <agent/sched/s.hpp>\n")
            write("shared/sched/CMakeLists.txt", "add_library(herd_feasibility f.cpp)\n")
            write("shared/sched/f.cpp", '#  include "agent/sched/scheduler.hpp"\n')
            found = violations(tmp)
            self.assertEqual(found, [
                'controller/core/sdk.cpp:2: controller/ includes "agent/sched/s.hpp"',
                'agent/sched/s.cpp:2: agent/ includes "controller/ops/cluster_ops.hpp"',
                'shared/sched/f.cpp:1: shared/ includes "agent/sched/scheduler.hpp"',
                "controller/core/CMakeLists.txt: herd_cc (controller/) links herd_sched (agent/)",
            ])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        problems = violations(sys.argv[1])
        print("\n".join(problems) or "layering ok")
        sys.exit(1 if problems else 0)
    unittest.main()
