"""The HTML report is written whatever the folder holds: only a model's (or a user
workload's) traces, no framework page to link to; only gap records, more of one reason
than a page lists. Each ends in a report that says what is missing, never a template
error. Names in traces are hostile (script injection, bidirectional controls, names too
long for a file or a graph): they are shown as text and never break a page or a link.
Fast tier (but for one slow page of 100,000 kernels): synthetic traces and gap records."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import META, dltrace, op, write_pair
from tracer.trace import Frame, Node, Run, Trace, load, save


def _model_trace(primitive: str, api: str, device: str = "cpu") -> Trace:
    runs = []
    for pass_ in ("forward", "backward"):
        op = Node(Frame("root", "", f"{primitive}.{pass_}"), 1, 10,
                  children=[Node(Frame("op", "aten", "aten::addmm"), 2, 5)])
        py = Node(Frame("root", "", f"{primitive}.{pass_}"), 1, 10,
                  children=[Node(Frame("python", "torch.nn", "Linear.forward", "torch/nn/linear.py", 1), 1, 5)])
        runs.append(Run(pass_, "warm", {"python": py, "op": op}, {"untraced_s": 0.001, "traced_s": 0.002}))
    model = {"name": primitive, "title": primitive, "api": api, "layers": [], "loss": "x", "optimizer": "y",
             "defaults": {}, "built_from_primitives": {}}
    if api == "user":
        model["workload"] = {"file": f"{primitive}.py", "function": "workload", "single_step": False}
    meta = {"framework": "torch", "framework_version": "2.13.0", "primitive": primitive, "api": api,
            "device": device, "variant": "default", "passes": ["forward", "backward"], "model": model}
    return Trace(meta, runs)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["lenet", "mynet"])
def test_a_report_of_only_a_models_traces(tmp_path, what):
    folder = tmp_path / "traces"
    folder.mkdir()
    save(_model_trace(what, "layer" if what == "lenet" else "user"), folder / f"{what}.json")
    proc = dltrace("report", str(folder), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "models.html").read_text()
    assert f'data-model="{what}" data-framework="torch"' in page
    assert 'href="torch.html"' not in page  # no framework page to link to: named, not linked


@pytest.mark.slow
def test_a_report_of_only_gaps_more_of_one_reason_than_a_page_lists(tmp_path):
    folder = tmp_path / "traces" / "torch" / "cpu-default"
    folder.mkdir(parents=True)
    for i in range(75):
        (folder / f"relu-x{i}.gap.json").write_text(json.dumps(
            {"framework": "torch", "device": "cpu", "variant": "default", "primitive": "relu", "api": f"x{i}",
             "error": "the fleet's scheduler went away", "kind": "scheduler"}))
    proc = dltrace("report", str(tmp_path / "traces"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    index = (tmp_path / "r" / "index.html").read_text()
    page = (tmp_path / "r" / "torch.html").read_text()
    assert "… 35 more" in index and "… 15 more" in page
    assert "the fleet&#39;s scheduler went away" in page or "the fleet's scheduler went away" in page



@pytest.mark.slow
def test_a_report_says_which_files_it_could_not_read(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    save(_model_trace("mynet", "user"), folder / "mynet.json")
    (folder / "broken.json").write_text("{not json")
    proc = dltrace("report", str(folder), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    index = (tmp_path / "r" / "index.html").read_text()
    assert 'id="skipped-files">1 file of the trace folders could not be read' in index and "broken.json" in index


INJECTION = '<a>, URL="javascript:alert(1337)", target=<_top>'


def test_frame_names_cannot_inject_links_into_the_report(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", INJECTION)
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "samplefw.html").read_text()
    files = list((tmp_path / "r" / "graphs").glob("*.svg"))
    inline = re.findall(r"<svg\b.*?</svg>", page, re.S)
    assert files and inline  # drawn, not refused
    for svg in [*inline, *(f.read_text() for f in files)]:
        root = ElementTree.fromstring(svg[svg.find("<svg"):])
        for el in root.iter():  # dot's tooltips are <a> with a title only: no link, no target
            assert not any("href" in k or k.lower() in ("url", "target") for k in el.attrib), el.attrib
    assert not re.search(r"href=[\"']?\s*javascript:", page, re.I)
    assert "javascript:alert(1337)" in page  # the name is shown, as text


def test_a_graph_that_cannot_be_drawn_is_a_gap_not_a_lost_report(tmp_path):
    long_name = "at::native::" + "k" * 20000 + "<float>"
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", long_name)
    write_pair(tmp_path / "u", "aten::mkldnn_convolution", "aten::thnn_conv2d", primitive="relu")
    proc = dltrace("report", str(tmp_path / "t"), str(tmp_path / "u"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "samplefw.html").read_text()
    assert (tmp_path / "r" / "index.html").exists()
    # names are shortened for drawing, so both graphs are drawn
    assert page.count('<div class="graph"><svg') == 2
    assert max(len(g.read_text()) for g in (tmp_path / "r" / "graphs").glob("*.svg")) < 200_000


def test_drawing_failures_are_marked_on_the_page(tmp_path, monkeypatch):
    from tracer.analysis.portability import survey_reports
    from tracer.render import graphs
    from tracer.analysis.survey_model import assemble
    from tracer.knowledge import knowledge
    from tracer.render.html import write_report

    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    traces = [load(p) for p in sorted((tmp_path / "t").glob("*.json"))]

    def failing(*args, **kwargs):
        raise graphs.GraphError("dot failed: syntax error in line 1")

    monkeypatch.setattr(graphs, "svg", failing)
    index = write_report(assemble(survey_reports(traces, [], k=knowledge()), [], [], knowledge()), tmp_path / "r")
    page = (tmp_path / "r" / "samplefw.html").read_text()
    assert index.exists() and 'class="warn small graph-gap">graph not drawn: dot failed: syntax error' in page


def test_an_invalid_trace_is_skipped_and_the_rest_renders(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    doc = json.loads((tmp_path / "t" / "default.json").read_text())
    del doc["meta"]["framework"]
    (tmp_path / "t" / "no-framework.json").write_text(json.dumps(doc))
    doc["meta"]["framework"] = ["samplefw"]
    (tmp_path / "t" / "list-framework.json").write_text(json.dumps(doc))
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 2 and "Traceback" not in proc.stderr
    assert any("no-framework.json: malformed trace (meta.framework is missing)" in line for line in skipped)
    assert any("list-framework.json: malformed trace (meta.framework must be a non-empty string, not list)" in line
               for line in skipped)
    assert "aten::thnn_conv2d" in (tmp_path / "r" / "samplefw.html").read_text()


def _named(folder: Path, name: str, **meta) -> Path:
    a, _ = write_pair(folder / name.encode().hex()[:40], "aten::mkldnn_convolution", "aten::thnn_conv2d",
                      framework=name, **meta)
    return a


def test_each_framework_name_gets_its_own_page_and_none_replaces_the_index(tmp_path):
    for name in ("torch", "torch!", "Torch", "index", "!!!", "graphs"):
        _named(tmp_path / "t", name)
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    pages = sorted(p.name for p in (tmp_path / "r").glob("*.html"))
    assert len(pages) == 7 and "torch.html" in pages and "index.html" in pages, pages
    assert not [p for p in pages if p.startswith(".")]
    index = (tmp_path / "r" / "index.html").read_text()
    assert "<h1" in index and "dltrace survey" in index and "Gaps" in index  # the index, not a framework page
    assert "<title>torch · dltrace" in (tmp_path / "r" / "torch.html").read_text()
    links = re.findall(r'<a href="([^"#]+\.html)"><b>([^<]+)</b>', index)
    assert len({h for h, _ in links}) == 6 and all((tmp_path / "r" / h).exists() for h, _ in links)


@pytest.mark.parametrize("field", ["framework", "primitive", "variant", "api", "machine.cpu"])
def test_long_names_do_not_reach_file_names(tmp_path, field):
    long = "x" * 300
    meta = {"machine": {"arch": "x86_64", "cpu": long}} if field == "machine.cpu" else {field: long}
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d", **meta)
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "r" / "index.html").exists()
    assert max(len(p.name) for p in (tmp_path / "r").rglob("*")) < 120


def test_bidirectional_controls_are_inert_in_the_report(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::evil\u202ekernel\u2066x")
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    for page in (tmp_path / "r").rglob("*.html"):
        text = page.read_text()
        assert "\u202e" not in text and "\u2066" not in text, page
    assert "aten::evil\\u202ekernel\\u2066x" in (tmp_path / "r" / "samplefw.html").read_text()


@pytest.mark.slow
def test_a_page_lists_a_bounded_number_of_kernels(tmp_path):
    kids = [Node(Frame("op", "aten", f"aten::kernel_{i}"), 1, 10) for i in range(100_000)]
    for variant, children in (("default", [op("aten::mkldnn_convolution")]), ("fast", kids)):
        tree = Node(Frame("root", "", "conv2d.forward"), 1, 3000,
                    children=[op("aten::conv2d",
                                 Node(Frame("op", "aten", "aten::_convolution"), 1, 10, children=children))])
        save(Trace({**META, "variant": variant}, [Run("forward", "warm", {"op": tree}, {"untraced_s": 1e-4})]),
             tmp_path / "t" / f"{variant}.json") if (tmp_path / "t").mkdir(exist_ok=True) is None else None
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert sum(p.stat().st_size for p in (tmp_path / "r").rglob("*.html")) < 2 << 20


def test_the_verdict_grid_links_each_cell_to_its_comparison_and_escapes_names():
    from tracer.analysis.verdict import GridCell
    from tracer.render.grid_svg import PARTS, STROKE, grid_svg

    cells = [GridCell("torch", "conv2d", "forward", "op", "recorded", "conv2d-forward", "parts at an op"),
             GridCell('x"<fw>', "relu", "forward", "unknown-layer", "", "relu-forward", INJECTION)]
    svg = str(grid_svg(cells, lambda fw: f"{fw}.html"))
    root = ElementTree.fromstring(svg)
    links = [el for el in root.iter() if el.tag.endswith("}a")]
    assert [a.get("href") for a in links] == ["torch.html#conv2d-forward", 'x"<fw>.html#relu-forward']
    rects = [el for el in root.iter() if el.tag.endswith("}rect")]
    assert (rects[0].get("fill"), rects[0].get("stroke")) == (PARTS["op"][0], STROKE["recorded"])
    assert rects[1].get("fill") == PARTS["no GPU pair"][0]  # a part it does not know is drawn as no pair
    assert "javascript:" not in " ".join(a.get("href") for a in links)


def _workload_trace(name: str) -> Trace:
    return _model_trace(name, "user")


def test_a_workload_name_from_a_trace_writes_nothing_outside_the_report(tmp_path):
    """meta.primitive is a workload's name, and its coverage table's file name: ``../``, an
    absolute path or a ``/`` in it stays inside OUT/workloads, and two names that join alike
    keep a table each."""
    folder = tmp_path / "deep" / "er" / "traces"
    folder.mkdir(parents=True)
    for i, name in enumerate(["../../ESCAPED", str(tmp_path / "ABSOLUTE"), "no/such/folder", "a-b", "a"]):
        save(_workload_trace(name), folder / f"w{i}.json")
    out = tmp_path / "deep" / "er" / "out"
    proc = dltrace("report", str(folder), "-o", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "coverage" in p.name]
    assert written and all(p.parent == out / "workloads" for p in written), written
    assert len(written) == 2 * 5


def test_a_link_in_place_of_the_reports_workloads_folder_is_replaced_not_followed(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    save(_workload_trace("mynet"), folder / "w.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "workloads").symlink_to(elsewhere)
    proc = dltrace("report", str(folder), "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert not list(elsewhere.iterdir())
    assert not (tmp_path / "out" / "workloads").is_symlink() and list((tmp_path / "out" / "workloads").iterdir())


def test_a_workload_name_too_long_for_a_page_is_refused_as_a_malformed_trace(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    save(_workload_trace("x" * 100_000), folder / "long.json")
    save(_workload_trace("mynet"), folder / "w.json")
    proc = dltrace("report", str(folder), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert "meta.primitive is 100000 characters long" in proc.stderr
    assert (tmp_path / "r" / "models.html").stat().st_size < 200_000


@pytest.mark.parametrize("epoch, shown", [
    ("1700000000", "2023-11-14 22:13"), ("253402300800", "9999-12-31 23:59"),
    ("99999999999999999999", "9999-12-31 23:59"),
    ("²", None), ("①", None), ("-1", None), ("", None)])
def test_source_date_epoch_is_read_or_clamped_never_a_traceback(monkeypatch, epoch, shown):
    from tracer.render.html import generated_at
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    got = generated_at()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", got)
    if shown is not None:
        assert got == shown


def test_a_standin_list_that_lost_a_pass_is_marked_incomplete_everywhere(tmp_path):
    """A workload's stand-in run whose forward could not run there (its op layer's error
    kept): the models page, survey.json and the coverage export call its list incomplete."""
    folder = tmp_path / "traces"
    folder.mkdir()
    t = _model_trace("mynet", "user", device="standin")
    t.runs[0].layers.pop("op")
    t.runs[0].stats["op_error"] = "ProbeError: the stand-in could not run program 1 of the forward pass"
    t.meta["standin"] = {"reached": {"backward": ["aten::addmm"]}}
    save(t, folder / "w.json")
    write_pair(folder / "prims", "aten::mkldnn_convolution", "aten::thnn_conv2d")  # figures: survey.json is written
    proc = dltrace("report", str(folder), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert "incomplete, not a must-implement list: mynet (user) forward" in (tmp_path / "r" / "models.html").read_text()
    doc = json.loads((tmp_path / "r" / "survey.json").read_text())
    implement = doc["report"]["models"]["mynet"]["frameworks"]["torch"]["implement"]
    assert "could not run program 1 of the forward pass" in implement["incomplete"]
    exported = json.loads(next((tmp_path / "r" / "workloads").glob("*.coverage.json")).read_text())
    assert "forward did not run whole" in exported["incomplete"]
