"""The audit model: what `dltrace audit` shows, built once from traces, as the survey
model is for the report. The console and the exports render it and compute nothing.

A workload's audit is the survey's workload row (tracer.analysis.models), computed by
the survey's own function over the workload's traces and the built-in cases' traces
given: one rule for what is "beyond the built-in cases" (an entry on no built-in
primitive's or model's list, in the framework's unit), so that the audit's table and
the survey's coverage export mark the same rows."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.analysis.arm_ops import ArmOpTable
from tracer.analysis.decisions import decisions
from tracer.analysis.models import ModelRow, is_model_trace, model_reports, workload_reports
from tracer.analysis.portability import FrameworkReport, framework_report, survey_reports
from tracer.analysis.scorecard import scorecard
from tracer.contract import MODELS
from tracer.errors import DltraceError
from tracer.gap import Gap
from tracer.knowledge import Knowledge
from tracer.trace import Trace


@dataclass
class WorkloadAudit:
    """One workload in one framework: its traces' portability report (the dispatch
    points, the per-pass needs) and its row (the list, what is beyond the built-in
    cases, the decision sites on its path, the per-op table and the layers' costs)."""

    report: FrameworkReport
    row: ModelRow
    #: what computed each op on this machine and on each emulated ARM CPU it ran on
    arm_ops: ArmOpTable | None = None


def framework_audit(framework: str, traces: list[Trace], gaps: list[Gap], k: Knowledge) -> FrameworkReport:
    """The audit of a framework's built-in primitives: its portability report."""
    return framework_report(framework, [t for t in traces if not is_model_trace(t)], gaps, k=k)


def workload_audit(framework: str, workload: str, traces: list[Trace], gaps: list[Gap], builtin: list[Trace],
                   k: Knowledge) -> WorkloadAudit:
    """``traces``, ``gaps``: the workload's, recorded in ``framework``; ``builtin``: the
    framework's built-in cases' traces (a survey's), set against it as a survey does."""
    builtin = [t for t in builtin if t.info.framework == framework]
    prims = [t for t in builtin if not is_model_trace(t)]
    nets = [t for t in builtin if t.info.primitive in MODELS]
    reports = survey_reports(prims, [], k=k) if prims else []
    cards = scorecard(reports, prims, None, k, {r.name: decisions(r, k) for r in reports}) if reports else []
    built_in = model_reports(nets, [], cards, k, prims) if nets else []
    rep = framework_report(framework, traces, gaps, k=k)
    mine = workload_reports(traces, gaps, cards, built_in, k, prims, {(workload, framework): rep})
    row = next((r for m in mine for r in m.rows if m.model == workload and r.framework == framework), None)
    if row is None:
        raise DltraceError(f"{workload}: no trace or gap of it in {framework}: nothing to audit")
    return WorkloadAudit(rep, row, row.arm_ops)
