"""The HTML portability report: an index and one page per framework, rendered with
Jinja2 (autoescape on) from templates/, with pygments-highlighted code and inline
Graphviz SVG. Everything lands in one folder that opens from disk: no server, no
network, no CDN."""

from __future__ import annotations

import datetime
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from tracer import __version__
from tracer.files import write_text
from tracer.process.diff.result import Fragment, LayerDiff
from tracer.process.graph import focused_graph, merged_walk
from tracer.process.evidence_class import EVIDENCE_MEANING
from tracer.process.portability import LAYER_NAMES, FrameworkReport
from tracer.process.sampling import ALPHA, DEFAULT_THRESHOLD
from tracer.process.symbols import display
from tracer.process.tags import SYSTEM_LIBS
from tracer.registry import ROOT
from tracer.render import graphs

TEMPLATES = ROOT / "templates"
_FORMATTER = HtmlFormatter(nowrap=True)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["code"] = code_lines
    env.filters["slug"] = slug
    env.filters["symbol"] = display
    env.filters["seconds"] = lambda s: "" if s is None else (f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} µs")
    env.globals["LAYER_NAMES"] = LAYER_NAMES
    env.globals["SYSTEM_LIBS"] = SYSTEM_LIBS
    env.globals["EVIDENCE"] = EVIDENCE_MEANING
    return env


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()


def code_lines(fragment: Fragment) -> list[dict[str, Any]]:
    """Each source line of a fragment, highlighted, with what ran on which side."""
    text = "\n".join(l.text for l in fragment.lines)
    rendered = highlight(text, PythonLexer(), _FORMATTER).split("\n")
    out = []
    for i, line in enumerate(fragment.lines):
        out.append({"n": line.line, "html": Markup(rendered[i] if i < len(rendered) else html.escape(line.text)),
                    "ran": line.ran, "call": line.call, "decision": line.decision, "gap": line.gap_before})
    return out


@dataclass
class Drawing:
    """One diff layer's graph on a page: the focused inline SVG and the full graph's
    file, or why it could not be drawn (then the page shows the gap, not a graph)."""

    svg: Markup | None = None
    full: str | None = None
    nodes: int = 0
    shown: int = 0
    error: str = ""


class _Graphs:
    """Draws each diff layer once: a focused inline SVG, and the full graph as a file."""

    def __init__(self, out: Path):
        self.out = out
        self.dir = out / "graphs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.problem = ""

    def draw(self, name: str, layer: LayerDiff, title: str) -> Drawing | None:
        if not layer.splits or self.problem:
            return None
        drawing = Drawing()
        try:
            walk = merged_walk(layer)
            focused = graphs.fold_chains(focused_graph(walk))
            drawing.nodes, drawing.shown = len(walk), focused.number_of_nodes()
            drawing.svg = Markup(graphs.svg(focused, ""))
            if len(walk) <= graphs.MAX_FULL:
                write_text(self.dir / f"{name}.svg", graphs.svg(walk.whole(), title))
                drawing.full = f"graphs/{name}.svg"
        except graphs.GraphvizMissing as exc:
            self.problem = str(exc)
            return None
        except OSError:
            raise  # a full disk or unwritable folder is the report's failure, said once
        except Exception as exc:  # noqa: BLE001 - a graph that cannot be drawn must not lose the report
            drawing.error = str(exc) if isinstance(exc, graphs.GraphError) else f"{type(exc).__name__}: {exc}"
        return drawing


def write_report(reports: list[FrameworkReport], out: Path, threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Render the report of the portability model (tracer.process.portability) into
    ``out``; returns the index page."""
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    drawer = _Graphs(out)
    common = {
        "version": __version__,
        "generated": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "threshold": threshold,
        "alpha": ALPHA,
        "css": Markup(HtmlFormatter().get_style_defs(".hl")),
        "frameworks": reports,
        "machines": sorted({m for r in reports for m in r.machines}),
    }
    for rep in reports:
        graphs_for = {}
        for case in rep.cases:
            for i, pr in enumerate(case.pairs):
                for pass_, result in pr.diffs.items():
                    for layer in result.layers:
                        name = slug(f"{rep.name}-{case.primitive}-{case.api}-{pr.title}-{pass_}-{layer.layer}")
                        graphs_for[(case.primitive, case.api, i, pass_, layer.layer)] = drawer.draw(
                            name, layer, f"{rep.name} {case.primitive} ({case.api}) {pass_}: {pr.title}, {layer.layer} layer")
        page = env.get_template("framework.html").render(**common, fw=rep, graphs=graphs_for, graph_problem=drawer.problem)
        write_text(out / f"{slug(rep.name)}.html", page)
    index = out / "index.html"
    write_text(index, env.get_template("index.html").render(**common, cross=_cross(reports), graph_problem=drawer.problem))
    return index


def _cross(reports: list[FrameworkReport]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """primitive -> framework -> one entry per pair of its functional (else layer) case."""
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for rep in reports:
        for case in rep.cases:
            cell = table.setdefault(case.primitive, {}).setdefault(rep.name, [])
            if cell and case.api != "functional":
                continue
            cell.clear()
            if not case.pairs and case.candidates:
                cell.append({"title": "one path", "kind": "candidates", "first": None, "splits": 0, "b_libs": [], "a_libs": [],
                             "api": case.api, "candidates": len(case.candidates)})
            for pr in case.pairs:
                cell.append({"title": pr.title, "kind": pr.kind, "first": pr.first_layer, "splits": pr.splits,
                             "b_libs": pr.libraries["B"], "a_libs": pr.libraries["A"], "api": case.api})
    return table
