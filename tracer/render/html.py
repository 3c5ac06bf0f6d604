"""The HTML portability report: an index and one page per framework, rendered with
Jinja2 (autoescape on) from the package's templates/ (jinja2.PackageLoader: found
through the import system, in a clone as in an installed wheel), with
pygments-highlighted code and inline Graphviz SVG. Everything lands in one folder
that opens from disk: no server, no network, no CDN."""

from __future__ import annotations

import datetime
import hashlib
import html
import os
import re
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import jinja2
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from tracer import __version__
from tracer.files import own_folder, write_text
from tracer.gap import Gap
from tracer.knowledge import Knowledge
from tracer.analysis.decisions import NOT_DECISIONS
from tracer.processing.diff.result import Fragment, LayerDiff
from tracer.processing.graph import focused_graph, merged_walk
from tracer.analysis.models import Level, ModelReport
from tracer.analysis.survey_model import SurveyModel
from tracer.render import compiled_export, coverage_export
from tracer.processing.pairs import KIND_NAMES
from tracer.processing.evidence_class import EVIDENCE_MEANING
from tracer.analysis.portability import LAYER_NAMES, FrameworkReport
from tracer.analysis.scorecard import COLUMNS, EXPLAIN, HEADLINE
from tracer.analysis.verdict import RULE, FrameworkVerdict
from tracer.render.grid_svg import PARTS, STROKE, bars_svg, grid_svg
from tracer.processing.sampling import ALPHA, DEFAULT_THRESHOLD
from tracer.processing.symbols import display
from tracer.processing.tags import SYSTEM_LIBS
from tracer.render import graphs

_FORMATTER = HtmlFormatter(nowrap=True)


#: Bidirectional embeddings, overrides and isolates, and the marks that act like them:
#: a U+202E in a frame name would reverse the text around it on the page.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


#: SOURCE_DATE_EPOCH's form, and the latest time it is read as (9999-12-31 23:59:59 UTC, the
#: last a date of four digits holds): a later one is clamped there, not an overflow.
_EPOCH = re.compile("[0-9]{1,40}", re.ASCII)
_LAST_EPOCH = 253402300799


def generated_at() -> str:
    """When the report was made, in the local time of the machine; SOURCE_DATE_EPOCH
    (the reproducible-builds convention) fixes it, in UTC, so that two renderings of the
    same traces are byte-identical (the gold files, a report checked into a repository)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if _EPOCH.fullmatch(epoch):  # ASCII digits only: '²' and '①' are digits to str.isdigit, not to int
        return datetime.datetime.fromtimestamp(min(int(epoch), _LAST_EPOCH), datetime.timezone.utc) \
            .strftime("%Y-%m-%d %H:%M")
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M")


def _visible(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group(0)):04x}"


def inert_text(value: Any) -> Any:
    """Every value a template prints, with bidirectional controls shown as escapes
    (Jinja's ``finalize``: before autoescaping, so no template can forget it; markup
    already made safe, a drawing or highlighted code, stays markup)."""
    if isinstance(value, Markup):
        return Markup(_BIDI.sub(_visible, str(value))) if _BIDI.search(value) else value
    if isinstance(value, str) and _BIDI.search(value):
        return _BIDI.sub(_visible, value)
    return value


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("tracer"), autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, finalize=inert_text)
    env.filters["code"] = code_lines
    env.filters["slug"] = slug
    env.filters["symbol"] = display
    env.filters["most"] = most
    env.filters["seconds"] = lambda s: "" if s is None else (f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} µs")
    env.globals["LAYER_NAMES"] = LAYER_NAMES
    env.globals["SYSTEM_LIBS"] = SYSTEM_LIBS
    env.globals["EVIDENCE"] = EVIDENCE_MEANING
    env.globals["KIND_NAMES"] = KIND_NAMES
    # splits that are no decision: one line each on a page, their code left to `dltrace diff`
    env.globals["NOT_DECISIONS"] = NOT_DECISIONS
    env.filters["side_code"] = side_code
    env.filters["folded"] = folded
    env.filters["gap_groups"] = gap_groups
    env.filters["arm_failures"] = lambda arm: list(dict.fromkeys(
        c.failed for cells in arm.rows.values() for c in cells.values() if c.failed))
    return env


def folded(items: Any) -> list[str]:
    """A list with each repeated entry shown once, its count after it: the same
    observation of ten comparisons is one line, not ten."""
    counts: dict[str, int] = {}
    for item in items:
        counts[str(item)] = counts.get(str(item), 0) + 1
    return [text if n == 1 else f"{text} (×{n})" for text, n in counts.items()]


def gap_groups(gaps: list[Gap]) -> list[tuple[str, list[Gap]]]:
    """Gaps grouped by their reason, in first-seen order: one sentence per repeated
    failure, the cases it stopped listed under it."""
    groups: dict[str, list[Gap]] = {}
    for g in gaps:
        groups.setdefault(str(g.error), []).append(g)
    return list(groups.items())


def side_code(code: Any) -> str:
    """One side's one-sided code (portability.SideCode) as a phrase, zeros left out."""
    parts = [(code.python_functions, "Python functions"), (code.native_symbols, "native symbols"), (code.ops, "ops")]
    return ", ".join(f"{n} {what}" for n, what in parts if n) or "nothing"


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()


