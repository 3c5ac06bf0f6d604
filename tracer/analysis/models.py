"""What a backend must implement to train a whole network, per model and framework,
and what each API level of a framework adds to a training step.

A porting team is asked to bring up a workload, not a primitive. The model traces
(tracer.contract.MODELS: a case's ``primitive`` is the model's name) go through the
same portability model as the primitives (tracer.analysis.portability), so a model's
must-implement list is in the unit and from the source its framework's primitives use
(torch: the stand-in run of the whole step; TensorFlow: its kernel registry over the
ops the step executed; the others: what their evidence gives), and the entries beyond
the union of the framework's primitive lists are what the network needs besides.
Pure: reads traces and the primitives' scorecard rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracer.contract import MODELS, PASSES, USER_API
from tracer.evidence_classes import EVIDENCE
from tracer.gap import Gap
from tracer.knowledge import Knowledge
from tracer.analysis.arm_ops import ArmOpTable, arm_op_table
from tracer.analysis.compiled_needs import CompiledNeeds, beside, compiled_needs
from tracer.analysis.standin_needs import standin_needs
from tracer.processing.evidence_class import evidence_class
from tracer.processing.pairs import reference_cpus
from tracer.analysis.decisions import decisions
from tracer.analysis.portability import FrameworkReport, framework_report
from tracer.processing.reach import reach
from tracer.analysis.figure import Figure
from tracer.analysis.needs_figures import needs_figures
from tracer.analysis.scorecard import ScoreRow, decision_figures
from tracer.analysis.workload_coverage import WorkloadCoverage, coverage
from tracer.trace import Node, Trace


@dataclass
class Level:
    """One API level of a model in one framework, from its CPU path's warm step (both
    passes: the network and its loss, then the gradients and the update)."""

    api: str
    python_calls: int  # calls of Python functions the tracer recorded in the step
    python_functions: int  # distinct Python functions among them
    ops: int  # calls of the framework's own op records (nested ones included)
    distinct_ops: int
    seconds: float | None  # untraced median time of one step (forward + backward), None where not timed
    defaults: dict[str, Any] = field(default_factory=dict)
    built_from_primitives: dict[str, str] = field(default_factory=dict)
    libraries: list[str] = field(default_factory=list)  # what the vendor libraries said they ran


@dataclass
class GpuStep:
    """A model's training step on a GPU path, as one trace shows it: its evidence class
    (recorded on a GPU machine, compiled by XLA's GPU compiler here, read from the
    source...), the GPU it names, the libraries it reaches and its leaf ops (the kernels
    or the backend ops the framework chose), distinct over both passes."""

    api: str
    evidence: str
    gpu: str
    version: str
    libraries: list[str]
    ops: list[str]


@dataclass
class ModelRow:
    """One model in one framework: the scorecard's row for it."""

    model: str
    framework: str
    version: str
    implement: Figure
    beyond: list[str]  # must-implement entries no primitive of the framework needed
    decisions: Figure
    libraries: list[str]
    levels: list[Level]
    gaps: list[str]
    gpu: list[GpuStep] = field(default_factory=list)
    #: a user's workload: its list op by op against the built-in cases, and each layer's cost
    coverage: WorkloadCoverage | None = None
    #: the compiled door (torch.compile's graphs), set beside the stand-in's list, where recorded
    compiled: CompiledNeeds | None = None
    #: what computed each op on this machine and on each ARM CPU the step ran on
    arm_ops: ArmOpTable | None = None

    @property
    def ran(self) -> bool:
        return bool(self.levels)


@dataclass
class ModelReport:
    model: str
    title: str
    layers: list[str]
    loss: str
    optimizer: str
    rows: list[ModelRow]
    #: a user's own workload: its file's name and function (docs/workloads.md); None for a built-in model
    workload: dict[str, str] | None = None


def is_workload_trace(trace: Trace) -> bool:
    """A trace of a user's own workload (tracer.contract.UserWorkload)."""
    return trace.info.api == USER_API


