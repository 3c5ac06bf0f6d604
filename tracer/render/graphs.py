"""Call graphs drawn with Graphviz (`dot`) from the networkx graphs of tracer.processing.graph.

A survey's trees can have thousands of frames; a drawing is only useful if the
split is visible at a glance. The focused graph (tracer.processing.graph) keeps the
paths from the root to each split and the first frames of each side below it;
here long single-child chains fold into one "… N frames …" box, and native frames
are grouped by library.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar
from xml.etree import ElementTree

import networkx as nx
import pydot

from tracer.machine import usable_cpus
from tracer.processing.graph import A_ONLY, B_ONLY, SHARED

#: a graph's node keys: the merged walk's indices, a call graph's paths (drawn the same way)
_N = TypeVar("_N", bound=Hashable)

FILL = {SHARED: "#eeeeee", A_ONLY: "#c6dbef", B_ONLY: "#fdd0a2"}
EDGE = {SHARED: "#888888", A_ONLY: "#3182bd", B_ONLY: "#e6550d"}
MAX_FULL = 1500  # frames beyond which a full drawing is not attempted


#: The most characters of a frame's name a drawing carries (its tooltip): real C++
#: symbols run to thousands, and dot refuses a string over 16,384.
TOOLTIP_WIDTH = 600


class GraphvizMissing(RuntimeError):
    pass


class GraphError(RuntimeError):
    """A graph that cannot be drawn, or whose drawing is not plain: a gap on its page."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def quoted(text: str) -> str:
    """``text`` as a DOT double-quoted string, shown as it is. Frame names come from
    traces recorded elsewhere: unquoted, pydot passes ``<...>`` through as an
    HTML-like label, which lets a name inject attributes (``URL="javascript:..."``);
    a backslash would start a DOT escape (``\\N``, ``\\G``), and dot passes entity
    references (``&lt;``) through to its SVG."""
    text = _CONTROL.sub(" ", text).replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")
    return f'"{text}"'


def short(label: str, width: int = 48) -> str:
    """Keep the informative end of a long qualified name."""
    if len(label) <= width:
        return label
    return "…" + label[-(width - 1):]


def fold_chains(sub: nx.DiGraph[Hashable]) -> nx.DiGraph[Hashable]:
    """Chains of three or more shared frames with one child each (no split among them)
    become one "… N frames …" box: the dispatcher glue between the API and the split."""
    if not sub:
        return sub
    sub = sub.copy()
    root = next(n for n in sub if sub.in_degree(n) == 0)
    for n in list(nx.topological_sort(sub)):
        if n not in sub or n == root:
            continue
        chain = []
        cur = n
        while (cur in sub and not sub.nodes[cur].get("split") and sub.out_degree(cur) == 1
               and sub.in_degree(cur) == 1 and sub.nodes[cur]["side"] == SHARED):
            chain.append(cur)
            cur = next(iter(sub.successors(cur)))
        if len(chain) >= 3:
            parent = next(iter(sub.predecessors(chain[0])))
            after = next(iter(sub.successors(chain[-1])))
            fold = ("fold", chain[0])
            sub.add_node(fold, label=f"… {len(chain)} frames …", kind="fold", side=SHARED, split=False, library="")
            sub.add_edge(parent, fold, side=SHARED)
            sub.add_edge(fold, after, side=SHARED)
            sub.remove_nodes_from(chain)
    return sub