#: Names a framework page must never take: the index, and what the report writes beside it.
RESERVED = frozenset({"index", "graphs", "models"})


def file_stem(text: str, width: int = 60) -> str:
    """A file name for ``text`` that no other text gets: ``text`` itself where it is
    already a short, lower-case slug, else its slug cut to ``width`` characters and a
    hash of the whole text. Names come from traces recorded elsewhere: ``torch!``
    must not replace ``torch.html``, ``index`` the index, ``!!!`` become a hidden
    file, nor a 300-character name exceed what the file system allows."""
    stem = slug(text)[:width].strip("-")
    if stem == text and stem not in RESERVED:
        return stem
    return f"{stem or 'page'}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def page_names(names: list[str]) -> dict[str, str]:
    """Each distinct framework name -> its page's file name, one page per name."""
    pages: dict[str, str] = {}
    taken = {f"{r}.html" for r in RESERVED}
    for name in names:
        if name in pages:
            continue
        page, n = f"{file_stem(name)}.html", 1
        while page in taken:  # a name that is literally another's hashed stem
            n += 1
            page = f"{file_stem(name)}-{n}.html"
        pages[name] = page
        taken.add(page)
    return pages


#: The most entries of one list a page shows; the rest is counted (the trace and
#: ``dltrace diff --json`` have them all). A trace of 100,000 distinct kernels must
#: not make a page of 100 MB.
PAGE_LIST = 50


def most(items: Any, n: int = PAGE_LIST) -> list[Any]:
    """The first ``n`` items of a list a template loops over, and, when some are left
    out, a last string saying how many."""
    items = list(items)
    return items if len(items) <= n else [*items[:n],
                                          Markup('<span class="muted">… {} more</span>').format(len(items) - n)]


def code_lines(fragment: Fragment) -> list[dict[str, Any]]:
    """Each source line of a fragment, highlighted, with what ran on which side."""
    text = "\n".join(line.text for line in fragment.lines)
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
    same_as: str = ""  # the page's section that already shows this very graph (drawn once per page)
    apart: bool = False  # drawn, but past the page's inline budget: linked, not embedded


#: The inline SVG a framework page embeds at most (characters), in its reading order;
#: the graphs past it are linked (their files are in graphs/): a page a browser opens at
#: once stays under 3 MB (torch's, fifteen primitives at two levels: 1.7 MB of graphs).
INLINE_BUDGET = 1_000_000


#: A drawing, and the full graph's file name and SVG where there is one; or why none is drawn.
_Drawn: TypeAlias = "tuple[Drawing, tuple[str, str] | None] | graphs.GraphvizMissing"


class _Graphs:
    """Draws each diff layer once: a focused inline SVG, and the full graph as a file.
    Drawings run on a thread pool: most of a drawing's time is Graphviz's own process,
    and a survey's report draws over a thousand of them."""

    def __init__(self, out: Path, pool: Executor, k: Knowledge):
        self.out, self.k = out, k
        self.dir = own_folder(out / "graphs")
        self.problem = ""
        self.pool = pool
        self.checked = False
        self.svgs = graphs.SvgCache()

    def draw(self, name: str, layer: LayerDiff, title: str, inline: bool = True) -> Future[_Drawn] | None:
        """``inline``: also the focused SVG the page embeds (not for a layer whose splits
        are all no decision: its full graph is a link, so that a page stays small).
        The drawing is started, and comes from :meth:`result`."""
        if not layer.splits or self.problem:
            return None
        if not self.checked:  # once, before the first drawing: without dot, no page draws any
            try:
                graphs.dot()
            except graphs.GraphvizMissing as exc:
                self.problem = str(exc)
                return None
            self.checked = True
        return self.pool.submit(_draw, name, layer, title, inline, self.svgs, self.k)

    def result(self, job: Future[_Drawn] | None) -> Drawing | None:
        """A started drawing, its full graph written (here, in the order the page lists
        them: the same files as drawn one after the other)."""
        if job is None:
            return None
        drawn = job.result()
        if isinstance(drawn, graphs.GraphvizMissing):
            self.problem = self.problem or str(drawn)
            return None
        drawing, full = drawn
        if full is not None:
            write_text(self.dir / f"{full[0]}.svg", full[1])
            drawing.full = f"graphs/{full[0]}.svg"
        return drawing


