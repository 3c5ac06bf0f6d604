"""The survey model: everything a report says, built once from a survey's traces, its gap
records and the knowledge, for every renderer to read (the HTML pages, survey.json).

A renderer computes nothing: each figure, verdict, grid cell, decision site, table row
and model row is here, computed once, in one order (the reports, their decisions, the
scorecard, the verdicts, the tables built on them), so that two renderers can never say
two things of one survey."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracer.analysis.decisions import Decisions, decisions, pair_splits
from tracer.analysis.models import Level, ModelReport, is_model_trace, model_reports
from tracer.analysis.portability import FrameworkReport, survey_reports
from tracer.analysis.code_bytes import Measure
from tracer.analysis.scorecard import ScoreRow, elf_reads, scorecard
from tracer.analysis.verdict import (ArmVerdict, FrameworkVerdict, GridCell, arm_model_lines, arm_verdicts, grid,
                                     verdicts)
from tracer.contract import MODELS, USER_API
from tracer.gap import Gap
from tracer.knowledge import Knowledge
from tracer.trace import Trace

#: The model whose levels the abstraction-overhead plot compares.
OVERHEAD_MODEL = "lenet"


@dataclass
class SurveyModel:
    """What the report of a survey says. ``reports`` are the primitives' portability
    reports, one per framework; ``models`` the models' and workloads' steps;
    ``skipped`` the files of the folders that could not be read (the index says how
    many and why, so that a report of part of its traces says so)."""

    reports: list[FrameworkReport]
    models: list[ModelReport]
    cards: list[ScoreRow]
    decided: dict[str, Decisions]  # framework -> its decision sites and splits
    verdicts: list[FrameworkVerdict]  # in the order of verdict.RULE, ranked from 1
    grid: list[GridCell]
    cross: dict[str, dict[str, list[dict[str, Any]]]]  # primitive -> framework -> one entry per pair
    arm_cross: dict[str, list[dict[str, Any]]]  # primitive -> one entry per framework and ARM CPU
    arm_builds: list[tuple[str, ...]]  # (framework, x86 build, ARM build): one release in two builds
    overhead: list[tuple[str, Level]]  # (framework, level) of the overhead model's traced levels
    knowledge: Knowledge  # what the model was read with: the drawings of its diffs read with it too
    skipped: list[str] = field(default_factory=list)

    @property
    def machines(self) -> list[str]:
        return sorted({m for r in self.reports for m in r.machines})

    @property
    def workers(self) -> list[str]:
        return sorted({w for r in self.reports for w in r.workers})

    @property
    def model_frameworks(self) -> list[str]:
        return list(dict.fromkeys(r.framework for m in self.models for r in m.rows))


def build(traces: list[Trace], gaps: list[Gap], k: Knowledge, measure: Measure | None = None,
          skipped: list[str] | None = None, on_stage: Callable[[str], None] | None = None,
          read_ahead: Callable[[dict[tuple[str, int | None], frozenset[str]]], None] | None = None) -> SurveyModel:
    """The survey model of ``traces`` and ``gaps``: the primitives make the portability
    reports, the models' and workloads' steps their own rows. ``measure`` reads a shared
    object's symbol sizes (tracer.elf_code.ElfCode().sizes), ``read_ahead`` starts reading
    the ones it will be asked while the reports are made (ElfCode().read_ahead);
    ``on_stage`` hears each stage's name as it starts (the command line's progress)."""
    say = on_stage or (lambda _: None)
    nets = [t for t in traces if is_model_trace(t)]
    prims = [t for t in traces if not is_model_trace(t)]
    if measure is not None and read_ahead is not None:
        read_ahead(elf_reads(prims, k))
    whole = [g for g in gaps if g.primitive in MODELS or g.api == USER_API]  # a model's or a workload's step
    say("portability reports")
    reports = survey_reports(prims, [g for g in gaps if g not in whole], k=k)
    say("figures")
    decided = {r.name: decisions(r, k) for r in reports}  # once: the figures, verdicts and pages read them
    cards = scorecard(reports, prims, measure, k, decided)
    say("models")
    models = model_reports(nets, whole, cards, k, prims)
    say("verdicts")
    return assemble(reports, cards, models, k, skipped, decided)


def assemble(reports: list[FrameworkReport], cards: list[ScoreRow], models: list[ModelReport], k: Knowledge,
             skipped: list[str] | None = None, decided: dict[str, Decisions] | None = None) -> SurveyModel:
    """The model's tables from its reports, figures and model rows: what :func:`build`
    ends with, callable on reports made another way (a test's, one framework's).
    ``decided``: each framework's decisions where the caller has them."""
    arm = _arm_cross(reports)
    decided = decided if decided is not None else {r.name: decisions(r, k) for r in reports}
    said = verdicts(reports, cards, decided)
    for v in said:  # the ARM verdict counts the models' and examples' steps beside the primitives
        v.arm_models = [line for m in models for r in m.rows if r.framework == v.framework and r.arm_ops is not None
                        for line in arm_model_lines(r.arm_ops)]
    return SurveyModel(reports, models, cards, decided, said,
                       grid(reports, k), _cross(reports, k), arm,
                       sorted({(e["framework"], *e["builds"]) for entries in arm.values() for e in entries
                               if e["builds"]}),
                       _overhead(models), k, list(skipped or []))


