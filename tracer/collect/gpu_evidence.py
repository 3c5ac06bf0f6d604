"""Runs inside a framework's environment for a ``gpu-evidence`` request: what the
framework's GPU path would run for each case, derived on this machine without a GPU
(the probe's ``gpu_evidence`` hook: its GPU build's kernel registry, JAX's lowering
for cuda/rocm, Chainer's forward_gpu source), written as an ordinary trace whose
meta says device "gpu", the evidence class and what was read (``provenance``), so
that no reader can take it for a GPU that ran. Its runs are per pass, warm, with an
op layer only: root -> framework op -> kernel/implementation (frame.lib = library).

Stdlib only (and tracer.trace / tracer.contract): imported in every framework env.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Callable

from tracer import __version__, machine
from tracer.contract import GPU_BUILD, CaseRequest, GpuEvidence, ProbeRequest, UserWorkload
from tracer.evidence_classes import DERIVED_EVIDENCE, strongest
from tracer.probes.cases import case_passes, make_case
from tracer.trace import Frame, Node, Run, Trace

if TYPE_CHECKING:
    from typing import Protocol

    from tracer.contract import Probe
    from tracer.probes.base import Case

    class _EvidenceProbe(Probe, GpuEvidence, Protocol):
        """A probe that has the gpu_evidence hook (harness checks it before calling)."""


def _node(doc: dict[str, Any], depth: int = 0) -> Node:
    """One op or implementation of the probe's plain dict, as a trace node."""
    if depth > 32:
        raise ValueError("gpu_evidence returned a tree deeper than 32 levels")
    kind = "root" if depth == 0 else "op"
    frame = Frame(kind, str(doc.get("module", "")), str(doc["name"]), lib=str(doc.get("lib", "")))
    return Node(frame, int(doc.get("count", 1)), 0, children=[_node(c, depth + 1) for c in doc.get("children", ())])


def _step(case: Case, pass_: str) -> Callable[[], Any]:
    if pass_ == "forward":
        return case.forward
    state = case.forward()
    return lambda: case.backward(state)


def derive_case(req: ProbeRequest, case_req: CaseRequest, probe: _EvidenceProbe, version: str) -> Trace:
    """The GPU evidence of one case, its passes (an optimizer step: forward only), as a trace (device "gpu")."""
    case = make_case(probe, case_req.primitive, case_req.api, req.device_select, tuple(case_req.shape),
                     UserWorkload.from_json(case_req.workload))
    passes = case_passes(case, case_req.passes)
    state = case.forward()  # warm: first-call work is not what the step reaches
    if "backward" in passes:  # an optimizer step has none
        case.backward(state)
    runs: list[Run] = []
    evidence: set[str] = set()
    provenance: dict[str, Any] = {}
    backend: dict[str, Any] = {"key": "", "ops": {}, "passes": {}}
    info: dict[str, Any] = {}
    for pass_ in passes:
        doc = probe.gpu_evidence(case, pass_, _step(case, pass_))
        if doc.get("evidence") not in DERIVED_EVIDENCE:
            raise ValueError(f"gpu_evidence returned evidence {doc.get('evidence')!r} (one of {DERIVED_EVIDENCE})")
        evidence.add(doc["evidence"])
        provenance.update(doc.get("provenance") or {})
        got = doc.get("backend") or {}
        backend["key"] = backend["key"] or str(got.get("key", ""))
        backend["ops"].update(got.get("ops") or {})
        backend["passes"][pass_] = got.get("ops") or {}  # an op's needs can differ by pass
        info.update(doc.get("info") or {})
        root = _node({"name": f"{case_req.primitive}.{pass_}", "children": doc.get("ops", [])})
        runs.append(Run(pass_, "warm", {"op": root}, {"layers": {"op": {"source": provenance.get("read", "")}}}))
    # compiled beats lowered where both were derived: name the strongest class the runs share
    cls = strongest(evidence)
    meta = {
        "framework": req.framework.removesuffix(GPU_BUILD), "framework_version": version,
        "primitive": case_req.primitive,
        "api": case_req.api, "device": "gpu", "variant": cls, "evidence": cls,
        "provenance": {**provenance, "evidence": cls, "ran_on_gpu": False},
        "shape": list(case_req.shape), "passes": list(passes), "source_roots": list(req.source_roots),
        "machine": machine.describe(), "tool": "dltrace", "tool_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": req.command, "layers_requested": ["op"], "backend": backend,
        "gpu_evidence": {**info, "environment": req.framework},
    }
    return Trace(meta, runs)
