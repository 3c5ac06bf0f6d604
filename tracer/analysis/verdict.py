"""The verdict a porting team decides by, on one screen: per framework, where its
device decisions live, what a backend must implement, which libraries the GPU and
ARM paths replace, what each ARM CPU runs per primitive and pass, how strong the
evidence is, and an ordering of the frameworks with the rule it follows: by what
each must-implement list rests on (a run, a registry, a compiler, source), then by
its size. Not by porting cost: the lists count in each framework's own unit, and
no cost in one unit for every framework is measured. And the grid the index draws:
framework x primitive x pass, where the CPU and GPU paths part and on what evidence.

Built from the scorecard's figures (tracer.analysis.scorecard) and the portability
model, never from a count of its own: the verdict and the scorecard cannot
disagree. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tracer.contract import PASSES, PRIMITIVES
from tracer.knowledge import Knowledge
from tracer.analysis.arm_audit import ArmCell
from tracer.analysis.arm_ops import ArmOpTable
from tracer.analysis.decisions import (DECISIONS, Decisions, device_branches, is_compilation_pair,
                                      is_device_branch)
from tracer.evidence_classes import CHECKED_EVIDENCE
from tracer.processing.evidence_class import EVIDENCE_ORDER
from tracer.analysis.portability import FrameworkReport
from tracer.analysis.figure import LIST_EVIDENCE
from tracer.analysis.scorecard import ScoreRow

#: How the frameworks are ordered, written beside the ordering.
RULE: Final = ("Rule: must-implement counts are in each framework's own unit (ATen ops, TensorFlow op kernels, "
               "StableHLO ops...), so no count ranks one framework above another: ordered by what the list "
               "rests on (a stand-in backend's run > the kernel registry > the GPU compiler > the GPU source > "
               "the CPU path's operators; a framework with no list last), then the fewest decision sites in the "
               "framework's own code (one unit for every framework: a site), then the stronger GPU evidence, "
               "then the name.")

#: Lists whose entries were checked against a device's interface (run, registered, compiled for one).
_CHECKED = frozenset({"run", "registry", *CHECKED_EVIDENCE})


#: An ARM cell where no vendor library reported a call: the framework's own kernels (or Eigen's, which report none).
NO_CALL: Final = "no vendor-library call"


@dataclass
class ArmVerdict:
    """What one primitive's pass runs on one aarch64 CPU, in one word and its name."""

    primitive: str
    pass_: str
    cpu: str
    verdict: str  # "ISA kernel", "ACL", "reference fallback", "compiled", "BLAS", "failed", NO_CALL
    name: str  # the implementation (brgconv:sve_512, gemm:ref), or why it failed

    @property
    def variant(self) -> str:
        """The variant of the audit's column ("onednn-on"), "" for the default path."""
        return self.cpu.split(", ", 1)[1] if ", " in self.cpu else ""


@dataclass
class FrameworkVerdict:
    framework: str
    page: str  # the anchor-less file name is the renderer's; this is the framework's name
    sites: list[str]  # "kind: site (file:line)"
    implement: str  # the count
    unit: str
    list_evidence: str  # what the list rests on (figure.LIST_EVIDENCE)
    checked: bool  # the list was checked against a device's interface (a run, a registry, a compiler)
    replaces: list[str]  # "GPU path replaces ... with ..."
    arm: list[ArmVerdict]
    arm_summary: str
    evidence: str  # the strongest GPU evidence class, and coverage
    decision_sites: int
    outside_registry: int
    by_kind: str = ""  # "3 op code; 1 registry (23 ops); 5 library"
    rank: int = 0
    thin: list[str] = field(default_factory=list)
    #: the models' and examples' steps on each ARM CPU, per op (tracer.analysis.arm_ops):
    #: "resnet18 on neoverse-n1 (emulated): 1 op on reference code, ..."
    arm_models: list[str] = field(default_factory=list)


@dataclass
class GridCell:
    """One framework, primitive and pass: where its CPU and GPU paths part."""

    framework: str
    primitive: str
    pass_: str
    parts: str  # the first layer of a decision split ("op", "python", "native", "library"), "same", "no GPU"
    evidence: str  # the strongest GPU evidence class there, "" for none
    anchor: str  # the framework page's section of this comparison
    title: str  # what the cell says on hover


