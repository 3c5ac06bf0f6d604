"""Splits that are not a device decision: the model around a profiled slice, and the
difference between two versions of the framework. Pure.

A CPU probe calls one primitive; an imported GPU profile is a slice of a whole
model (AlexNet, a ResNet training step, a ViT), cut out at that primitive's ops.
What the model does around the primitive lands in the slice too: a 3-D input
reshaped for ``aten::linear``, a gradient accumulated (``add_``) where a tensor
feeds two layers, activation checkpointing recomputing ``conv2d`` and
``batch_norm`` inside ``ReluBackward0``. The diff sees those as frames on the
GPU side only, and :func:`tracer.processing.diff.classify.classify` calls them a
device dispatch (their subtrees reach cuDNN) or "other". They are the model's
structure, not where the framework chose the GPU, so they get their own class,
``model context``: they stay in the pair's diff, and the dispatch-point table
(tracer.analysis.dispatch) leaves them out.

Two paths of different framework releases (an imported torch 2.6 profile against
this machine's 2.13) also part where nothing names a device, a library or an ISA:
the releases' own code differs. Those splits are ``version difference``. Two builds
of one release (torch's x86 +cpu and aarch64 +cu130 wheels) are one release: the
diff compares the build label apart (``framework_build``).

A stand-in backend (``--device standin``) is played in Python on this CPU: torch's
dispatcher calls its fallback back from C, and what the fallback runs (storage
twins, ``record_function``, ``OpOverload.redispatch``) hangs below the C hand-off on
the stand-in side alone. That is the stand-in's ``stand-in implementation``, not a
decision of the framework: the op layer shows what reached the backend.

Derived GPU evidence (registered, lowered, compiled, source) is read, not run: its op
layer lists what the GPU build would run op by op, with no call path around it. A
split at the step itself against such a trace is its ``evidence shape``; where an
op's kernel differs, the split is at that op and stays a decision.

The rules are on what is measurable, never on a list of names (see
:func:`context_of`).
"""

from __future__ import annotations

import re
from typing import Final, Iterable

from tracer.contract import STANDIN
from tracer.evidence_classes import DERIVED_EVIDENCE
from tracer.knowledge import Knowledge
from tracer.processing.diff.result import Branch, Classification, DiffResult, Split, walk_splits
from tracer.processing.tags import is_gpu_lib
from tracer.processing.vocabulary import GPU_CODE
from tracer.trace import Trace

