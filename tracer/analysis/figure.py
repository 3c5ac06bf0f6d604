"""One cell of the scorecard (:class:`Figure`: the figure, the line that says what it
counts, where its evidence is) and what a must-implement list rests on: the shape every
column's figures share, read by the scorecard, the models' rows, the verdicts and the
renderers."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracer.analysis.portability import FrameworkReport
from tracer.evidence_classes import DERIVED_EVIDENCE


@dataclass
class Figure:
    """One cell: the figure, the line that says what it counts, where its evidence
    is (a link into the framework's page), and details (per path, per library)."""

    value: str
    explain: str
    link: str
    details: list[str] = field(default_factory=list)
    thin: str = ""  # why the evidence is thinner here: shown instead of a score
    unit: str = ""  # what one counted thing is, where the column's definition leaves it to the framework
    items: list[str] = field(default_factory=list)  # the whole list behind the figure (survey.json)
    evidence: str = ""  # what the figure rests on, where its sources differ in strength (LIST_EVIDENCE)
    beside: Beside | None = None  # a run's list: what the registry or the compiler said, and the differences
    #: why the list is not whole (a pass that did not run on the stand-in): then it is no
    #: must-implement list, and every place that shows it says so
    incomplete: str = ""


@dataclass
class Beside:
    """The list a run's list is set beside (the kernel registry's, the compiler's), and
    the differences both ways."""

    evidence: str
    value: str
    run_only: list[str]
    other_only: list[str]
    why: dict[str, str] = field(default_factory=dict)  # each difference's reason

    def said(self) -> str:
        parts = [f"the {self.evidence} list: {self.value}"]
        if self.run_only:
            parts.append(f"run only: {', '.join(self.run_only)}")
        if self.other_only:
            parts.append(f"{self.evidence} only: {', '.join(self.other_only)}")
        if not self.run_only and not self.other_only:
            parts.append("the same ops")
        return "; ".join(parts)


#: What a must-implement list rests on, strongest first: a run on a stand-in backend, the
#: framework's own kernel registry or dispatch tables, its compiler (compiled, lowered for a
#: GPU), its GPU source read, the operators its CPU path ran: the derived GPU classes in
#: their order of tracer.evidence_classes, between a list's own words and "recorded".
LIST_EVIDENCE = ("run", "registry", *DERIVED_EVIDENCE, "recorded")


def page(rep: FrameworkReport, anchor: str) -> str:
    """Where a figure's evidence is on its framework's page: the anchor (the renderer
    knows the page's file name)."""
    return anchor
