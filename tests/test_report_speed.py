"""What makes a survey's report fast without changing it: each distinct graph drawn
by one dot process however many pages, passes and threads ask for it, and the trace
loading that leaves the cyclic GC as it found it."""

from __future__ import annotations

import gc
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
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


def _chain(n: int, library: str = "") -> "nx.DiGraph[str]":
    g: nx.DiGraph[str] = nx.DiGraph()
    for i in range(n):
        g.add_node(f"n{i}", label=f"at::native::kernel_{n}_{i}", side=graphs.SHARED,
                   kind="native" if library else "op", library=library)
        if i:
            g.add_edge(f"n{i - 1}", f"n{i}", side=graphs.SHARED)
    return g


def _counting_runs(monkeypatch) -> list[str]:
    """The input of each dot run from here on."""
    inputs: list[str] = []
    real_run = subprocess.run

    def counting(cmd, *args, **kwargs):
        inputs.append(kwargs.get("input", ""))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(graphs.subprocess, "run", counting)
    return inputs


def test_graphs_drawn_together_are_the_text_each_gives_alone(monkeypatch):
    """dot draws the graphs waiting in one run; each drawing is the text a run of its own
    gives (dot names a later graph's group after a page: renamed), and a graph that
    fails is its own gap, not its run's."""
    exe = graphs.dot()
    sources = [graphs.to_dot(_chain(n), f"t{n}").to_string() for n in range(1, 6)]
    alone = [graphs._svg(exe, s, 60) for s in sources]
    inputs = _counting_runs(monkeypatch)
    dots = graphs.DotRuns(exe, workers=1)
    gate = threading.Event()
    run = dots._run

    def held(taken):  # the first asker runs, and waits, while the others queue behind it
        gate.wait(10)
        run(taken)

    monkeypatch.setattr(dots, "_run", held)
    with ThreadPoolExecutor(len(sources) + 1) as pool:
        first = pool.submit(dots.draw, sources[0])
        while not dots._running:
            time.sleep(0.01)
        jobs = [first, *(pool.submit(dots.draw, s) for s in [*sources[1:], "digraph { a -> ; }"])]
        while len(dots._waiting) < len(sources):
            time.sleep(0.01)
        gate.set()
        got = [j.exception(timeout=30) or j.result() for j in jobs]
    assert got[:-1] == alone
    assert isinstance(got[-1], graphs.GraphError) and "syntax error" in str(got[-1])
    # the first alone; the five waiting in one run, which failed on the broken one, so
    # those five were drawn again one by one
    assert [i.count("digraph") for i in inputs] == [1, 5, 1, 1, 1, 1, 1]


def test_a_graph_with_clusters_is_drawn_alone(monkeypatch):
    """dot orders a graph's clusters by what it drew before in the same run: such a graph
    is always drawn alone, so that a report is the same text however its drawings queued."""
    exe = graphs.dot()
    clustered = graphs.to_dot(_chain(3, library="libdnnl.so"), "c").to_string()
    plain = [graphs.to_dot(_chain(n), "p").to_string() for n in (2, 4)]
    assert graphs._CLUSTER in clustered and not any(graphs._CLUSTER in p for p in plain)
    inputs = _counting_runs(monkeypatch)
    taken: list[tuple[str, Future[str]]] = [(s, Future()) for s in (plain[0], clustered, plain[1])]
    graphs.DotRuns(exe)._run(taken)
    assert [i.count("digraph") for i in inputs] == [2, 1]
    assert taken[1][1].result() == graphs._svg(exe, clustered, 60)
    assert "libdnnl.so" in taken[1][1].result()


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


def test_a_run_of_several_that_cannot_start_leaves_no_drawing_waiting(monkeypatch):
    """dot gone or the disk full when a run of several starts: each graph is drawn alone,
    and one that fails alone fails for its own caller; no thread waits for ever."""
    exe = graphs.dot()
    sources = [graphs.to_dot(_chain(n), "t").to_string() for n in (2, 3)]

    def cannot_start(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(graphs, "_svgs", cannot_start)
    taken: list[tuple[str, Future[str]]] = [(s, Future()) for s in sources]
    graphs.DotRuns(exe)._run(taken)
    assert [f.result(timeout=30) for _, f in taken] == [graphs._svg(exe, s, 60) for s in sources]
