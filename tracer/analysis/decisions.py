"""The decisions a port meets, counted once each: what the headline figures count.

A split point is where two traced paths part; most are no decision a port has to
make. Between two framework versions the versions' own code differs; around an
imported profile's slice the model does; a derived trace lists ops with no call
path (its evidence shape); the stand-in backend runs its own Python; jit against
eager is the same device's code compiled or not. Those are counted apart, never in
a headline figure.

What is left is a decision of the framework (device dispatch), a library choice
or ISA-specific code, and one decision is one *site*, the code that chooses:
TensorFlow's kernel registry choosing a GPU kernel for 47 ops is one site with 47
entries (the entries belong to what a backend must implement); torch's
``aten::_convolution`` choosing ``mkldnn_convolution`` or ``cudnn_convolution`` is its
own site (tracer.analysis.dispatch.decision_site). Pure.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from tracer.knowledge import Knowledge
from tracer.processing.candidates import Candidate
from tracer.processing.diff.context import ARTEFACTS
from tracer.processing.diff.result import walk_splits
from tracer.analysis.dispatch import SITE_KINDS
from tracer.analysis.portability import FrameworkReport, PairReport
from tracer.processing.ran_kernels import REWRITE
from tracer.processing.vocabulary import DEVICE_CONDITION

#: The classes a headline counts: a decision of the framework, a library or an ISA.
DECISIONS: Final = ("device dispatch", "library choice", "ISA-specific code")
#: What jit against eager is shown as (a variant frameworks.yaml marks ``switches: compilation``).
COMPILATION_MODE: Final = "compilation mode (jit vs eager)"
#: Split classes that are no decision whatever the pair: the artefacts of what was
#: compared (model context, versions, the stand-in's own code, the evidence's shape) and
#: compiled-or-not. The one set: the counts here, and the pages' drawings (no inline graph).
NOT_DECISIONS: Final = ARTEFACTS | {"compilation"}
#: What float32 against a reduced precision is shown as (``switches: precision``).
PRECISION_MODE: Final = "precision (float32 vs reduced)"
#: What the diff could not class (no device, library or ISA word on either side).
UNCLASSIFIED: Final = "unclassified"
#: The kinds of split shown apart, in the order a page lists them.
APART: Final = ("version difference", COMPILATION_MODE, PRECISION_MODE, "model context", "evidence shape",
                "stand-in implementation", UNCLASSIFIED)


@dataclass
class DecisionSite:
    """One place that chooses, and what it chose for."""

    site: str  # the deciding frame ("aten::_convolution", "file.py:12"), or "op registry"
    kind: str  # tracer.analysis.dispatch.SITE_KINDS
    classes: list[str]  # the decision classes its rows have (device dispatch...)
    file: str  # where the native layer or the source gives one
    line: int
    entries: list[str] = field(default_factory=list)  # the ops / frames it chose for
    primitives: list[str] = field(default_factory=list)


@dataclass
class Decisions:
    """A framework's decision sites, and every split that is none, by kind."""

    sites: list[DecisionSite]
    apart: dict[str, int]  # APART kind -> split points (nested ones included)
    decision_splits: int  # split points of the decision classes (nested ones included)

    def count(self, *kinds: str) -> int:
        return sum(1 for s in self.sites if s.kind in kinds)

    def in_library(self) -> int:
        return self.count("library")

    def outside_library(self) -> list[DecisionSite]:
        return [s for s in self.sites if s.kind != "library"]


#: Words of a condition that are about compiling, not about a device.
_COMPILATION_WORDS = frozenset({"jit", "eager"})


def is_device_branch(c: Candidate) -> bool:
    """A single trace's branch that is a device decision: its condition names a device or
    backend (not only jit or eager: compilation mode), and for a ``try``, in what it tries,
    not only in the exception types it catches (``except DeviceAssignmentMismatchError``)."""
    condition = c.condition.split(" except ")[0] if c.kind == "try" else c.condition
    words = {m.group(0).lower() for m in DEVICE_CONDITION.finditer(condition) if not _module_root(condition, m)}
    return bool(words - _COMPILATION_WORDS)


