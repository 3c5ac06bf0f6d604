"""Gold files: the whole rendered output of the console tree, the diff, the audit and the
report's index page, from two synthetic traces (a default path and a variant that part
at a deciding ``if`` and below an op), set against tests/gold/. A change to a renderer
shows as a diff of the file, not as a substring that happened to survive.

``DLTRACE_REGEN_GOLD=1 pytest tests/test_gold.py`` writes the files again from the
current code; review them with ``git diff tests/gold`` before committing. Fast tier."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from tracer.processing.diff import diff_traces
from tracer.analysis.portability import framework_report, survey_reports
from tracer.analysis.scorecard import scorecard
from tracer.render.audit_console import print_audit, print_pass_needs
from tracer.render.console import print_trace
from tracer.render.diff_console import print_diff
from tracer.render.html import write_report
from tracer.trace import Frame, Node, Run, Trace

GOLD = Path(__file__).resolve().parent / "gold"
REGEN = os.environ.get("DLTRACE_REGEN_GOLD") == "1"

META = {"framework": "samplefw", "framework_version": "1.0", "primitive": "conv2d", "api": "functional",
        "device": "cpu", "variant": "default", "shape": [2, 3, 8, 8], "passes": ["forward"],
        "source_roots": ["samplefw"], "machine": {"arch": "x86_64", "cpu": "synthetic", "cores": 2}}
SOURCE = ["def conv2d(x, w):",
          "    if _onednn_enabled():",
          "        return _conv_onednn(x, w)",
          "    return _conv_reference(x, w)"]


def _op(name: str, *children: Node, ns: int = 1000) -> Node:
    return Node(Frame("op", "samplefw", name), 1, ns, children=list(children))


def _trace(variant: str, onednn: bool) -> Trace:
    """A conv2d step whose Python picks its kernel at line 2 of ``conv2d``: oneDNN's
    when ``onednn``, the reference code otherwise; the op layer parts below _convolution."""
    callee, line, kernel = (("_conv_onednn", 3, "onednn_convolution") if onednn
                            else ("_conv_reference", 4, "slow_conv2d"))
    python = Node(Frame("root", "", "conv2d.forward"), 1, 9000, children=[
        Node(Frame("python", "samplefw.nn", "conv2d", "samplefw/nn.py", 1), 1, 8000, lines=[2, line], children=[
            Node(Frame("python", "samplefw.nn", "_onednn_enabled", "samplefw/nn.py", 10), 1, 500, call_lines=[2]),
            Node(Frame("python", "samplefw.nn", callee, "samplefw/nn.py", 20), 1, 7000, call_lines=[line], children=[
                Node(Frame("c", "samplefw._C", "convolution"), 1, 6500)])])])
    ops = Node(Frame("root", "", "conv2d.forward"), 1, 9000, children=[
        _op("conv2d", _op("_convolution", _op(kernel, _op("empty"), ns=5000), ns=6000), ns=7000)])
    run = Run("forward", "warm", {"python": python, "op": ops}, {"untraced_s": 1e-4, "traced_s": 2e-4})
    return Trace({**META, "variant": variant}, [run], {("samplefw/nn.py", 1): SOURCE})


A, B = _trace("default", True), _trace("onednn-off", False)


def _console() -> Console:
    return Console(file=io.StringIO(), width=100, record=True, color_system=None, force_terminal=False,
                   legacy_windows=False)


def console_tree() -> str:
    c = _console()
    print_trace(A, c, layers=("python", "op"))
    return c.export_text()


def diff() -> str:
    c = _console()
    print_diff(diff_traces(A, B, "forward", "warm", ("python", "op"), 0.02, False), c, ("default.json", "off.json"))
    return c.export_text()


def audit() -> str:
    c = _console()
    rep = framework_report("samplefw", [A, B], [])
    print_audit(rep, c)
    print_pass_needs(rep, c)
    return c.export_text()


def html_index(tmp: Path) -> str:
    reports = survey_reports([A, B], [])
    index = write_report(reports, tmp, cards=scorecard(reports, [A, B]))
    text = index.read_text()
    # what differs from one run to the next: the date and the tool's version
    text = re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d", "generated DATE", text)
    return re.sub(r"dltrace \d+\.\d+\.\d+\S*", "dltrace VERSION", text)


def _check(name: str, text: str) -> None:
    path = GOLD / name
    if REGEN:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: DLTRACE_REGEN_GOLD=1 writes it"
    want = path.read_text()
    assert text == want, f"{name} differs from its gold file (DLTRACE_REGEN_GOLD=1 rewrites it; review the diff)"


@pytest.mark.parametrize("name, render", [("console-tree.txt", console_tree), ("diff.txt", diff), ("audit.txt", audit)])
def test_console_outputs_match_their_gold_files(name: str, render: Callable[[], str]) -> None:
    _check(name, render())


def test_report_index_matches_its_gold_file(tmp_path: Path) -> None:
    _check("report-index.html", html_index(tmp_path / "report"))


def test_gold_files_show_what_they_are_for(tmp_path: Path) -> None:
    """The synthetic pair does what the gold files are meant to show: the deciding if, the
    split below _convolution, both sides in the audit. Guards against gold files that were
    regenerated from a broken renderer."""
    text = diff()
    assert "◆     if _onednn_enabled():" in text and "split in _convolution" in text
    assert "onednn_convolution" in audit() and "slow_conv2d" in audit()
    assert "└── → C samplefw._C.convolution" in console_tree()
    assert "samplefw.html" in html_index(tmp_path / "report")
