"""Which kind of evidence a GPU trace is. A GPU side is often not a run of the probe:
most rounds no GPU machine is lent, so it is a profile recorded elsewhere, or what a
framework's GPU build, lowering, compiler or source says a GPU would run. Those are
different claims, and every GPU cell of a report says which one it rests on
(evidence is labelled, never promoted). Pure."""

from __future__ import annotations

from tracer.evidence_classes import EVIDENCE, EVIDENCE_MEANING as EVIDENCE_MEANING
from tracer.trace_meta import TraceMeta

#: Evidence classes, strongest first (the order only decides which a cell shows first),
#: and what each is (the report's legend and tooltips): tracer.evidence_classes' table.
EVIDENCE_ORDER = EVIDENCE


def evidence_class(meta: TraceMeta) -> str | None:
    """The evidence class of a trace from its meta: ``evidence`` where the trace says
    it; older traces say nothing, then an imported trace is "imported" and any other
    GPU trace "recorded"; None for a CPU trace. The one place the processing stages
    read it."""
    if meta.evidence in EVIDENCE_ORDER:
        return meta.evidence
    if meta.imported:
        return "imported"
    return "recorded" if meta.device == "gpu" else None
