"""What the framework ran on each side of a split, by its own kernel's name.

A library-layer split says what oneDNN did ("A convolution; B gemm_api"); a port
needs the framework's kernel each side ran: TensorFlow's ``MklConvOp`` (its
``_MklNativeConv2D`` rewrite) against Eigen's ``Conv2DOp`` with a oneDNN sgemm below.
Two sources, both named:

* the op rewrite record: the kernel registry the probe read (``meta.dispatch``:
  ``Conv2D`` -> oneDNN ``_MklNativeConv2D``) and whether the process had oneDNN's
  ops on (``meta.onednn_enabled``): the rewrite, or the CPU kernel without it;
  deterministic, every call, at any shape;
* the sampled native frames the framework declares as kernels (frameworks.yaml
  ``knowledge.kernels``: ``tensorflow::MklConvOp::Compute``), hottest first: the
  split's consequences as the native layer saw them, counted in samples.

Pure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tracer.knowledge import Knowledge
from tracer.processing.symbols import display
from tracer.processing.tags import _bare
from tracer.trace import Trace

#: How a side's op rewrite (a decision of the framework's C++, not the library's) is marked.
REWRITE = "oneDNN rewrite"
#: A kernel frame in fewer samples than this is not named (a misread stack).
MIN_SAMPLES = 2


@dataclass
class RanKernels:
    """One side's kernels in one pass."""

    rewrites: list[str] = field(default_factory=list)  # "Conv2D -> _MklNativeConv2D"
    sampled: list[tuple[str, int]] = field(default_factory=list)  # (kernel frame, samples), hottest first

    def names(self) -> list[str]:
        return self.rewrites + [f"{name} ({n} samples)" for name, n in self.sampled]


def _rewrites(trace: Trace, pass_: str) -> list[str]:
    """The op rewrite record: for each op reached that has a oneDNN kernel in the
    registry, the one this process ran (oneDNN's rewrite, or the CPU kernel with the
    rewrite off)."""
    enabled = trace.info.onednn_enabled
    table = trace.info.dispatch.ops if trace.info.dispatch is not None else None
    if enabled is None or table is None:
        return []
    tree = trace.layer(pass_, "op")
    seen = {n.frame.name for _, n in tree.walk()} if tree is not None else set()
    out = []
    for op, row in table.items():
        declared = row.get("declared") if isinstance(row, dict) else None
        target = declared.get("oneDNN") if isinstance(declared, dict) else None
        if op not in seen or not isinstance(target, str):
            continue
        out.append(f"{op} -> {target} ({REWRITE})" if enabled
                   else f"{op}: the registry's CPU kernel, not rewritten to {target}")
    return out


def _sampled(trace: Trace, pass_: str, k: Knowledge) -> list[tuple[str, int]]:
    pattern = k.kernels
    tree = trace.layer(pass_, "native")
    if pattern is None or tree is None:
        return []
    found: Counter[str] = Counter()
    for _, node in tree.walk():
        if node.frame.kind == "native" and pattern.search(_bare(node.frame.name)):
            found[display(node.frame.name)] += node.count
    return [(name, n) for name, n in found.most_common() if n >= MIN_SAMPLES]


def ran_kernels(trace: Trace, pass_: str, k: Knowledge) -> RanKernels:
    return RanKernels(_rewrites(trace, pass_), _sampled(trace, pass_, k))


def split_kernels(a: Trace, b: Trace, pass_: str, k: Knowledge) -> tuple[list[str], list[str]]:
    """What each side ran that the other did not, by the framework's kernel names
    (empty lists where neither source names any)."""
    ka, kb = ran_kernels(a, pass_, k), ran_kernels(b, pass_, k)
    a_names = {n for n, _ in ka.sampled}
    b_names = {n for n, _ in kb.sampled}
    only_a = RanKernels([r for r in ka.rewrites if r not in kb.rewrites],
                        [(n, c) for n, c in ka.sampled if n not in b_names])
    only_b = RanKernels([r for r in kb.rewrites if r not in ka.rewrites],
                        [(n, c) for n, c in kb.sampled if n not in a_names])
    return only_a.names(), only_b.names()
