"""tracer.render.collapsed: a frame name holding the separators of the format (';'
between frames, a newline between stacks) cannot forge a stack or a weight. Fast tier."""

from __future__ import annotations

import re

from tests.conftest import dltrace
from tracer.trace import Frame, Node, Run, Trace, save


def test_frame_names_with_separators_cannot_forge_stacks(tmp_path):
    forged = "evil;injected;frames 999999\nroot;fake 12345"
    root = Node(Frame("root", "", "step.forward [native]"), 7, children=[
        Node(Frame("native", "", forged, lib="libx.so"), 5, children=[Node(Frame("native", "", "leaf\r;x"), 3)]),
        Node(Frame("native", "", "plain"), 2)])
    path = tmp_path / "t.json"
    save(Trace({"framework": "torch", "framework_version": "2.13.0", "primitive": "relu", "api": "functional",
                "device": "cpu", "variant": "default"},
               [Run("forward", "warm", {"native": root})]), path)
    proc = dltrace("export", str(path), "--format", "collapsed", "--layer", "native")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(re.fullmatch(r"[^;\n]+(;[^;\n]+)* \d+", line) for line in lines), lines
    weights = [int(line.rsplit(" ", 1)[1]) for line in lines]
    assert sum(weights) == 7 and 999999 not in weights and 12345 not in weights
    assert max(line.count(";") for line in lines) == 2  # root, the forged frame, its leaf: no more
