"""The GPU evidence classes: how a GPU-side trace knows what it shows, defined once.

Most rounds no GPU machine is lent, so a GPU side is often not a run of the probe: a
profile recorded elsewhere, or what the framework's GPU build, lowering, compiler or
source says a GPU would run. Those are different claims, and every GPU cell says which
it rests on (evidence is labelled, never promoted). The collectors (which class a
derived trace takes), the processing and analysis stages (the order a cell lists its
evidence in), the renderers (the legend) and the docs' tables all read this one table;
``tests/test_evidence_classes.py`` fails when a second list of the classes appears.

Standard library only: the probes import it (through tracer.contract) in a framework's
environment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class EvidenceClass:
    name: str  # the trace meta's ``evidence``
    rank: int  # 0 the strongest: decides only which entry a cell shows first
    meaning: str  # what it is (the report's legend and tooltips)
    made_by: str  # what makes a trace of this class
    derived: bool  # made here without a GPU, by the probe's ``gpu_evidence`` (``dltrace derive``)
    #: a must-implement list resting on it was checked against a device's interface (the
    #: GPU build's registry, its compiler, its lowering); a source read or the CPU path's
    #: operators were not
    checked: bool


#: Strongest first. A lowering is set above the kernel registry: it says what the op
#: becomes for the GPU target, where the registry says only that a kernel exists.
EVIDENCE_CLASSES: tuple[EvidenceClass, ...] = (
    EvidenceClass("recorded", 0, "dltrace ran the probe on a GPU machine",
                  "a probe run on a GPU (`--device gpu`), or recorded there and added with `--with-traces`",
                  False, False),
    EvidenceClass("imported", 1, "a real profile recorded elsewhere, by others (with its provenance)",
                  "`dltrace import` and every survey: a profiler's file read by `tracer/importers/`",
                  False, False),
    EvidenceClass("compiled", 2, "XLA's GPU compiler run here, without a GPU",
                  "JAX's `gpu_evidence` in its GPU build (the CUDA PJRT plugin, deviceless, for a described H100)",
                  True, True),
    EvidenceClass("lowered", 3, "the framework's lowering for the cuda/rocm platforms, done here",
                  "JAX's `gpu_evidence` where its CUDA plugin is not installed (`lower(lowering_platforms=...)`)",
                  True, True),
    EvidenceClass("registered", 4, "the framework's GPU build's own kernel registry or dispatch table",
                  "torch's and TensorFlow's `gpu_evidence` in their GPU builds (dispatch table, kernel registry)",
                  True, True),
    EvidenceClass("source", 5, "the device branch read from the framework's own source",
                  "Chainer's `gpu_evidence`: the `forward_gpu` and `backward_gpu` branches read", True, False),
)

_BY_RANK = sorted(EVIDENCE_CLASSES, key=lambda c: c.rank)
#: The classes' names, strongest first.
EVIDENCE: tuple[str, ...] = tuple(c.name for c in _BY_RANK)
#: The classes derived here without a GPU, strongest first (what ``gpu_evidence`` may return).
DERIVED_EVIDENCE: tuple[str, ...] = tuple(c.name for c in _BY_RANK if c.derived)
#: The classes of a GPU's own run (recorded here or elsewhere): what is not derived.
RAN_ON_GPU: tuple[str, ...] = tuple(c.name for c in _BY_RANK if not c.derived)
#: The classes a must-implement list checked against a device's interface rests on.
CHECKED_EVIDENCE: tuple[str, ...] = tuple(c.name for c in _BY_RANK if c.checked)
#: What each class is, strongest first.
EVIDENCE_MEANING: dict[str, str] = {c.name: c.meaning for c in _BY_RANK}


def rank(name: str) -> int:
    """A class's rank (0 the strongest); a name that is no class ranks after every class."""
    return next((c.rank for c in EVIDENCE_CLASSES if c.name == name), len(EVIDENCE_CLASSES))


def strongest(names: Iterable[str]) -> str:
    """The strongest class among ``names`` ("" where none is a class)."""
    known = [n for n in names if n in EVIDENCE]
    return min(known, key=rank, default="")
