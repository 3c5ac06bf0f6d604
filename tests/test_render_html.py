"""The HTML report is written whatever the folder holds: only a model's (or a user
workload's) traces, no framework page to link to; only gap records, more of one reason
than a page lists. Each ends in a report that says what is missing, never a template
error. Fast tier: synthetic traces and gap records."""

from __future__ import annotations

import json

import pytest

from tests.conftest import dltrace
from tracer.trace import Frame, Node, Run, Trace, save


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
