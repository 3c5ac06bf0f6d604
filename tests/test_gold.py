"""Gold files: every output a user reads, whole, set against tests/gold/ as one folder.

From synthetic traces of a made-up framework, samplefw (a conv2d step by a default path
and a variant that part at a deciding ``if`` and below an op; a LeNet training step at
the functional and layer levels; a user's workload step), the test writes:

- console-tree.txt, diff.txt, audit.txt: the terminal's tree, ``dltrace diff`` and
  ``dltrace audit`` (rich, 100 columns, no colour);
- trace.json: the default path's trace as :func:`tracer.trace.save` writes it (bytes);
- report/: the whole folder :func:`tracer.render.report.render` writes: index.html,
  samplefw.html, models.html, survey.json, graphs/*.svg (the full diff graphs) and
  workloads/*.coverage.csv/.json (the user workload's coverage table).

tests/goldtest.py compares the folders both ways: a gold file with no output, an output
with no gold file, and a file that differs each fail by name with a unified diff. It
normalises the tool's version (``dltrace VERSION``: a release does not change every file)
and the geometry of Graphviz's drawings (where dot puts a node depends on its version and
fonts, not on dltrace); nothing else. The report's "generated" time is fixed by
SOURCE_DATE_EPOCH (tracer.render.html.generated_at). Without Graphviz's ``dot`` the
report has no drawings, so the comparison fails saying so (``make system`` installs it).

``DLTRACE_REGEN_GOLD=1 pytest tests/test_gold.py`` writes the files again from the
current code; review them with ``git diff tests/gold`` before committing. Fast tier."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
from rich.console import Console

from tests.goldtest import compare_folder, problems, regenerate
from tracer.analysis.models import is_model_trace
from tracer.analysis.portability import framework_report
from tracer.knowledge import knowledge
from tracer.processing.diff import diff_traces
from tracer.render.audit_console import print_audit, print_pass_needs
from tracer.render.console import print_trace
from tracer.render.diff_console import print_diff
from tracer.render.report import render
from tracer.trace import Frame, Node, Run, Trace, save

from tracer.analysis.survey_model import build

GOLD = Path(__file__).resolve().parent / "gold"
REGEN = os.environ.get("DLTRACE_REGEN_GOLD") == "1"
#: 2023-11-14 22:13 UTC: the "generated" time every page shows
EPOCH = "1700000000"

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


#: A training step's ops per pass: (Python function of samplefw.nn, the op it records)
STEP = {"forward": [("conv2d", "conv2d"), ("relu", "relu"), ("max_pool2d", "max_pool2d"), ("linear", "addmm"),
                    ("cross_entropy", "log_softmax")],
        "backward": [("backward", "addmm_backward"), ("backward", "max_pool2d_backward"),
                     ("backward", "convolution_backward"), ("sgd_step", "add_")]}


#: What the libraries reported per op of the workload's step, on this machine and on an
#: emulated ARM CPU (stats.layers.library.per_op): the ARM columns of its coverage table
PER_OP = {
    "x86": ("AVX512", {"conv2d": ["oneDNN: convolution jit:avx512_core (forward_training)"], "addmm": ["MKL: SGEMM"],
                       "convolution_backward": ["oneDNN: convolution jit:avx512_core (backward_data)"]}),
    "neoverse-n1": ("DEFAULT", {"conv2d": ["oneDNN: convolution indirect_gemm:acl (forward_training)"],
                                "addmm": ["NVPL: SGEMM"],
                                "convolution_backward": ["oneDNN: convolution gemm:ref (backward_data)"]}),
}


def _step(model: str, api: str, shape: list[int], about: Mapping[str, object], on: str = "") -> Trace:
    """A whole training step of ``model`` (tracer.contract.MODELS' name, or a workload's)
    at level ``api``: both passes, a Python layer and an op layer, timed; with ``on`` (a
    PER_OP key) its library layer told apart per op too, on that machine."""
    runs = []
    isa, calls_of = PER_OP.get(on, ("", {}))
    for pass_, calls in STEP.items():
        root = Frame("root", "", f"{model}.{pass_}")
        python = Node(root, 1, 10000, children=[
            Node(Frame("python", "samplefw.nn", fn, "samplefw/nn.py", 30 + 10 * i), 1, 1500,
                 children=[Node(Frame("c", "samplefw._C", op), 1, 1200)]) for i, (fn, op) in enumerate(calls)])
        ops = Node(root, 1, 10000, children=[_op(op, ns=1200) for _, op in calls])
        stats: dict = {"untraced_s": 2e-3, "traced_s": 5e-3}
        layers = {"python": python, "op": ops}
        if on:
            per_op = {op: {"count": 1, "calls": {c: 1 for c in calls_of.get(op, [])}} for _, op in calls}
            layers["library"] = Node(root, 1, 0, children=[
                Node(Frame("library", c.split(": ")[0], c.split(": ")[1], "", 0, c.split(": ")[0]), 1, 0)
                for _, op in calls for c in calls_of.get(op, [])])
            stats = {"layers": {"library": {"source": "vendor verbose logs", "per_op": per_op}}} if on != "x86" \
                else {**stats, "layers": {"library": {"source": "vendor verbose logs", "per_op": per_op}}}
        runs.append(Run(pass_, "warm", layers, stats))
    meta = {**META, "primitive": model, "api": api, "shape": shape, "passes": list(STEP), "cpu_capability": isa,
            "model": {"name": model, "api": api, "defaults": {}, "built_from_primitives": {}, **about}}
    if on and on != "x86":
        meta["machine"] = {"arch": "aarch64", "cpu": "Arm Neoverse-N1 (emulated)", "cores": 2,
                           "emulated": {"cpu": on, "model": "Arm Neoverse-N1"}}
        meta["emulated"] = {"cpu": on, "model": "Arm Neoverse-N1"}
    return Trace(meta, runs)


A, B = _trace("default", True), _trace("onednn-off", False)
LENET = {"title": "LeNet-5", "layers": [], "loss": "softmax cross-entropy", "optimizer": "SGD"}
NETS = [_step("lenet", "functional", [8, 1, 28, 28], LENET), _step("lenet", "layer", [8, 1, 28, 28], LENET),
        *(_step("mynet", "user", [4, 8], {"title": "mynet", "layers": [], "loss": "x", "optimizer": "y",
                                          "workload": {"file": "mynet.py", "function": "workload",
                                                       "single_step": False}}, on) for on in ("x86", "neoverse-n1"))]


def _console() -> Console:
    return Console(file=io.StringIO(), width=100, record=True, color_system=None, force_terminal=False,
                   legacy_windows=False)


def console_tree() -> str:
    c = _console()
    print_trace(A, c, layers=("python", "op"), k=knowledge())
    return c.export_text()


def diff() -> str:
    c = _console()
    print_diff(diff_traces(A, B, "forward", "warm", ("python", "op"), 0.02, False, k=knowledge()), c,
               ("default.json", "off.json"))
    return c.export_text()


def audit() -> str:
    c = _console()
    rep = framework_report("samplefw", [A, B], [], k=knowledge())
    print_audit(rep, c)
    print_pass_needs(rep, c)
    return c.export_text()


def report(out: Path) -> Path:
    """The report of the primitives' and the models' traces, as `dltrace report` makes
    it (tracer/cli/surveys.py); returns its index page."""
    k = knowledge()
    traces = [A, B, *NETS]
    skipped = ["traces/samplefw/broken.json"]
    return render(build(traces, [], k, None, skipped), out)


def outputs(out: Path) -> Path:
    """Every output into ``out``, as tests/gold/ holds them."""
    out.mkdir(parents=True)
    for name, text in (("console-tree.txt", console_tree()), ("diff.txt", diff()), ("audit.txt", audit())):
        (out / name).write_text(text, encoding="utf-8")
    save(A, out / "trace.json")
    report(out / "report")
    return out


@pytest.fixture
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)


def test_every_output_matches_its_gold_file(tmp_path: Path, fixed_time: None) -> None:
    # the set-up installs Graphviz (make system): without it this is a broken set-up, not a pass
    assert shutil.which("dot") is not None, "Graphviz 'dot' is not installed: the report's drawings are gold files"
    compare_folder(outputs(tmp_path / "out"), GOLD, REGEN)


def test_gold_files_show_what_they_are_for(tmp_path: Path, fixed_time: None) -> None:
    """The synthetic traces do what the gold files are meant to show: the deciding if,
    the split below _convolution, both sides in the audit, the models' page, the
    workload's coverage table. Guards against gold files regenerated from a broken renderer."""
    text = diff()
    assert "◆     if _onednn_enabled():" in text and "split in _convolution" in text
    assert "onednn_convolution" in audit() and "slow_conv2d" in audit()
    assert "└── → C samplefw._C.convolution" in console_tree()
    assert all(is_model_trace(t) for t in NETS) and not is_model_trace(A)
    index = report(tmp_path / "report")
    folder = index.parent
    assert "samplefw.html" in index.read_text() and "generated 2023-11-14 22:13" in index.read_text()
    models = (folder / "models.html").read_text()
    assert 'data-model="lenet" data-framework="samplefw"' in models and "mynet.py" in models
    assert (folder / "survey.json").exists() and list((folder / "workloads").glob("*.coverage.csv"))
    # the workload on an emulated ARM CPU: a column per machine, its reference code counted by the verdict
    (table,) = (folder / "workloads").glob("*.coverage.csv")
    assert '"on neoverse-n1 (emulated)"' in table.read_text() and "reference code (oneDNN: convolution gemm:ref" \
        in table.read_text()
    assert "mynet on neoverse-n1 (emulated): 1 op(s) on reference code" in index.read_text()
    page = (folder / "samplefw.html").read_text()
    assert "graph not drawn" not in page or shutil.which("dot") is None, "a drawing failed: see samplefw.html"


