"""The trace file: one versioned JSON format for every layer of every run.

Stdlib only: it is loaded inside framework environments (to write traces) and by
the tool (to read them). Frames are stored once in a table and the call trees
refer to them by index, which keeps files small and makes identity explicit.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

FORMAT = "dltrace-trace"
VERSION = 1

#: Frame kinds. "root" is the synthetic node a tree hangs from (the probe step);
#: "python" is framework Python code; "c" a builtin/extension/ctypes function it
#: hands off to; "ext" another library's Python code it calls directly (numpy...);
#: "op" the framework's own op-level records; "native" a native stack frame.
KINDS = ("root", "python", "c", "ext", "op", "native")


class TraceFormatError(Exception):
    """A file that is not a readable dltrace trace (corrupt, truncated, foreign, too new)."""


@dataclass(frozen=True)
class Frame:
    """A function's identity. ``kind, module, name`` identify it; ``file``, ``line``
    and ``lib`` are evidence that may differ between machines."""

    kind: str
    module: str
    name: str
    file: str = ""
    line: int = 0
    lib: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.module, self.name)

    @property
    def label(self) -> str:
        if self.kind in ("root", "op"):
            return self.name
        return f"{self.module}.{self.name}" if self.module else self.name


@dataclass
class Node:
    """One frame in one calling context, merged over repeated calls."""

    frame: Frame
    count: int = 0
    time_ns: int = 0
    call_lines: list[int] = field(default_factory=list)  # lines of the parent that called it
    lines: list[int] = field(default_factory=list)  # lines of this function that ran
    children: list["Node"] = field(default_factory=list)

    def walk(self, depth: int = 0) -> Iterator[tuple[int, "Node"]]:
        """Depth-first (depth, node) pairs, without recursion (traces can be deep)."""
        stack = [(depth, self)]
        while stack:
            d, node = stack.pop()
            yield d, node
            stack.extend((d + 1, c) for c in reversed(node.children))

    def size(self) -> int:
        return sum(1 for _ in self.walk())


@dataclass
class Run:
    """One traced step: a pass (forward/backward) in a phase (cold = first call,
    warm = steady state), with one call tree per layer (python, op, native)."""

    pass_: str
    phase: str
    layers: dict[str, Node]
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trace:
    meta: dict[str, Any]
    runs: list[Run]
    #: Source of Python functions, keyed by (file, first line), so that the diff and
    #: the report can show the deciding code without the framework installed.
    sources: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    def run(self, pass_: str, phase: str = "warm") -> Run | None:
        for r in self.runs:
            if r.pass_ == pass_ and r.phase == phase:
                return r
        return None

    def layer(self, pass_: str, layer: str = "python", phase: str = "warm") -> Node | None:
        r = self.run(pass_, phase)
        return r.layers.get(layer) if r else None

    def source_of(self, frame: Frame) -> list[str] | None:
        return self.sources.get((frame.file, frame.line))


# ----------------------------------------------------------------------------- save


def to_json(trace: Trace) -> dict[str, Any]:
    frames: list[Frame] = []
    index: dict[Frame, int] = {}

    def fid(frame: Frame) -> int:
        i = index.get(frame)
        if i is None:
            i = index[frame] = len(frames)
            frames.append(frame)
        return i

    def encode(root: Node) -> list:
        # Flat pre-order list, each node naming its parent's index: no recursion to
        # encode or decode, however deep the tree.
        flat: list = []
        stack: list[tuple[Node, int]] = [(root, -1)]
        while stack:
            node, parent = stack.pop()
            me = len(flat)
            flat.append([fid(node.frame), node.count, node.time_ns, sorted(node.call_lines), sorted(node.lines), parent])
            stack.extend((c, me) for c in reversed(node.children))
        return flat

    runs = [
        {
            "pass": r.pass_,
            "phase": r.phase,
            "layers": {name: encode(tree) for name, tree in r.layers.items()},
            "stats": r.stats,
        }
        for r in trace.runs
    ]
    sources = [[f, line, src] for (f, line), src in sorted(trace.sources.items())]
    return {
        "format": FORMAT,
        "version": VERSION,
        "meta": trace.meta,
        "frames": [[f.kind, f.module, f.name, f.file, f.line, f.lib] for f in frames],
        "runs": runs,
        "sources": sources,
    }


def save(trace: Trace, path: str | os.PathLike) -> None:
    """Write compact JSON, gzip-compressed when the name ends in .gz. Written to a
    temporary name and renamed, so a reader never sees half a trace."""
    path = os.fspath(path)
    data = json.dumps(to_json(trace), separators=(",", ":")).encode()
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- load


def from_json(doc: Any, where: str = "trace") -> Trace:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceFormatError(f"{where}: not a dltrace trace (no '\"format\": \"{FORMAT}\"' header)")
    version = doc.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise TraceFormatError(
            f"{where}: trace format version {version!r} is not supported (this dltrace reads 1..{VERSION})"
        )
    try:
        frames = [Frame(str(k), str(m), str(n), str(f), int(l), str(lib)) for k, m, n, f, l, lib in doc["frames"]]

        def decode(flat: list) -> Node:
            nodes: list[Node] = []
            for f, count, t, call_lines, lines, parent in flat:
                node = Node(frames[f], count, t, call_lines, lines)
                if parent >= 0:
                    nodes[parent].children.append(node)
                elif nodes:
                    raise ValueError("two roots in one tree")
                nodes.append(node)
            if not nodes:
                raise ValueError("empty tree")
            return nodes[0]

        runs = [
            Run(r["pass"], r["phase"], {name: decode(t) for name, t in r["layers"].items()}, dict(r.get("stats", {})))
            for r in doc["runs"]
        ]
        sources = {(str(f), int(line)): list(src) for f, line, src in doc.get("sources", [])}
        meta = doc["meta"]
        if not isinstance(meta, dict):
            raise TypeError("meta is not an object")
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise TraceFormatError(f"{where}: malformed trace ({type(exc).__name__}: {exc})") from None
    return Trace(meta, runs, sources)


def load(path: str | os.PathLike) -> Trace:
    """Read a trace written by :func:`save`; any problem is a one-line TraceFormatError."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = json.loads(data)
    except (OSError, EOFError, ValueError) as exc:
        raise TraceFormatError(f"{path}: corrupt or truncated trace ({type(exc).__name__}: {exc})") from None
    return from_json(doc, where=path)