def is_model_trace(trace: Trace) -> bool:
    """A whole training step's trace: a built-in model's or a user's workload's."""
    return trace.info.primitive in MODELS or is_workload_trace(trace)


def _tree_counts(tree: Node | None, kind: str) -> tuple[int, int]:
    """(calls, distinct frames) of ``kind`` in a tree."""
    if tree is None:
        return 0, 0
    calls, seen = 0, set()
    for _, node in tree.walk():
        if node.frame.kind == kind:
            calls += node.count
            seen.add(node.frame.key)
    return calls, len(seen)


def _level(trace: Trace) -> Level:
    calls = functions = ops = distinct = 0
    seconds: float | None = 0.0
    libraries: dict[str, None] = {}
    for pass_ in PASSES:
        c, f = _tree_counts(trace.layer(pass_, "python"), "python")
        o, d = _tree_counts(trace.layer(pass_, "op"), "op")
        calls, functions, ops, distinct = calls + c, functions + f, ops + o, distinct + d
        run = trace.run(pass_)
        untraced = run.info.untraced_s if run is not None else None
        seconds = None if seconds is None or untraced is None else seconds + untraced
        lib = trace.layer(pass_, "library")
        if lib is not None:
            libraries.update(dict.fromkeys(n.frame.name for n in lib.children))
    model = trace.info.model
    return Level(trace.info.api, calls, functions, ops, distinct, seconds, dict(model.get("defaults") or {}),
                 dict(model.get("built_from_primitives") or {}), list(libraries))


def _cpu_default(trace: Trace) -> bool:
    return trace.info.device == "cpu" and trace.info.variant == "default" and trace.info.emulated is None


def model_row(model: str, framework: str, traces: list[Trace], gaps: list[Gap],
              primitive_card: ScoreRow | None, k: Knowledge, rep: FrameworkReport | None = None) -> ModelRow:
    """``traces``: this framework's traces of this model (every level and device);
    ``rep``: their portability report where the caller made it already (the audit prints it)."""
    rep = rep if rep is not None else framework_report(framework, traces, gaps, k=k)
    implement, _ = needs_figures(rep, k)
    sites, _ = decision_figures(rep, decisions(rep, k))
    known = set(primitive_card.figures["implement"].items) if primitive_card is not None else set()
    beyond = [e for e in implement.items if e not in known] if primitive_card is not None else []
    # the GPU machine's own CPU path (a recorded folder's cpu-default) is its GPU path's
    # baseline, not one of this survey's CPU paths: its levels would be counted twice
    ref = {id(t) for t in reference_cpus(traces)}
    cpu = sorted((t for t in traces if _cpu_default(t) and id(t) not in ref), key=lambda t: t.info.api)
    levels = [_level(t) for t in cpu]
    libraries = list(dict.fromkeys(lib for side, found in rep.libraries.items() if side == "cpu" for lib in found))
    versions = sorted({t.info.framework_version or "" for t in cpu} - {""})
    return ModelRow(model, framework, ", ".join(versions), implement, beyond, sites, libraries, levels,
                    [f"{g.api} on {g.device}: {g.error}" for g in gaps], gpu_steps(traces, k),
                    compiled=compiled_door(traces), arm_ops=arm_op_table(traces, k.pure_python))


def compiled_door(traces: list[Trace]) -> CompiledNeeds | None:
    """The compiled door's list of a model's traces (a survey records it beside the
    stand-in run), set beside the stand-in's eager list where there is one."""
    got = compiled_needs(traces)
    if got is not None:
        eager = standin_needs([t for t in traces if t.info.standin is not None], [], None)
        if eager is not None:
            beside(got, eager)
    return got


