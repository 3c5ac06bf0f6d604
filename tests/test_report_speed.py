"""What makes a survey's report fast without changing it: each distinct graph drawn
by one dot process however many pages, passes and threads ask for it, and the trace
loading that leaves the cyclic GC as it found it."""

from __future__ import annotations

import gc
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import networkx as nx
import pytest

from tests.conftest import META, op
from tracer import survey as sv
from tracer.analysis.portability import survey_reports
from tracer.render import graphs
from tracer.analysis.survey_model import assemble
from tracer.knowledge import knowledge
from tracer.render.html import write_report
from tracer.trace import Frame, Node, Run, Trace, load, save

K = knowledge()


def test_a_drawing_asked_for_by_several_threads_at_once_is_made_once():
    cache = graphs.SvgCache()
    made: list[str] = []
    asked = threading.Barrier(5)
    release = threading.Event()

    def draw(source: str) -> str:
        made.append(source)
        release.wait(10)  # every other caller asks while this one draws
        return f"<svg>{source}</svg>"

    def ask(source: str) -> str:
        asked.wait(10)
        return cache.svg(source, draw)

    with ThreadPoolExecutor(5) as pool:
        jobs = [pool.submit(ask, "digraph { a }") for _ in range(4)] + [pool.submit(ask, "digraph { b }")]
        threading.Timer(0.3, release.set).start()
        got = [j.result(timeout=20) for j in jobs]
    assert got == ["<svg>digraph { a }</svg>"] * 4 + ["<svg>digraph { b }</svg>"]
    assert sorted(made) == ["digraph { a }", "digraph { b }"]


def test_a_drawing_that_failed_fails_for_every_caller_without_running_again():
    cache = graphs.SvgCache()
    runs = []

    def failing(source: str) -> str:
        runs.append(source)
        raise graphs.GraphError("dot failed: syntax error in line 1")

    for _ in range(3):
        with pytest.raises(graphs.GraphError, match="syntax error"):
            cache.svg("digraph {", failing)
    assert runs == ["digraph {"]


def test_real_dot_draws_a_repeated_graph_once(monkeypatch):
    dots = []
    real_run = subprocess.run

    def counting(cmd, *args, **kwargs):
        dots.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(graphs.subprocess, "run", counting)
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_node("a", label="aten::conv2d", side=graphs.SHARED)
    g.add_node("b", label="aten::mkldnn_convolution", side=graphs.A_ONLY, split=True)
    g.add_edge("a", "b", side=graphs.A_ONLY)
    cache = graphs.SvgCache()
    first, again, titled = graphs.svg(g, cache=cache), graphs.svg(g, cache=cache), graphs.svg(g, "t", cache=cache)
    assert first == again and first.startswith("<svg") and "mkldnn_convolution" in first
    assert titled != first  # another source: drawn
    assert len(dots) == 2


def _twice(folder: Path) -> None:
    """A default and a variant trace whose forward and backward passes part the same way:
    the page shows one graph twice."""
    folder.mkdir(parents=True)
    for variant, kernel in (("default", "aten::mkldnn_convolution"), ("fast", "aten::thnn_conv2d")):
        runs = [Run(p, "warm", {"op": Node(Frame("root", "", "conv2d.forward"), 1, 3000,
                                           children=[op("aten::conv2d", op("aten::_convolution", op(kernel)))])},
                    {"untraced_s": 1e-4}) for p in ("forward", "backward")]
        save(Trace({**META, "variant": variant}, runs), folder / f"{variant}.json")


def test_a_report_draws_each_distinct_graph_once_and_shows_the_repeat(tmp_path, monkeypatch):
    _twice(tmp_path / "t")
    traces = [load(p) for p in sorted((tmp_path / "t").glob("*.json"))]
    sources: list[str] = []
    real_run = subprocess.run

    def counting(cmd, *args, **kwargs):
        sources.append(kwargs["input"])
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(graphs.subprocess, "run", counting)
    write_report(assemble(survey_reports(traces, [], k=K), [], [], K), tmp_path / "r")
    page = (tmp_path / "r" / "samplefw.html").read_text()
    assert page.count('<div class="graph"><svg') == 1 and "the same call graph as" in page
    assert len(sources) == len(set(sources)) >= 2  # one inline drawing for both passes, a full graph each
    assert len(list((tmp_path / "r" / "graphs").glob("*.svg"))) == 2


def test_collecting_traces_leaves_the_collector_on(tmp_path):
    _twice(tmp_path / "t")
    assert gc.isenabled()
    traces, _, _ = sv.read_folders([tmp_path / "t"])
    assert len(traces) == 2 and gc.isenabled()
    gc.disable()
    try:  # and off where the caller had it off
        sv.read_folders([tmp_path / "t"])
        assert not gc.isenabled()
    finally:
        gc.enable()