def _arm_verdict(cell: ArmCell, pass_: str) -> tuple[str, str]:
    if cell.failed:
        return "failed", cell.failed.split(". ")[0][:160]
    # a data-layout conversion (oneDNN's reorder) is no compute: the primitive's own call is named first
    every = cell.calls.get(pass_, [])
    calls = [c for c in every if not c.startswith("reorder")] + [c for c in every if c.startswith("reorder")]
    ref = [c for c in calls if c in cell.reference]
    if ref:
        return "reference fallback", ref[0]
    acl = [c for c in calls if "acl" in c.lower()]
    if acl:
        return "ACL", acl[0]
    if calls:
        return "ISA kernel", calls[0]
    if cell.compiled.get(pass_):
        return "compiled", ", ".join(cell.compiled[pass_][:3])
    if cell.blas:
        return "BLAS", cell.blas
    if cell.capability:
        return "ISA kernel", f"the framework's own kernels, {cell.capability}"
    return NO_CALL, ""


def arm_verdicts(rep: FrameworkReport) -> list[ArmVerdict]:
    """One per primitive, pass and aarch64 CPU column of the ARM audit."""
    if rep.arm is None:
        return []
    out = []
    arm_cols = [m for m in rep.arm.machines if "(emulated)" in m or "(native)" in m]
    for prim, row in rep.arm.rows.items():
        for cpu in arm_cols:
            cell = row.get(cpu)
            if cell is None:
                continue
            for pass_ in PASSES if not cell.failed else PASSES[:1]:
                verdict, name = _arm_verdict(cell, pass_)
                out.append(ArmVerdict(prim, pass_ if not cell.failed else "both", cpu, verdict, name))
    return out


def _arm_summary(arm: list[ArmVerdict]) -> str:
    """Counts per verdict over primitive x pass x CPU cells, the reference fallbacks named
    (the finding a porter needs first), two at most."""
    if not arm:
        return "no primitive traced on ARM"
    counts = Counter(a.verdict for a in arm)
    refs = list(dict.fromkeys(f"{a.primitive} {a.pass_} on {a.cpu.split(' (')[0]}: {a.name}" for a in arm
                              if a.verdict == "reference fallback"))
    text = ", ".join(f"{n} {v}" for v, n in counts.most_common())
    if refs:
        text += f" — reference: {refs[0]}{f' (+{len(refs) - 1} more)' if len(refs) > 1 else ''}"
    return text


def _evidence(rep: FrameworkReport) -> str:
    cov = rep.gpu_coverage
    if not cov.covered:
        return "no GPU evidence"
    strongest = min(cov.by_class, key=lambda c: EVIDENCE_ORDER.index(c) if c in EVIDENCE_ORDER else 99)
    return f"{strongest} ({cov.covered} of {cov.cells} primitive × pass cells; " + \
        ", ".join(f"{k} {n}" for k, n in cov.by_class.items()) + ")"


def _site_line(kind: str, site: str, file: str, line: int, entries: int) -> str:
    if kind == "registry":
        return f"kernel registry: one site, {entries} ops"
    where = f" ({file}:{line})" if file and file not in site else ""
    return f"{kind}: {site}{where}"


def framework_verdict(rep: FrameworkReport, card: ScoreRow, found: Decisions) -> FrameworkVerdict:
    """``found``: the framework's decisions (tracer.analysis.decisions), as the scorecard counted them."""
    figs = card.figures
    sites = [_site_line(s.kind, s.site, s.file, s.line, len(s.entries)) for s in found.sites]
    branches = {c.function: c for c in device_branches(rep) if c.function not in {s.site for s in found.sites}}
    sites += [f"python: {c.function.rsplit('.', 1)[-1]} ({c.file}:{c.line}, single trace)" for c in branches.values()]
    must = figs["implement"]
    checked = must.value not in ("—", "") and not must.thin and not must.incomplete and must.evidence in _CHECKED
    arm = arm_verdicts(rep)
    return FrameworkVerdict(
        rep.name, rep.name, sites, must.value, must.unit or "entries", must.evidence, checked,
        figs["vendor"].details[1:],
        arm, _arm_summary(arm), _evidence(rep),
        int(figs["decisions"].value) if figs["decisions"].value.isdigit() else len(sites),  # the scorecard's count
        len([s for s in sites if not s.startswith(("kernel registry", "library"))]),
        by_kind=figs["decisions"].explain, thin=[f"{k}: {f.thin}" for k, f in figs.items() if f.thin]
        + [f"{k}: incomplete, {f.incomplete}" for k, f in figs.items() if f.incomplete])