def _module_root(text: str, m: re.Match[str]) -> bool:
    """A word that is only the root of a dotted name (``backend.is_keras_tensor``: Keras's
    backend module), not an attribute (``x.device.type``) or a value: it names a module, not a device."""
    before = text[m.start() - 1] if m.start() else " "
    after = text[m.end()] if m.end() < len(text) else " "
    return after == "." and not (before.isalnum() or before in "._")


def device_branches(rep: FrameworkReport) -> list[Candidate]:
    """The framework's Python device branches (single-trace) that are decisions."""
    return [c for c in rep.device_branches if is_device_branch(c)]


def is_compilation_pair(framework: str, pr: PairReport, k: Knowledge) -> bool:
    """A CPU variant pair whose variant switches compilation (JAX's nojit)."""
    if pr.kind != "variant":
        return False
    return any(k.is_compilation_variant(framework, str(d.b.get("variant", ""))) for d in pr.diffs.values())


def is_precision_pair(framework: str, pr: PairReport, k: Knowledge) -> bool:
    """A CPU variant pair whose variant switches the element type (torch's and JAX's bf16)."""
    if pr.kind != "variant":
        return False
    return any(k.is_precision_variant(framework, str(d.b.get("variant", ""))) for d in pr.diffs.values())


def _split_kind(classification: str, compilation: bool, precision: bool = False) -> str:
    if precision:
        return PRECISION_MODE
    if compilation or classification in NOT_DECISIONS - ARTEFACTS:
        return COMPILATION_MODE
    if classification in ARTEFACTS:
        return classification
    return classification if classification in DECISIONS else UNCLASSIFIED


def pair_splits(framework: str, pr: PairReport, k: Knowledge) -> tuple[int, Counter[str]]:
    """(split points of the decision classes, the rest by kind) of one comparison."""
    comp = is_compilation_pair(framework, pr, k)
    precision = is_precision_pair(framework, pr, k)
    apart: Counter[str] = Counter()
    decided = 0
    for result in pr.diffs.values():
        versions = "framework_version" in result.differs
        for layer in result.layers:
            for s in walk_splits(layer.splits):
                kind = _split_kind(s.classification, comp, precision)
                if versions and layer.layer == "python" and kind in DECISIONS:
                    kind = "version difference"  # dispatch.py never makes these rows either
                if kind in DECISIONS:
                    decided += 1
                else:
                    apart[kind] += 1
    return decided, apart


def decisions(rep: FrameworkReport, k: Knowledge) -> Decisions:
    """The decision sites of ``rep``'s dispatch table whose rows are of a decision class and
    come from a pair that is not jit against eager, and every split counted by kind."""
    compilation = {pr.title for case in rep.cases for pr in case.pairs
                   if is_compilation_pair(rep.name, pr, k) or is_precision_pair(rep.name, pr, k)}
    apart: Counter[str] = Counter()
    decided = 0
    for case in rep.cases:
        for pr in case.pairs:
            n, other = pair_splits(rep.name, pr, k)
            decided += n
            apart.update(other)
    sites: dict[str, DecisionSite] = {}
    for row in rep.dispatch_points:
        if row.classification not in DECISIONS or not [p for p in row.pairs if p not in compilation]:
            continue
        key, kind = row.site or row.frame, row.site_kind or row.layer
        if row.layer == "library" and any(REWRITE in kernel for kernel in row.a_kernels + row.b_kernels):
            # the framework's C++ rewrote the op for the library (TensorFlow's _MklNative
            # rewrite): its decision, one site however many ops it rewrites
            key, kind = f"op rewrite ({REWRITE})", "op code"
        site = sites.get(key)
        if site is None:
            site = sites[key] = DecisionSite(key, kind, [], row.file, row.line)
        if row.classification not in site.classes:
            site.classes.append(row.classification)
        if row.display not in site.entries:
            site.entries.append(row.display)
        site.primitives += [p for p in row.primitives if p not in site.primitives]
    order = {kind: i for i, kind in enumerate(SITE_KINDS)}
    return Decisions(sorted(sites.values(), key=lambda s: (order.get(s.kind, 9), s.site)),
                     {kind: apart[kind] for kind in APART if apart[kind]}, decided)