def _folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_new_a_missing_and_a_changed_page_each_fail_by_name(tmp_path: Path) -> None:
    gold = _folder(tmp_path / "gold", {"index.html": "a\nb\n", "old.html": "x\n", "graphs/g.svg": "<svg/>\n"})
    out = _folder(tmp_path / "out", {"index.html": "a\nc\n", "new.html": "y\n", "graphs/g.svg": "<svg/>\n"})
    found = problems(out, gold)
    assert [p.splitlines()[0] for p in found] == ["index.html: differs from its gold file",
                                                  "new.html: an output with no gold file",
                                                  "old.html: a gold file the output no longer has"]
    assert "-b\n+c" in found[0] and "+y" in found[1] and "-x" in found[2]
    with pytest.raises(AssertionError, match="3 output file"):
        compare_folder(out, gold)


def test_regenerating_makes_the_gold_folder_the_output(tmp_path: Path) -> None:
    gold = _folder(tmp_path / "gold", {"gone/old.html": "x\n", "same.html": "dltrace 0.0.9\n", "t.json": "{}"})
    out = _folder(tmp_path / "out", {"new/page.html": "y\n", "same.html": "dltrace 0.0.9\n",
                                     "t.json": '{"a":1}'})
    regenerate(out, gold)
    assert sorted(p.relative_to(gold).as_posix() for p in gold.rglob("*")) == ["new", "new/page.html", "same.html",
                                                                            "t.json"]
    assert problems(out, gold) == [] and (gold / "t.json").read_text() == '{"a":1}'
    (out / "t.json").write_text('{"a":2}')
    assert '- "a": 1\n+ "a": 2' in problems(out, gold)[0]  # compact JSON (a trace) diffed a value a line
    (out / "same.html").write_text("dltrace 1.2.0rc1\n")
    assert problems(out, gold)[0].startswith("t.json")  # a release changes no gold file
    regenerate(out, gold)  # nor does regenerating: what differs only in the version is left as it was
    assert (gold / "same.html").read_text() == "dltrace 0.0.9\n"


def test_the_version_and_dots_geometry_are_not_compared(tmp_path: Path) -> None:
    def drawing(x: str) -> str:
        return (f'<svg width="{x}pt" viewBox="0 0 {x} 9">\n<g id="graph0" class="graph" transform="scale(1)">\n'
                f'<text x="{x}" y="1" font-size="9.00">conv2d</text>\n</g>\n</svg>')

    grid = '<svg id="grid" width="5"/>'
    gold = _folder(tmp_path / "gold", {"p.html": f"dltrace 0.0.1 {drawing('10')} {grid}",
                                       "survey.json": '{"dltrace": "0.0.1", "n": 1}'})
    out = _folder(tmp_path / "out", {"p.html": f"dltrace 0.2.0.dev1+g0abc {drawing('12')} {grid}",
                                     "survey.json": '{"dltrace": "0.2.0", "n": 1}'})
    assert problems(out, gold) == []  # the version, and dot's geometry
    (out / "p.html").write_text(f"dltrace 0.0.1 {drawing('10')} <svg id=\"grid\" width=\"6\"/>")
    (out / "survey.json").write_text('{"dltrace": "0.0.1", "n": 2}')
    assert len(problems(out, gold)) == 2  # the tool's own drawing and figures are compared as written