def to_dot(g: nx.DiGraph[_N], title: str = "") -> pydot.Dot:
    dot = pydot.Dot(graph_type="digraph", rankdir="TB", fontname="Helvetica", fontsize="10",
                    label=quoted(short(title, 200)), labelloc="t", nodesep="0.15", ranksep="0.3")
    ids = {n: f"n{i}" for i, n in enumerate(g.nodes)}
    clusters: dict[str, pydot.Cluster] = {}
    for n, d in g.nodes(data=True):
        side = d.get("side", SHARED)
        kind = d.get("kind", "")
        label = str(d.get("label", ""))
        attrs: dict[str, Any] = dict(label=quoted(short(label)), shape="box", style="filled,rounded",
                                     fillcolor=FILL.get(side, "#ffffff"), fontname="Helvetica", fontsize="9",
                                     color="#999999", tooltip=quoted(short(label, TOOLTIP_WIDTH)))
        if kind == "fold":
            attrs.update(style="dashed,rounded", fillcolor="#ffffff", fontcolor="#777777")
        if d.get("split"):
            attrs.update(color="#d62728", penwidth="3", fontname="Helvetica-Bold")
        node = pydot.Node(ids[n], **attrs)
        lib = d.get("library") if kind == "native" else ""
        if lib:
            cl = clusters.get(lib)
            if cl is None:
                cl = clusters[lib] = pydot.Cluster(f"lib{len(clusters)}", label=quoted(short(lib)), style="dashed",
                                                   color="#bbbbbb", fontsize="9", fontname="Helvetica")
                # pydot annotates add_subgraph with Subgraph only; it takes a Cluster (its isinstance check)
                dot.add_subgraph(cl)  # type: ignore[arg-type]
            cl.add_node(node)
        else:
            dot.add_node(node)
    for u, v, d in g.edges(data=True):
        side = d.get("side", SHARED)
        dot.add_edge(pydot.Edge(ids[u], ids[v], color=EDGE.get(side, "#888888"), arrowsize="0.6"))
    return dot


#: Elements a drawing of ours never contains (dot wraps a tooltip in an <a> with only
#: a title: that one is inert, and allowed).
_ACTIVE_TAGS = frozenset({"script", "foreignobject", "iframe", "use", "image", "animate", "set", "handler", "style"})


def inert(svg_text: str) -> bool:
    """Whether a drawing is plain: read as XML, no element that runs or loads anything,
    no link, no event handler. dot's output passed through this, so that a frame
    name that got past quoting would still not reach the page as a link."""
    try:
        root = ElementTree.fromstring(svg_text)
    except ElementTree.ParseError:
        return False
    for el in root.iter():
        if not isinstance(el.tag, str) or el.tag.rsplit("}", 1)[-1].lower() in _ACTIVE_TAGS:
            return False
        for name in el.attrib:
            local = name.rsplit("}", 1)[-1].lower()
            if "href" in local or local.startswith("on") or local in ("target", "url"):
                return False
    return True


#: Drawings made at a time: one dot process per core this process may run on.
WORKERS = usable_cpus()