def gpu_steps(traces: list[Trace], k: Knowledge) -> list[GpuStep]:
    """Each GPU path of a model's step, strongest evidence first (a recorded step before
    what a compiler or the source says of it)."""
    out = []
    for t in traces:
        if t.info.device != "gpu":
            continue
        r = reach(t, k=k)
        out.append(GpuStep(t.info.api, evidence_class(t.info) or "", t.info.machine.gpu or "",
                           t.info.framework_version or "", list(r.libraries),
                           list(dict.fromkeys(op for _, op in r.ops))))
    return sorted(out, key=lambda g: (EVIDENCE.index(g.evidence) if g.evidence in EVIDENCE else len(EVIDENCE),
                                      g.api, g.gpu))


def model_reports(traces: list[Trace], gaps: list[Gap], cards: list[ScoreRow],
                  k: Knowledge, primitives: list[Trace] | None = None) -> list[ModelReport]:
    """One report per model with any trace or gap, one row per framework that has either;
    then one per user workload (its rows' ``beyond`` and ``coverage`` set against the
    built-in primitives' traces, ``primitives``, and models')."""
    by_card = {c.framework: c for c in cards}
    out = []
    for name, m in MODELS.items():
        mine = [t for t in traces if t.info.primitive == name]
        my_gaps = [g for g in gaps if g.primitive == name]
        if not mine and not my_gaps:
            continue
        frameworks = list(dict.fromkeys([*(t.info.framework for t in mine), *(g.framework for g in my_gaps)]))
        rows = [model_row(name, fw, [t for t in mine if t.info.framework == fw],
                          [g for g in my_gaps if g.framework == fw], by_card.get(fw), k) for fw in frameworks]
        out.append(ModelReport(name, m.title, list(m.layers), m.loss, m.optimizer, rows))
    return out + workload_reports(traces, gaps, cards, out, k, primitives or [])


def workload_reports(traces: list[Trace], gaps: list[Gap], cards: list[ScoreRow], built_in: list[ModelReport],
                     k: Knowledge, primitives: list[Trace],
                     reports: dict[tuple[str, str], FrameworkReport] | None = None) -> list[ModelReport]:
    """The user's own workloads: what each needs, and what of it no built-in case reaches
    (one rule, the survey's and the audit's: an entry on no built-in primitive's or
    model's list, in the framework's unit). ``reports``: (workload, framework) -> its
    portability report, where the caller made it already."""
    by_card = {c.framework: c for c in cards}
    names = list(dict.fromkeys([*(t.info.primitive for t in traces if is_workload_trace(t)),
                                *(g.primitive for g in gaps if g.api == USER_API)]))
    builtin_traces = [*primitives, *(t for t in traces if t.info.primitive in MODELS)]
    out = []
    for name in names:
        mine = [t for t in traces if t.info.primitive == name and is_workload_trace(t)]
        my_gaps = [g for g in gaps if g.primitive == name and g.api == USER_API]
        frameworks = list(dict.fromkeys([*(t.info.framework for t in mine), *(g.framework for g in my_gaps)]))
        rows = []
        for fw in frameworks:
            row = model_row(name, fw, [t for t in mine if t.info.framework == fw],
                            [g for g in my_gaps if g.framework == fw], by_card.get(fw), k,
                            (reports or {}).get((name, fw)))
            known = set(by_card[fw].figures["implement"].items) if fw in by_card else set()
            known.update(e for m in built_in for r in m.rows if r.framework == fw for e in r.implement.items)
            row.beyond = [e for e in row.implement.items if e not in known]
            row.coverage = coverage(fw, name, row.implement.items, [t for t in mine if t.info.framework == fw],
                                    [t for t in builtin_traces if t.info.framework == fw], row.beyond,
                                    row.implement.incomplete, row.arm_ops)
            rows.append(row)
        about = next((dict(t.info.model["workload"]) for t in mine if isinstance(t.info.model.get("workload"), dict)),
                     {})
        out.append(ModelReport(name, name, [], "the workload's own", "the workload's own", rows,
                               {"file": str(about.get("file", "")), "function": str(about.get("function", ""))}))
    return out