def _overhead(models: list[ModelReport]) -> list[tuple[str, Level]]:
    """(framework, level) of LeNet's traced levels, in the models' framework order."""
    lenet = next((m for m in models if m.model == OVERHEAD_MODEL), None)
    return [(r.framework, lv) for r in lenet.rows for lv in r.levels] if lenet else []


def _cross(reports: list[FrameworkReport], k: Knowledge) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """primitive -> framework -> one entry per pair of its functional (else layer) case."""
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for rep in reports:
        for case in rep.cases:
            cell = table.setdefault(case.primitive, {}).setdefault(rep.name, [])
            if cell and case.api != "functional":
                continue
            cell.clear()
            if not case.pairs and case.candidates:
                cell.append({"title": "one path", "kind": "candidates", "first": None, "splits": 0, "b_libs": [],
                             "a_libs": [], "api": case.api, "candidates": len(case.candidates), "apart": ""})
            for pr in case.pairs:
                decided, apart = pair_splits(rep.name, pr, k)
                cell.append({"title": pr.title, "kind": pr.kind, "first": pr.first_layer if decided else None,
                             "splits": decided, "apart": ", ".join(f"{n} {kind}" for kind, n in apart.items()),
                             "b_libs": pr.libraries["B"], "a_libs": pr.libraries["A"], "api": case.api})
    return table


_EMULATED_CPU = re.compile(r"aarch64 (.*?) \(emulated\)")


def _arm_cross(reports: list[FrameworkReport]) -> dict[str, list[dict[str, Any]]]:
    """primitive -> one entry per framework and emulated ARM CPU: the ARM verdict per
    pass (ISA kernel, ACL or reference fallback, named) and the libraries only the ARM
    side reached. Where the two sides are two releases of the framework (an aarch64
    wheel of another release), the diff's splits are the releases' own: the entry says
    so and shows no split count, never as a finding."""
    table: dict[str, list[dict[str, Any]]] = {}
    for rep in reports:
        found: list[ArmVerdict] = arm_verdicts(rep)
        for case in rep.cases:
            if case.api != "functional":
                continue
            for pr in case.pairs:
                # a machine pair's title names both machines (pairs.Pair.title)
                cpus = [c.split(" (")[0] for c in _EMULATED_CPU.findall(pr.title)]
                if pr.kind != "machine" or len(cpus) != 1 or "x86_64" not in pr.title:
                    continue  # only x86 against ARM (two emulated CPUs are not this column)
                result = next(iter(pr.diffs.values()), None)
                arm_is_a = result is not None and str(result.a.get("arch", "")).startswith(("aarch64", "arm64"))
                versions = result.differs.get("framework_version") if result is not None else None
                builds = result.differs.get("framework_build") if result is not None else None

                def x86_first(pair: list[Any] | None) -> list[str] | None:
                    return ([str(pair[1]), str(pair[0])] if arm_is_a else [str(v) for v in pair]) if pair else None

                table.setdefault(case.primitive, []).append({
                    "framework": rep.name, "cpu": cpus[0], "first": pr.first_layer, "splits": pr.splits,
                    "versions": x86_first(versions),
                    # one release in two builds (torch's +cpu on x86, +cu130 on aarch64)
                    "builds": None if versions else x86_first(builds),
                    # the audit names a CPU by its model (neoverse-n1), the pair by its description
                    "verdicts": [v for v in found if v.primitive == case.primitive
                                 and v.cpu.split(" (")[0].lower() in cpus[0].lower()],
                    "libs": pr.libraries["A" if arm_is_a else "B"]})
    return table