def arm_model_lines(table: ArmOpTable) -> list[str]:
    """One line per ARM machine of a model's per-op table, the counts a port reads first."""
    return [f"{table.workload} on {m}: {table.count(m, 'reference code')} op(s) on reference code, "
            f"{table.count(m, 'no library')} calling no library where x86 called one, of {len(table.rows)} ops"
            for m in table.machines[1:]]


def _order_key(v: FrameworkVerdict) -> tuple[int, int, int, str]:
    """:data:`RULE`: never the list's size, whose unit is the framework's own."""
    tier = LIST_EVIDENCE.index(v.list_evidence) if v.list_evidence in LIST_EVIDENCE else len(LIST_EVIDENCE)
    ev = v.evidence.split(" ")[0]
    strength = EVIDENCE_ORDER.index(ev) if ev in EVIDENCE_ORDER else len(EVIDENCE_ORDER)
    return (tier if v.implement.isdigit() else len(LIST_EVIDENCE) + 1, v.outside_registry, strength, v.framework)


def verdicts(reports: list[FrameworkReport], cards: list[ScoreRow],
             decided: Mapping[str, Decisions]) -> list[FrameworkVerdict]:
    """Every framework's verdict, ordered by :data:`RULE` (the evidence of its list, then its size), ranked from 1;
    ``decided``: each framework's decisions."""
    by_name = {c.framework: c for c in cards}
    out = [framework_verdict(r, by_name[r.name], decided[r.name]) for r in reports if r.name in by_name]
    out.sort(key=_order_key)
    for i, v in enumerate(out, 1):
        v.rank = i
    return out


def _parts(rep: FrameworkReport, primitive: str, pass_: str, k: Knowledge) -> tuple[str, str]:
    """(where the CPU path and a GPU path part, the section of the framework's page that
    shows it): the first layer with a decision split; else "python" where the CPU path's
    own Python has a device branch (a single trace shows it); "no decision" where the
    paths part only by what is none (two versions, derived evidence's shape); "same"."""
    for case in rep.cases:
        if case.primitive != primitive:
            continue
        for i, pr in enumerate(case.pairs):
            if pr.kind != "device" or not pr.b_label.startswith("gpu") or is_compilation_pair(rep.name, pr, k):
                continue
            result = pr.diffs.get(pass_)
            if result is None:
                continue
            anchor = f"{case.primitive}-{case.api}-{i}-{pass_}"
            for layer in result.layers:
                if any(s.classification in DECISIONS for s in layer.splits):
                    return layer.layer, anchor
            if any(is_device_branch(c) for c in case.candidates):
                return "python", anchor
            return ("no decision" if any(layer.splits for layer in result.layers) else "same"), anchor
    first = next((c for c in rep.cases if c.primitive == primitive), None)
    return "no GPU pair", f"{first.primitive}-{first.api}" if first else "primitives"


_PARTS_SAY = {
    "same": "the CPU and GPU paths do not part",
    "no decision": "the paths part only where no decision is made (two versions' code, derived evidence's shape)",
    "no GPU pair": "no GPU path traced to compare",
    "python": "the CPU path's own Python chooses the device (a device branch)",
}


def grid(reports: list[FrameworkReport], k: Knowledge) -> list[GridCell]:
    """framework x primitive x pass, in the contract's primitive order."""
    cells = []
    for rep in reports:
        for prim in PRIMITIVES:
            gpu = {c.pass_: c for c in rep.gpu_cells_of(prim)}
            for pass_ in PRIMITIVES[prim].passes:
                parts, anchor = _parts(rep, prim, pass_, k)
                strongest = gpu[pass_].strongest if pass_ in gpu else None
                ev = strongest.evidence if strongest else ""
                say = _PARTS_SAY.get(parts, f"CPU and GPU part at the {parts} layer")
                title = f"{rep.name} {prim} {pass_}: {say}" + (f"; GPU evidence: {ev}" if ev else "; no GPU evidence")
                cells.append(GridCell(rep.name, prim, pass_, parts, ev, anchor, title))
    return cells
