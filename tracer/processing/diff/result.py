"""What a diff finds, as plain data: the split points of each layer, each side's
branches, the deciding code, and their JSON form (``dltrace diff --json``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, get_args

from tracer.processing.normalize import Identity
from tracer.trace import Node

#: The kinds of split; the last four are no decision of a framework, a library or an ISA
#: (tracer.processing.diff.context): they stay in a pair's diff, never in a dispatch table.
Classification = Literal["device dispatch", "library choice", "ISA-specific code", "compilation",
                         "allocation/transfer", "other",
                         "model context", "version difference", "stand-in implementation", "evidence shape"]
CLASSES: tuple[Classification, ...] = get_args(Classification)


@dataclass
class Branch:
    """One side's first differing frame at a split, and what its subtree reaches."""

    label: str
    kind: str
    identity: str
    file: str
    line: int
    library: str  # tag of the frame itself
    count: int  # calls (traced layers) or samples (sampled layers)
    share: float | None  # sampled layers: share of this side's samples
    other_share: float | None  # sampled layers: the same frame's share on the other side (below threshold)
    call_lines: list[int]  # lines of the split frame that called it
    nodes: int  # frames in its subtree, itself included
    libraries: list[str]  # library tags reached in the subtree
    isa: list[str]  # ISA tags reached in the subtree
    hot: list[str]  # the most counted leaf frames (the kernels, for native layers)
    p_value: float | None = None  # sampled layers, one side only: the chance the other side missed it
    # its identity (for replicas)
    ident: Identity | tuple[()] = field(default=(), repr=False, compare=False, metadata={"json": False})


@dataclass
class CodeLine:
    line: int
    text: str
    ran: str = ""  # "A", "B", "AB" (ran on both) or "" (did not run, or unknown)
    call: str = ""  # "A" / "B" / "AB": a call site of a differing child
    decision: bool = False  # the statement that chose the path
    gap_before: bool = False  # lines were left out before this one


@dataclass
class Fragment:
    """The deciding code. Python: the function's source around the deciding lines.
    Op/native/C: no source exists in the trace, so the names on each side."""

    kind: str  # "source" | "symbols"
    side: str  # "AB" (one source for both), "A" or "B" (the sources differ)
    function: str
    file: str = ""
    first_line: int = 0
    lines: list[CodeLine] = field(default_factory=list)
    decision_line: int | None = None
    a_names: list[str] = field(default_factory=list)
    b_names: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Split:
    layer: str
    frame: str  # label of the split frame
    kind: str
    file: str
    line: int
    depth: int
    path: list[str]  # labels from the root to the split frame, both included
    only_a: list[Branch]
    only_b: list[Branch]
    fragments: list[Fragment]
    classification: Classification
    reason: str
    children: list["Split"] = field(default_factory=list)  # splits further down, consequences of this one
    library: str = ""  # the library tag of the split frame itself
    # identities below the root, to the split frame
    ident_path: tuple[Identity, ...] = field(default=(), repr=False, compare=False, metadata={"json": False})


def walk_splits(splits: list[Split]) -> Iterator[Split]:
    """The splits and every split nested below them, without recursion (nesting can be
    deep); the order is not reading order (see :meth:`LayerDiff.all_splits`)."""
    stack = list(splits)
    while stack:
        s = stack.pop()
        yield s
        stack.extend(s.children)


@dataclass
class LayerDiff:
    layer: str
    sampled: bool
    threshold: float  # applies to sampled layers only
    alpha: float  # sampled layers: the significance a one-sided frame needs (ALPHA)
    samples_a: int
    samples_b: int
    nodes_a: int
    nodes_b: int
    shared: int  # aligned frames
    ignored_a: int  # frames under the threshold, or one-sided by chance (sampled layers)
    ignored_b: int
    splits: list[Split]  # first decisions; nested ones in Split.children
    #: sampled layers: splits set aside because an independent sampling did not show them
    unreplicated: int = 0
    #: sampled layers: splits set aside because the python or op layer shows the decision
    consequences: int = 0
    #: sampled layers: too few samples on a side for any difference to count (evidence.MIN_SAMPLES)
    underpowered: bool = False
    a_root: Node | None = field(default=None, repr=False, compare=False, metadata={"json": False})
    b_root: Node | None = field(default=None, repr=False, compare=False, metadata={"json": False})

    def all_splits(self) -> Iterator[tuple[int, Split]]:
        """(nesting level, split) in reading order, without recursion."""
        stack = [(0, s) for s in reversed(self.splits)]
        while stack:
            level, s = stack.pop()
            yield level, s
            stack.extend((level + 1, c) for c in reversed(s.children))


@dataclass
class DiffResult:
    a: dict[str, Any]  # what A is: framework, version, primitive, api, device, variant, shape, arch
    b: dict[str, Any]
    pass_: str
    phase: str
    threshold: float
    differs: dict[str, list[Any]]  # meta fields that differ: name -> [A's value, B's value]
    layers: list[LayerDiff]
    warnings: list[str] = field(default_factory=list)

    @property
    def split_count(self) -> int:
        return sum(1 for layer in self.layers for _ in layer.all_splits())

    def to_json(self) -> dict[str, Any]:
        """Plain types only (dicts, lists, str, numbers): what ``dltrace diff --json`` prints."""
        doc: dict[str, Any] = _plain(self)
        doc["pass"] = doc.pop("pass_")
        doc["split_count"] = self.split_count
        return doc


def _plain(obj: Any) -> Any:
    """dataclasses.asdict without recursion through nested splits (which can be deep),
    skipping fields marked ``json: False`` (the retained trees)."""
    if isinstance(obj, Split):
        return _splits_json([obj])[0]
    if dataclasses.is_dataclass(obj):
        return {f.name: (_splits_json(getattr(obj, f.name)) if f.name == "splits" else _plain(getattr(obj, f.name)))
                for f in dataclasses.fields(obj) if f.metadata.get("json", True)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_plain(v) for v in obj]
    return obj


def _splits_json(splits: list[Split]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack = [(s, out) for s in reversed(splits)]
    while stack:
        s, dest = stack.pop()
        doc = {f.name: _plain(getattr(s, f.name)) for f in dataclasses.fields(s)
               if f.name != "children" and f.metadata.get("json", True)}
        doc["children"] = []
        dest.append(doc)
        stack.extend((c, doc["children"]) for c in reversed(s.children))
    return out


