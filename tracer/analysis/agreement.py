"""How far each weaker class of GPU evidence agrees with a recording of the same cell.

Where dltrace recorded a framework on a GPU machine (``recorded``), every other class of
evidence for the same primitive and pass (``imported`` profiles of others, the GPU
build's ``registered`` tables, XLA's ``compiled`` program) can be measured against it:
does it name the same op, the same library, the same first kernel family, and which of
the framework ops the GPU ran does it name (recall) and which it names are not among them
(precision)? A reader of a TensorFlow or MXNet cell, which has no recording, learns from
this how far a registered or imported cell is to be trusted. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tracer.processing.evidence_class import EVIDENCE_ORDER
from tracer.analysis.gpu_cells import GpuCell, GpuEvidence

RECORDED = "recorded"


@dataclass
class Agreement:
    """One weaker class measured against the recordings, over the cells that have both."""

    evidence: str
    cells: int = 0
    same_op: int = 0
    same_library: int = 0
    same_family: int = 0
    ops_found: int = 0  # recorded ops the weaker class names too
    ops_recorded: int = 0
    ops_named: int = 0  # ops the weaker class names
    #: (primitive, pass, what differs) of each cell that does not name the recorded op or library
    disagree: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.ops_found / self.ops_recorded if self.ops_recorded else 0.0

    @property
    def precision(self) -> float:
        return self.ops_found / self.ops_named if self.ops_named else 0.0


def op_key(op: str) -> str:
    """An op's name without its namespace (aten::cudnn_convolution -> cudnn_convolution)."""
    return op.rsplit("::", 1)[-1].strip()


def kernel_family(kernel: str) -> str:
    """A kernel's family: its first word once the prefixes that name no code are gone
    ("custom-call:__cudnn$convForward" -> cudnn, "CUDA: cudnn_convolution" -> cudnn,
    "sm80_xmma_fprop_..." -> xmma, "void at::native::vectorized_elementwise_kernel<...>" -> at)."""
    name = re.sub(r"^(?:custom-call:|CUDA:\s*|void\s+)", "", kernel.strip())
    name = re.sub(r"(?i)^(?:sm\d+|volta|turing|ampere|hopper)_", "", name)  # the GPU generation names no family
    m = re.search(r"[A-Za-z][A-Za-z0-9]*", name)
    return m.group(0).lower() if m else ""


def _compare(into: Agreement, cell: GpuCell, rec: GpuEvidence, weak: GpuEvidence) -> None:
    into.cells += 1
    op = op_key(weak.op) == op_key(rec.op)
    lib = weak.library == rec.library
    into.same_op += op
    into.same_library += lib
    into.same_family += bool(rec.kernel) and kernel_family(weak.kernel) == kernel_family(rec.kernel)
    recorded, named = {op_key(o) for o in rec.ops}, {op_key(o) for o in weak.ops}
    into.ops_recorded += len(recorded)
    into.ops_named += len(named)
    into.ops_found += len(recorded & named)
    if not (op and lib):
        into.disagree.append((cell.primitive, cell.pass_,
                              f"recorded {rec.op or '—'} ({rec.library or 'no library'}); "
                              f"{weak.evidence} {weak.op or '—'} ({weak.library or 'no library'})"))


def gpu_vendor(gpu: str) -> str:
    """NVIDIA or AMD from a GPU's name as profilers report it, "" where it names neither."""
    if re.search(r"(?i)\bAMD\b|Instinct|Radeon", gpu):
        return "AMD"
    if re.search(r"(?i)NVIDIA|Tesla|GeForce|Quadro|\b[AHBL]\d{2,3}\b|\bV100\b", gpu):
        return "NVIDIA"
    return ""


def agreement(cells: list[GpuCell]) -> list[Agreement]:
    """Each weaker class's agreement with the recorded evidence of the same cells,
    strongest class first; empty where nothing was recorded. Every entry of a class
    counts (each imported profile of a cell is one comparison), but only against a
    recording on the same GPU vendor: an AMD profile's MIOpen is no disagreement with an
    NVIDIA recording's cuDNN. Evidence that names no GPU (registered, compiled) is
    compared with the recording of its own target (an NVIDIA GPU here)."""
    out: dict[str, Agreement] = {}
    for cell in cells:
        rec = next((e for e in cell.gpu if e.evidence == RECORDED and e.label.split(", ")[0] == "gpu"),
                   next((e for e in cell.gpu if e.evidence == RECORDED), None))
        if rec is None:
            continue
        vendor = gpu_vendor(rec.gpu)
        for weak in cell.gpu:
            if weak.evidence == RECORDED or (weak.gpu and gpu_vendor(weak.gpu) != vendor):
                continue
            _compare(out.setdefault(weak.evidence, Agreement(weak.evidence)), cell, rec, weak)
    return [out[c] for c in EVIDENCE_ORDER if c in out]