def dot() -> str:
    """The Graphviz program's path; GraphvizMissing where it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing("Graphviz 'dot' is not installed (Debian package graphviz)")
    return exe


#: Graphs one dot process draws at most. dot takes about 25 ms to start, and 1,437 of
#: a survey report's 1,552 drawings took it under 50 ms in all: one process each spent
#: half of the report's drawing time starting dot.
BATCH = 32


#: How pydot writes a cluster (a library's box around its native frames). dot lays out a
#: graph with clusters after another graph otherwise than alone (the clusters' order in
#: its SVG follows what it drew before): such a graph is drawn alone, so that a report is
#: the same text however its drawings were grouped.
_CLUSTER = "subgraph cluster"


class DotRuns:
    """dot processes shared by a report's drawing threads, ``workers`` at a time, each
    drawing every source waiting when it starts (up to BATCH): dot draws each graph of
    its input into an SVG document of its own. A thread that asks while fewer than
    ``workers`` run becomes a runner itself (no thread of its own here): it runs until
    nothing waits. A run that fails draws its sources again one by one, so that each
    failure is its own graph's; a graph with clusters is drawn alone (_CLUSTER)."""

    def __init__(self, exe: str, timeout: float = 60, workers: int = WORKERS, batch: int = BATCH):
        self.exe, self.timeout, self.workers, self.batch = exe, timeout, max(1, workers), max(1, batch)
        self._lock = threading.Lock()
        self._waiting: list[tuple[str, Future[str]]] = []
        self._running = 0

    def draw(self, source: str) -> str:
        job: Future[str] = Future()
        with self._lock:
            self._waiting.append((source, job))
            runner = self._running < self.workers
            if runner:
                self._running += 1
        if runner:
            self._run_while_waiting()
        return job.result()

    def _run_while_waiting(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    self._running -= 1
                    return
                taken, self._waiting = self._waiting[:self.batch], self._waiting[self.batch:]
            self._run(taken)

    def _run(self, taken: list[tuple[str, Future[str]]]) -> None:
        together = [source for source, _ in taken if _CLUSTER not in source]
        try:
            drawn = dict(zip(together, _svgs(self.exe, together, self.timeout) or ())) if len(together) > 1 else {}
        except Exception:  # noqa: BLE001 - dot gone, a full disk: each is drawn alone below, and fails alone
            drawn = {}
        for source, job in taken:
            try:
                job.set_result(_plain(drawn[source]) if source in drawn else _svg(self.exe, source, self.timeout))
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that asked for it
                job.set_exception(exc)


def _svgs(exe: str, sources: list[str], timeout: float) -> list[str] | None:
    """Each source's <svg> element from one dot run; None where the run did not give
    one per source (a failure, a time-out): the caller draws them one by one."""
    try:
        proc = subprocess.run([exe, "-Tsvg"], input="\n".join(sources), capture_output=True, text=True,
                              timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return None
    documents = proc.stdout.split("</svg>")
    if proc.returncode != 0 or len(documents) != len(sources) + 1:
        return None
    # after its input's first graph, dot names each graph's group after a page ("page0,1_graph0"):
    # named as alone, each drawing is the same text whichever run drew it
    return [_PAGED.sub('<g id="graph0" class="graph"', doc[doc.find("<svg"):], count=1) + "</svg>"
            + ("\n" if documents[i + 1].startswith("\n") else "") for i, doc in enumerate(documents[:-1])]


_PAGED = re.compile(r'<g id="page\d+,\d+_graph0" class="graph"')


class SvgCache:
    """Each distinct DOT source drawn once, however many threads ask for it at a time:
    a survey's pages show one graph under several passes and pairs (a fifth of its
    drawings are repeats), and a page lists the repeats side by side, drawn at once.
    The drawings it makes share one :class:`DotRuns`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Future[str]] = {}
        self._runs: DotRuns | None = None

    def runs(self, exe: str, timeout: float) -> DotRuns:
        """The dot runs this cache's drawings share (made on first use)."""
        with self._lock:
            if self._runs is None:
                self._runs = DotRuns(exe, timeout)
            return self._runs

    def svg(self, source: str, draw: Callable[[str], str]) -> str:
        """``draw(source)``, or what it gave (or raised) when it was asked before."""
        with self._lock:
            job = self._jobs.get(source)
            mine = job is None
            if job is None:
                job = self._jobs[source] = Future()
        if mine:
            try:
                job.set_result(draw(source))
            except BaseException as exc:  # noqa: BLE001 - handed to every caller, this one included
                job.set_exception(exc)
        return job.result()


def svg(g: nx.DiGraph[_N], title: str = "", timeout: float = 60, cache: SvgCache | None = None) -> str:
    """Run Graphviz; returns the <svg> element (no XML prologue) for inlining.
    GraphError when dot fails or its drawing holds anything active. ``cache``: the
    drawings made so far, not made again, and the dot runs they share."""
    exe = dot()
    source = to_dot(g, title).to_string()
    if cache is None:
        return _svg(exe, source, timeout)
    return cache.svg(source, cache.runs(exe, timeout).draw)


def _svg(exe: str, source: str, timeout: float) -> str:
    try:
        proc = subprocess.run([exe, "-Tsvg"], input=source, capture_output=True, text=True,
                              timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        raise GraphError(f"dot did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        why = " ".join(proc.stderr.split())[:200] or f"exit status {proc.returncode}"
        raise GraphError(f"dot failed: {why}")
    text = proc.stdout
    return _plain(text[text.find("<svg"):])


def _plain(svg_text: str) -> str:
    """``svg_text``, or GraphError where the drawing holds anything active (:func:`inert`)."""
    if not inert(svg_text):
        raise GraphError("the drawing held a link or script (from a frame name in the traces); not shown")
    return svg_text
