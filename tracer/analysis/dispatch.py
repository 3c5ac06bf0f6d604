"""The dispatch points of a framework: the first decisions only, one row per
deciding frame across primitives and comparisons, each with its evidence.

What a porting team reads first, so each row must be a real decision:

* a row is a first decision (a top-level split) of the python or op layer, or of the
  sampled native layer where no other layer shows one (elsewhere the native split is
  the evidence of the row the others name); the splits nested under it are its
  consequences, counted in the row;
* the library layer (what oneDNN and MKL say they ran) is evidence: it is attached
  to the pass's named decision; where there is none, the library chose by itself
  (oneDNN's ISA dispatch: jit:avx2 on one machine, brgconv:sve_512 on another) and
  the row is the library's;
* an op-level split at the step itself, where one side's op is the other's renamed
  for a vendor library (TensorFlow's ``Conv2D`` and ``_MklNativeConv2D``), is
  reported at the op that was replaced, with both names;
* between two releases of the framework (an imported profile of torch 2.6 against
  this machine's 2.13), the python layer's differences are the releases' own, not a
  dispatch: they stay in the pair's diff and are not rows here (two builds of one
  release, x86's +cpu and aarch64's +cu130, are one release);
* a split that is no decision (tracer.processing.diff.context: the model around an
  imported profile's slice, two framework versions' own code) stays in the pair's
  diff and is not a row: every row is a decision of the framework, a library or an ISA;
* names are shown in their short form (tracer.processing.symbols), the full symbol kept.
Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tracer.knowledge import Knowledge
from tracer.processing.diff.context import ARTEFACTS
from tracer.processing.diff.result import Branch, Classification, DiffResult, LayerDiff, Split, walk_splits
from tracer.processing.symbols import display

#: What a row shows of each side, over all its comparisons (cudnn_convolution, miopen_convolution...).
MAX_NAMES = 8
#: The layers whose splits can name where the decision is made, in reading order.
NAMING = ("python", "op", "native")
#: Of those, the ones that record every call (the native layer is sampled)
EXACT = ("python", "op")


def _decisive(layer: LayerDiff) -> list[Split]:
    return [s for s in layer.splits if s.classification not in ARTEFACTS]


@dataclass
class DispatchPoint:
    """A frame where paths part: where a new backend hooks in."""

    frame: str  # the deciding frame, as recorded
    display: str  # its short form
    layer: str
    classification: Classification
    file: str
    line: int
    primitives: list[str]
    pairs: list[str]
    a_names: list[str]  # short forms of what only side A reaches, over its comparisons
    b_names: list[str]
    evidence: list[str] = field(default_factory=list)  # one line per layer and pass that shows it
    a_kernels: list[str] = field(default_factory=list)  # the framework's own kernels only A ran (ran_kernels)
    b_kernels: list[str] = field(default_factory=list)
    consequences: int = 0  # splits further down that follow from it
    #: the decision site this row is an entry of (:func:`decision_site`): the frame itself where its
    #: own code chooses, else the registry or backend selection that chose for it
    site: str = ""
    site_kind: str = ""  # one of SITE_KINDS


#: Where a decision is made, as the headline counts it (tracer.analysis.decisions).
SITE_KINDS = {
    "registry": "the kernel registry / dispatcher: the same op, a kernel registered per device",
    "backend": "the step handed to another backend or compiler target (XLA:cpu / XLA:gpu)",
    "op code": "an op whose own C++ code calls a different op on each side (aten::_convolution)",
    "python": "a device branch in the framework's Python",
    "native": "a native function that calls different code on each side",
    "library": "inside a vendor library (its ISA or implementation dispatch)",
}
#: An op name: an identifier, namespaced (aten::mm) or not (Conv2D), no template or arguments.
_OP_NAME = re.compile(r"^(?:\w+::)*\w+$")


def _names(split: Split, side: str) -> list[str]:
    return [display(b.label) for b in (split.only_a if side == "A" else split.only_b)][:4]


def _renamed(split: Split, k: Knowledge) -> str | None:
    """The op a vendor library's op replaced, when an op-level split at the step is one
    op renamed (``Conv2D`` on one side, ``_MklNativeConv2D`` on the other; the prefixes
    are libraries.yaml's ``vendor_op_prefixes``)."""
    if split.kind != "root":
        return None
    names: dict[str, set[str]] = {}  # the op without a vendor prefix -> the labels that compute it
    for b in split.only_a + split.only_b:
        names.setdefault(k.libraries.vendor_op_prefix.sub("", b.label), set()).add(b.label)
    return next((op for op, labels in names.items() if len(labels) > 1), None)


def _evidence(layer: LayerDiff, split: Split, pass_: str) -> str:
    a, b = ", ".join(_names(split, "A")) or "—", ", ".join(_names(split, "B")) or "—"
    text = f"{pass_}, {layer.layer} layer: A {a} · B {b}"
    if layer.sampled:
        for side, branches, total in (("A", split.only_a, layer.samples_a), ("B", split.only_b, layer.samples_b)):
            if branches and branches[0].p_value is not None:
                text += (f" · {side}: {branches[0].count} of {total} samples, "
                         f"p = {branches[0].p_value:.1g} (needs < {layer.alpha:.1g})")
                break
    return text


def _calls_op(branches: list[Branch], k: Knowledge) -> bool:
    """A one-sided branch that is another op the frame's code called (not a kernel
    launched for it, not an op that only allocates, views or copies)."""
    return any(b.kind == "op" and _OP_NAME.match(b.label) and not k.is_utility_op(b.label)
               and not b.label.startswith("XLA:") for b in branches)


def decision_site(layer: str, split: Split, k: Knowledge) -> tuple[str, str]:
    """(site, kind): the code that made the decision a split shows, counted once
    however many ops it chose for. An op whose sides call two different ops
    (``aten::_convolution``: mkldnn_convolution / cudnn_convolution) chose itself; an op
    whose sides differ only by the kernel under it was chosen for by the kernel registry
    (one site for every such op: TensorFlow's registry, torch's dispatch keys); a split at
    the step whose sides are two compiler targets is one backend selection."""
    if layer == "python":  # the deciding function (a single trace's device branch in it is the same site)
        return split.frame, "python"
    if layer == "native":
        return split.frame, "native"
    if split.kind == "root":
        names = sorted({b.label for b in split.only_a}), sorted({b.label for b in split.only_b})
        if all(n.startswith("XLA:") for side in names for n in side) and names[0] and names[1]:
            return f"{', '.join(names[0])} / {', '.join(names[1])}", "backend"
        if _calls_op(split.only_a, k) and _calls_op(split.only_b, k):
            return f"step: {', '.join(names[0])} / {', '.join(names[1])}", "op code"
        return "op registry", "registry"
    if _calls_op(split.only_a, k) and _calls_op(split.only_b, k):
        return split.frame, "op code"
    return "op registry", "registry"


def library_site(split: Split) -> str:
    """The site of a decision inside vendor libraries: one per kind and libraries, however
    many calls it chose for (oneDNN's ISA dispatch is one site for every primitive)."""
    a = sorted({b.library for b in split.only_a if b.library})
    b = sorted({x.library for x in split.only_b if x.library})
    if split.classification == "ISA-specific code":
        return f"ISA dispatch inside {', '.join(sorted({*a, *b})) or 'a library'}"
    # the same choice whichever side a comparison put first (MKL / — and — / MKL are one site)
    return "library choice: " + " / ".join(sorted((", ".join(a) or "—", ", ".join(b) or "—")))


def _library_frame(split: Split) -> str:
    kinds = sorted({b.label.split(" ", 1)[0] for b in split.only_a + split.only_b})
    return f"library: {', '.join(kinds)}"


class DispatchTable:
    """Collects the rows over a framework's pair reports, with the knowledge ``k``."""

    def __init__(self, k: Knowledge) -> None:
        self.rows: dict[tuple[str, str, str], DispatchPoint] = {}
        self.k = k

    def _row(self, layer: str, frame: str, split: Split, primitive: str, pair: str) -> DispatchPoint:
        # a library's rows are one per site: oneDNN's ISA dispatch on A64FX and its hand-off
        # to the Arm Compute Library on Neoverse-N1 are two decisions about the same calls
        library = "" if layer in NAMING else library_site(split)
        key = (layer, frame, library)
        row = self.rows.get(key)
        if row is None:
            site, kind = decision_site(layer, split, self.k) if layer in NAMING else (library, "library")
            row = self.rows[key] = DispatchPoint(
                frame, display(frame), layer, split.classification, split.file, split.line, [], [], [], [],
                site=site, site_kind=kind)
        if primitive not in row.primitives:
            row.primitives.append(primitive)
        if pair not in row.pairs:
            row.pairs.append(pair)
        for names, new in ((row.a_names, _names(split, "A")), (row.b_names, _names(split, "B"))):
            names += [n for n in new if n not in names][: max(0, MAX_NAMES - len(names))]
        return row

    def add(self, primitive: str, pair: str, diffs: dict[str, DiffResult],
            kernels: dict[str, tuple[list[str], list[str]]] | None = None) -> None:
        """``kernels``: pass -> the framework's kernels only side A / B ran
        (tracer.processing.ran_kernels), named on the pass's rows."""
        for pass_, result in diffs.items():
            named: list[DispatchPoint] = []
            versions_differ = "framework_version" in result.differs
            layers = {ld.layer: ld for ld in result.layers}
            for name in EXACT:
                layer = layers.get(name)
                if layer is None or (name == "python" and versions_differ):
                    continue
                for s in _decisive(layer):
                    frame = (name == "op" and _renamed(s, self.k)) or s.frame
                    named.append(self._named_row(layer, s, frame, primitive, pair, pass_))
            first = named[0] if named else None
            # a copy on one side only (aarch64 torch's contiguous() before oneDNN) names no
            # decision: what the libraries then chose is their own row, as with no op split
            deciding = [r for r in named if r.classification != "allocation/transfer"]
            owners = list(deciding)
            for layer in result.layers:
                if layer.layer in NAMING or not layer.splits:
                    continue
                for s in _decisive(layer):
                    row = deciding[0] if deciding else self._row(layer.layer, _library_frame(s), s, primitive, pair)
                    row.evidence.append(_evidence(layer, s, pass_))
                    if row.classification == "other":  # what the libraries ran says what kind of decision it is
                        row.classification = s.classification
                    owners += [row] if row not in owners else []
                    first = first or row
            # the sampled native stacks part where the code above a library's call differs
            # (TensorFlow's gen_nn_ops.conv2d above oneDNN's ISA dispatch): evidence of the
            # decision an exact layer or a library names, a row of their own only where
            # nothing else shows one (else one decision would count twice, and as often as
            # sampling happens to catch it)
            native = layers.get("native")
            for s in [] if native is None else _decisive(native):
                assert native is not None  # for mypy: no split without its layer
                if owners:
                    owners[0].evidence.append(_evidence(native, s, pass_))
                    continue
                row = self._named_row(native, s, s.frame, primitive, pair, pass_)
                first = first or row
            self._kernels(first, pass_, (kernels or {}).get(pass_, ([], [])))

    def _named_row(self, layer: LayerDiff, s: Split, frame: str, primitive: str, pair: str,
                   pass_: str) -> DispatchPoint:
        row = self._row(layer.layer, frame, s, primitive, pair)
        row.consequences += sum(1 for _ in walk_splits(s.children))
        row.evidence.append(_evidence(layer, s, pass_))
        return row

    @staticmethod
    def _kernels(row: DispatchPoint | None, pass_: str, kernels: tuple[list[str], list[str]]) -> None:
        """Name, on the pass's first row, the framework's kernels each side ran."""
        ka, kb = kernels
        if row is None or not (ka or kb):
            return
        row.evidence.append(f"{pass_}, the framework's kernels: A {', '.join(ka) or '—'} · B {', '.join(kb) or '—'}")
        for names, new in ((row.a_kernels, ka), (row.b_kernels, kb)):
            names += [n for n in new if n not in names]

    def points(self) -> list[DispatchPoint]:
        order = {name: i for i, name in enumerate((*NAMING, "library"))}
        return sorted(self.rows.values(), key=lambda d: (order.get(d.layer, 9), -len(d.primitives), d.display))