def _draw(name: str, layer: LayerDiff, title: str, inline: bool, svgs: graphs.SvgCache, k: Knowledge) -> _Drawn:
    """One layer's drawing (on a worker thread): what fails is the drawing's gap."""
    drawing, full = Drawing(), None
    try:
        walk = merged_walk(layer, k=k)
        focused = graphs.fold_chains(focused_graph(walk))
        drawing.nodes, drawing.shown = len(walk), focused.number_of_nodes()
        drawing.svg = Markup(graphs.svg(focused, "", cache=svgs)) if inline else None
        if len(walk) <= graphs.MAX_FULL:
            full = (name, graphs.svg(walk.whole(), title, cache=svgs))
    except graphs.GraphvizMissing as exc:
        return exc
    except OSError:
        raise  # a full disk or unwritable folder is the report's failure, said once
    except Exception as exc:  # noqa: BLE001 - a graph that cannot be drawn must not lose the report
        drawing.error = str(exc) if isinstance(exc, graphs.GraphError) else f"{type(exc).__name__}: {exc}"
    return drawing, full


def write_report(model: SurveyModel, out: Path, threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Render the survey model (tracer.analysis.survey_model) into ``out``: a page per
    framework, the models' page where model steps were traced, the index with the
    scorecard first; returns the index page (tracer.render.report writes survey.json
    beside it)."""
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    env.globals["skipped"] = model.skipped
    # threads enough for the drawings to queue while dot runs (graphs.DotRuns: each run
    # draws every graph waiting, one run per core at a time)
    pool = ThreadPoolExecutor(max_workers=graphs.WORKERS * graphs.BATCH)
    try:
        return _write_report(model, out, env, _Graphs(out, pool, model.knowledge), threshold)
    finally:  # after a failure, the drawings not started are not waited for
        pool.shutdown(cancel_futures=True)


def _write_report(model: SurveyModel, out: Path, env: jinja2.Environment, drawer: _Graphs, threshold: float) -> Path:
    reports, models = model.reports, model.models
    common = {
        "version": __version__,
        "generated": generated_at(),
        "threshold": threshold,
        "alpha": ALPHA,
        "css": Markup(HtmlFormatter().get_style_defs(".hl")),
        "frameworks": reports,
        "machines": model.machines,
        "workers": model.workers,
        "models": models,
        "model_frameworks": model.model_frameworks,
    }
    pages = page_names([r.name for r in reports])
    # a framework with only model or workload traces has no page of its own: "" (no link)
    env.filters["page"] = lambda name: pages.get(name, "")
    # every page's drawings are started first; each page then waits for its own
    started = [(rep, _start_drawings(drawer, rep), drawer.problem) for rep in reports]
    for rep, jobs, problem in started:
        graphs_for = {}
        drawn: dict[str, str] = {}  # inline SVG -> the section that shows it
        inline = 0
        for key, anchor, job in jobs:
            drawing = graphs_for[key] = drawer.result(job)
            if drawing is not None and drawing.svg is not None:  # the same graph is drawn once a page
                first = drawn.setdefault(str(drawing.svg), anchor)
                if first != anchor:
                    drawing.svg, drawing.same_as = None, first
                elif inline + len(drawing.svg) > INLINE_BUDGET and drawing.full:
                    drawing.svg, drawing.apart = None, True
                else:
                    inline += len(drawing.svg)
        page = env.get_template("framework.html").render(**common, fw=rep, graphs=graphs_for,
                                                         graph_problem=problem or drawer.problem)
        write_text(out / pages[rep.name], page)
    if models:
        exports = _coverage_files(models, out)
        write_text(out / "models.html", env.get_template("models.html").render(
            **common, overhead=model.overhead, overhead_plots=_overhead_plots(model.overhead), exports=exports,
            no_cpu_op=coverage_export.NO_CPU_OP))
    index = out / "index.html"
    write_text(index, env.get_template("index.html").render(**common, cross=model.cross,
                                                            arm_cross=model.arm_cross, arm_builds=model.arm_builds,
                                                            graph_problem=drawer.problem, cards=model.cards,
                                                            columns=COLUMNS, explain=EXPLAIN, headline=HEADLINE,
                                                            verdicts=model.verdicts, rule=RULE,
                                                            grid=grid_svg(model.grid, pages.__getitem__)
                                                            if model.grid else "",
                                                            parts=PARTS, strokes=STROKE, plots=_plots(model.verdicts),
                                                            decided=model.decided))
    return index


def _start_drawings(drawer: _Graphs, rep: FrameworkReport) -> list[tuple[tuple[Any, ...], str, Future[_Drawn] | None]]:
    """(the page's key of a layer's drawing, its section's anchor, the drawing started)
    for each diff layer of a framework's page, in the page's order."""
    jobs = []
    for case in rep.cases:
        for i, pr in enumerate(case.pairs):
            for pass_, result in pr.diffs.items():
                for layer in result.layers:
                    name = file_stem(f"{rep.name}-{case.primitive}-{case.api}-{i}-{pr.title}-{pass_}-"
                                     f"{layer.layer}", 80)
                    decides = any(s.classification not in NOT_DECISIONS for s in layer.splits)
                    job = drawer.draw(name, layer,
                                      f"{rep.name} {case.primitive} ({case.api}) {pass_}: {pr.title}, "
                                      f"{layer.layer} layer", inline=decides)
                    jobs.append(((case.primitive, case.api, i, pass_, layer.layer),
                                 slug(f"{case.primitive}-{case.api}-{i}-{pass_}"), job))
    return jobs


#: Where a survey's workload coverage tables are written, beside the pages.
COVERAGE_FOLDER = "workloads"


def _coverage_files(models: list[ModelReport], out: Path) -> dict[tuple[str, str, str], tuple[str, str]]:
    """Each user workload's coverage table as CSV and JSON in ``out``/workloads/, and each
    model's compiled door list (one row per op and input variation) beside them where it
    was recorded (``.compiled.csv``); (workload or model, framework, kind) -> their paths
    relative to the pages, kind "coverage" or "compiled"."""
    files = {}
    taken: set[str] = set()
    for m in models:
        for r in m.rows:
            if r.coverage is not None and r.coverage.rows:
                csv_path, json_path = coverage_export.write(r.coverage, own_folder(out / COVERAGE_FOLDER), taken)
                files[(m.model, r.framework, "coverage")] = (f"{COVERAGE_FOLDER}/{csv_path.name}",
                                                             f"{COVERAGE_FOLDER}/{json_path.name}")
            if r.compiled is not None:
                csv_path, json_path = compiled_export.write(r.compiled, m.model, own_folder(out / COVERAGE_FOLDER),
                                                            taken)
                files[(m.model, r.framework, "compiled")] = (f"{COVERAGE_FOLDER}/{csv_path.name}",
                                                             f"{COVERAGE_FOLDER}/{json_path.name}")
    return files


def _overhead_plots(overhead: list[tuple[str, Level]]) -> list[Markup]:
    if not overhead:
        return []
    label = {"functional": "fn", "layer": "layer"}
    rows = [(f"{fw} {label.get(lv.api, lv.api)}", lv) for fw, lv in overhead]
    return [bars_svg("Python calls per step", [(n, lv.python_calls, "") for n, lv in rows], "plot-python", 120),
            bars_svg("op records per step", [(n, lv.ops, "") for n, lv in rows], "plot-ops", 120),
            bars_svg("time per step (µs, untraced)",
                     [(n, None if lv.seconds is None else round(lv.seconds * 1e6), "") for n, lv in rows],
                     "plot-time", 120)]


def _plots(ranked: list[FrameworkVerdict]) -> list[Markup]:
    """What a reader would rather look at than read: decision sites and must-implement
    entries per framework, in the verdict's order."""
    if not ranked:
        return []
    sites: list[tuple[str, int | None, str]] = [(v.framework, v.decision_sites,
                                                 f"({v.outside_registry} in its own code)") for v in ranked]
    must = [(v.framework, int(v.implement) if v.implement.isdigit() else None,
             v.unit if v.implement.isdigit() else "no list") for v in ranked]
    return [bars_svg("decision sites", sites, "plot-decisions"),
            bars_svg("a backend must implement (unit per framework)", must, "plot-implement")]
