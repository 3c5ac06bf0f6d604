"""The survey's report as a library call (tracer.pipeline, ``import dltrace``): the
stages in order with progress heard by the caller, the model built once from the
folders, and what a bad folder gives. Fast tier: synthetic traces, no framework."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.test_gold import A, B
from tracer import pipeline
from tracer.errors import DltraceError
from tracer.gap import Gap, write_gap
from tracer.trace import save


class Heard:
    def __init__(self) -> None:
        self.stages: list[str] = []
        self.notes: list[tuple[str, str]] = []

    def stage(self, name: str) -> None:
        self.stages.append(name)

    def job_done(self, event: object) -> None:
        raise AssertionError("a report runs no probe")

    def note(self, text: str, kind: str = "detail") -> None:
        assert kind in pipeline.NOTE_KINDS
        self.notes.append((kind, text))


@pytest.fixture
def folder(tmp_path):
    traces = tmp_path / "traces"
    for side in ("cpu-default", "cpu-onednn-off"):
        (traces / "samplefw" / side).mkdir(parents=True)
    save(A, traces / "samplefw" / "cpu-default" / "conv2d-functional.json")
    save(B, traces / "samplefw" / "cpu-onednn-off" / "conv2d-functional.json")
    write_gap(traces / "samplefw" / "cpu-default" / "relu-functional.json",
              Gap("samplefw", "cpu", "default", "relu", "functional", "probe crashed (exit -11)"))
    (traces / "samplefw" / "cpu-default" / "broken.json").write_text("{not json")
    return traces


def test_report_from_python_says_its_stages_in_order(folder, tmp_path):
    heard = Heard()
    index = pipeline.report([folder], tmp_path / "out", heard)
    assert index == tmp_path / "out" / "index.html" and index.is_file()
    assert heard.stages == ["reading traces", "portability reports", "figures", "models", "verdicts", "rendering"]
    assert ("result", f"report: {index}") in heard.notes
    # the file that is not a trace is one warning, and the page says a file was skipped
    (warning,) = [t for kind, t in heard.notes if kind == "warning"]
    assert warning.startswith("skipped ") and "broken.json" in warning
    assert "broken.json" in index.read_text()


def test_the_model_is_built_once_with_the_knowledge_given(folder):
    from tracer.knowledge import knowledge

    k = knowledge()
    model = pipeline.model([folder], k)
    assert model.knowledge is k
    assert [r.name for r in model.reports] == ["samplefw"]
    # every table the pages and survey.json read is in it, once
    assert set(model.decided) == {"samplefw"} and [c.framework for c in model.cards] == ["samplefw"]
    assert [v.framework for v in model.verdicts] == ["samplefw"] and model.verdicts[0].rank == 1
    assert model.reports[0].gaps and model.reports[0].gaps[0].error == "probe crashed (exit -11)"


def test_a_folder_without_traces_is_one_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DltraceError, match="no traces found in"):
        pipeline.report([tmp_path / "empty"], tmp_path / "out")


def test_import_dltrace_is_the_library_under_the_tools_name(folder, tmp_path):
    """`import dltrace` loads nothing heavy; its names are the library's own calls."""
    code = ("import sys, dltrace; heavy = [m for m in ('tracer.pipeline', 'distributed', 'jinja2') "
            "if m in sys.modules]; print(dltrace.__version__, heavy); "
            "from tracer import pipeline; assert dltrace.report is pipeline.report; "
            f"print(dltrace.report([{str(folder)!r}], {str(tmp_path / 'via')!r}).name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first.endswith(" []") and second == "index.html"


def test_one_folder_given_as_a_string_is_that_folder_not_its_characters(folder, monkeypatch, tmp_path):
    """`dltrace.report("traces", "out")` read "t", "r", "a"... as folders: a str or a
    path is one folder; what is not a folder is one line, never a TypeError."""
    monkeypatch.chdir(folder.parent)
    traces, gaps, skipped = pipeline.read("traces")
    assert len(traces) == 2 and len(gaps) == 1 and len(skipped) == 1
    assert len(pipeline.read(folder)[0]) == 2  # a Path alone too
    with pytest.raises(DltraceError, match=r"no traces found in nothing-here$"):
        pipeline.model("nothing-here", None)  # type: ignore[arg-type]
    for bad in (3, [folder, 3], b"traces"):
        with pytest.raises(DltraceError, match="folder"):
            pipeline.read(bad)  # type: ignore[arg-type]
    plan = pipeline.SurveyPlan([], [], tmp_path, "dltrace survey", [], with_traces="traces")  # type: ignore[arg-type]
    assert [str(p) for p in plan.with_traces] == ["traces"]