MODEL_CONTEXT: Final = "model context"
VERSION_DIFFERENCE: Final = "version difference"
STANDIN_IMPLEMENTATION: Final = "stand-in implementation"
EVIDENCE_SHAPE: Final = "evidence shape"
#: Classes that are no decision of a framework, a library or an ISA.
ARTEFACTS = frozenset({MODEL_CONTEXT, VERSION_DIFFERENCE, STANDIN_IMPLEMENTATION, EVIDENCE_SHAPE})
#: What classify() says when no device, library, ISA or compilation word tells the sides apart.
_UNEXPLAINED: frozenset[Classification] = frozenset({"other", "allocation/transfer"})
_UNKNOWN_VERSIONS = frozenset({"", "unknown", "?"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_imported(trace: Trace) -> bool:
    """A slice of a whole model's profile recorded elsewhere (tracer.importers)."""
    return trace.info.imported


def op_names(trace: Trace) -> frozenset[str]:
    """Every op a trace reaches, in any run: what "the probe's ops" are. Traces with
    no op layer give every frame name of every layer."""
    names: set[str] = set()
    layers = [r.layers["op"] for r in trace.runs if "op" in r.layers] or \
        [root for r in trace.runs for root in r.layers.values()]
    for root in layers:
        for _, node in root.walk():
            names.add(node.frame.name)
            names.add(node.frame.label)
    return frozenset(names)


def names_gpu_code(name: str, library: str = "", *, k: Knowledge) -> bool:
    """A frame's own name or library tag names GPU code (cudnn_convolution, a cuBLAS
    kernel, autograd's CudnnBatchNormBackward0, its CamelCase split into words)."""
    words = _CAMEL.sub(" ", name)
    return is_gpu_lib(library, k) or bool(GPU_CODE.search(f"{name} {words} {library}".lower()))


def _gpu_code(b: Branch, k: Knowledge) -> bool:
    """The split's frame names GPU code itself; its subtree is not asked: a recomputed
    conv2d reaches cuDNN too."""
    return names_gpu_code(b.label, b.library, k=k)


def _model_branch(b: Branch, imported_side: bool, probe_ops: frozenset[str], k: Knowledge) -> bool:
    """A one-sided frame the model put there, when it names no GPU code itself: an op
    that only allocates, views, copies or is autograd's bookkeeping (either side), or,
    on the imported side, an op the CPU probe of the same primitive never reaches."""
    if _gpu_code(b, k):
        return False
    return k.is_utility_op(b.label) or (imported_side and b.kind == "op" and b.label not in probe_ops)


def _versions(result: DiffResult) -> tuple[str, str] | None:
    pair = result.differs.get("framework_version")
    if not pair or any(str(v) in _UNKNOWN_VERSIONS for v in pair):
        return None
    return str(pair[0]), str(pair[1])


def context_of(branches_a: Iterable[Branch], branches_b: Iterable[Branch], classification: Classification,
               result: DiffResult, imported: tuple[bool, bool],
               probe_ops: frozenset[str], k: Knowledge) -> tuple[Classification, str] | None:
    """(class, reason) when a split is no decision, else None. First rule that fires:

    1. model context: one side is an imported model slice, and every frame on either
       side only is the model's (see :func:`_model_branch`);
    2. version difference: the two sides' framework releases differ (both known) and
       classify() found no device, library, ISA or compilation word that tells them apart.
    """
    a, b = list(branches_a), list(branches_b)
    if imported[0] != imported[1] and (a or b) and \
            all(_model_branch(x, imported[0], probe_ops, k) for x in a) and \
            all(_model_branch(x, imported[1], probe_ops, k) for x in b):
        side = "B" if imported[1] else "A"
        names = ", ".join(sorted({x.label for x in (b if imported[1] else a)})[:4]) or "nothing"
        return MODEL_CONTEXT, (f"side {side} is a slice of a whole model's profile; what differs ({names}) is the "
                               "model around the primitive (ops the CPU probe never reaches, reshapes, autograd "
                               "bookkeeping), not a device decision")
    versions = _versions(result)
    if versions and classification in _UNEXPLAINED:
        return VERSION_DIFFERENCE, (f"framework versions differ ({versions[0]} against {versions[1]}) and no device, "
                                    "library or ISA word tells the sides apart")
    return None


def _standin_side(split: Split, standin: tuple[bool, bool]) -> str | None:
    """The reason, when a python-layer split is the stand-in backend's Python called back
    from a C hand-off: only the stand-in side has frames there."""
    if split.layer != "python" or split.kind != "c" or standin[0] == standin[1]:
        return None
    mine, other = (split.only_b, split.only_a) if standin[1] else (split.only_a, split.only_b)
    if not mine or other:
        return None
    names = ", ".join(sorted({x.label for x in mine})[:4])
    return (f"side {'B' if standin[1] else 'A'} is the stand-in backend played in Python: what runs below the C "
            f"hand-off there ({names}) is its own implementation called back from the dispatcher, not a decision")


def label_context(result: DiffResult, a: Trace, b: Trace, k: Knowledge) -> None:
    """Give every split of ``result`` that is no decision (model context, a version
    difference, the stand-in's implementation, a derived trace's shape) its class and
    reason, in place (nested splits too: each is judged on its own frames)."""
    imported = (is_imported(a), is_imported(b))
    standin = (a.info.device == STANDIN, b.info.device == STANDIN)
    derived = a.info.evidence in DERIVED_EVIDENCE or b.info.evidence in DERIVED_EVIDENCE
    if imported[0] == imported[1] and _versions(result) is None and standin[0] == standin[1] and not derived:
        return
    probe = b if imported[0] else a
    probe_ops = op_names(probe) if imported[0] != imported[1] else frozenset()
    for layer in result.layers:
        for s in walk_splits(layer.splits):
            found = context_of(s.only_a, s.only_b, s.classification, result, imported, probe_ops, k)
            why = None if found else _standin_side(s, standin)
            if found:
                s.classification, s.reason = found
            elif why:
                s.classification, s.reason = STANDIN_IMPLEMENTATION, why
            elif derived and len(s.path) == 1:
                s.classification, s.reason = EVIDENCE_SHAPE, (
                    "one side is derived GPU evidence (read, not run): it lists what the GPU build would run op by op, "
                    "with no call path, so a split at the step itself is its shape; a split at an op is a decision")
