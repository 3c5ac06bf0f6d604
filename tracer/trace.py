"""The trace file: one versioned JSON format for every layer of every run.

Stdlib only: it is loaded inside framework environments (to write traces) and by
the tool (to read them). Frames are stored once in a table and the call trees
refer to them by index, which keeps files small and makes identity explicit.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import Any, Iterator, cast

from tracer.bounded import NotRegular, TooLarge, limit_from_env, read_maybe_gzip
from tracer.contract import PASSES, PHASES
from tracer.files import write_bytes
from tracer.trace_meta import RunStats, TraceMeta, parse_meta, parse_stats

FORMAT = "dltrace-trace"

#: The format's versions: (version, date, what it added). A field added by version N is
#: absent from every trace of an earlier version, and optional in later ones where it
#: does not apply (only sampled layers have replicas, only GPU traces an evidence
#: class...). Traces written before version 2 existed all say 1, whichever of these
#: fields they carry: the fields were added under "older traces have none" rules, which
#: the loader keeps, so every version-1 trace still loads. docs/trace-format.md lists
#: this history (tests/test_docs.py checks that it does).
HISTORY: tuple[tuple[int, str, str], ...] = (
    (1, "2026-11-21", "the format: meta, frames, runs with one tree per layer, sources"),
    (2, "2026-11-22", "runs[].replicas: a sampled layer's independent samplings"),
    (3, "2026-11-24", "meta.evidence: the evidence class of a GPU trace"),
    (4, "2026-11-24", "meta.standin: what reached torch's stand-in device"),
    (5, "2026-11-24", "meta.recorded_by: the fleet worker that recorded the trace"),
    (6, "2026-11-24", "meta.collector: which Python-level collector recorded the python layer"),
    (7, "2026-11-26", "meta.model: a model's training step (the network, its level, the framework's defaults)"),
    (8, "2026-11-28", "meta.api \"user\" and meta.model.workload: a user's own workload (its file's name, function)"),
    (9, "2026-11-28", "meta.standin of TensorFlow's and JAX's stand-ins: its unit, TensorFlow's registrations (each "
                      "op's element types)"),
    (10, "2026-12-01", "meta.door and meta.compiled: a torch step run through the compiled door (the ops of the graphs "
                       "torch.compile's backend is handed, their input variations, the graph breaks)"),
)
VERSION = HISTORY[-1][0]

#: Frame kinds. "root" is the synthetic node a tree hangs from (the probe step);
#: "python" is framework Python code; "c" a builtin/extension/ctypes function it
#: hands off to; "ext" another library's Python code it calls directly (numpy...);
#: "op" the framework's own op-level records; "library" a call a vendor library
#: reported (module and lib: the library; name: what ran and how); "native" a
#: native stack frame.
KINDS = ("root", "python", "c", "ext", "op", "library", "native")


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
        if self.kind in ("root", "op", "library"):
            return self.name
        return f"{self.module}.{self.name}" if self.module else self.name


@dataclass(slots=True)
class Node:
    """One frame in one calling context, merged over repeated calls. Slotted: a
    survey makes millions of them, and the C collector stores a new node's fields
    straight into its slots (tracer/collect/ctrace/)."""

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
    warm = steady state), with one call tree per layer (python, op, library, native).
    A sampled layer also keeps its independent samplings (``replicas``: the native
    layer's two halves; the layer's tree is their sum), so that a difference can be
    checked against chance."""

    pass_: str
    phase: str
    layers: dict[str, Node]
    stats: dict[str, Any] = field(default_factory=dict)
    replicas: dict[str, list[Node]] = field(default_factory=dict)

    @cached_property
    def info(self) -> RunStats:
        """The stats, typed (tracer.trace_meta): what the processing stages read. The
        collectors write ``stats`` while they record; nothing reads ``info`` before."""
        return parse_stats(self.stats)


@dataclass
class Trace:
    #: What the trace says of itself, as written: read it through ``info``, change it
    #: through ``set_meta``.
    meta: dict[str, Any]
    runs: list[Run]
    #: Source of Python functions, keyed by (file, first line), so that the diff and
    #: the report can show the deciding code without the framework installed.
    sources: dict[tuple[str, int], list[str]] = field(default_factory=dict)

    @cached_property
    def info(self) -> TraceMeta:
        """The meta, typed and checked (tracer.trace_meta): what every stage reads."""
        return parse_meta(self.meta)

    def set_meta(self, key: str, value: Any) -> None:
        """Change one meta field; ``info`` is read again from the new meta."""
        self.meta[key] = value
        self.__dict__.pop("info", None)

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


def op_namespace(name: str) -> str:
    """``aten`` of ``aten::add_``; "" for an op name without one (a Python-level record)."""
    return name.split("::", 1)[0] if "::" in name else ""


# ----------------------------------------------------------------------------- save


def to_json(trace: Trace) -> dict[str, Any]:
    frames: list[Frame] = []
    index: dict[Frame, int] = {}
    # Looked up by identity first: a Frame's hash is generated Python code, and the
    # nodes of one function share its Frame object (they live as long as the trace).
    by_id: dict[int, int] = {}

    def fid(frame: Frame) -> int:
        i = by_id.get(id(frame))
        if i is None:
            i = index.get(frame)
            if i is None:
                i = index[frame] = len(frames)
                frames.append(frame)
            by_id[id(frame)] = i
        return i

    def encode(root: Node) -> list[list[Any]]:
        # Flat pre-order list, each node naming its parent's index: no recursion to
        # encode or decode, however deep the tree.
        flat: list[list[Any]] = []
        stack: list[tuple[Node, int]] = [(root, -1)]
        while stack:
            node, parent = stack.pop()
            me = len(flat)
            flat.append([fid(node.frame), node.count, node.time_ns, sorted(node.call_lines), sorted(node.lines),
                         parent])
            stack.extend(zip(reversed(node.children), repeat(me)))
        return flat

    runs = []
    for r in trace.runs:
        doc = {"pass": r.pass_, "phase": r.phase, "layers": {name: encode(tree) for name, tree in r.layers.items()},
               "stats": r.stats}
        if r.replicas:
            doc["replicas"] = {name: [encode(tree) for tree in trees] for name, trees in r.replicas.items()}
        runs.append(doc)
    sources = [[f, line, src] for (f, line), src in sorted(trace.sources.items())]
    return {
        "format": FORMAT,
        "version": VERSION,
        "meta": trace.meta,
        "frames": [[f.kind, f.module, f.name, f.file, f.line, f.lib] for f in frames],
        "runs": runs,
        "sources": sources,
    }


def save(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write compact JSON, gzip-compressed when the name ends in .gz. Written to a
    temporary name and renamed, so a reader never sees half a trace, and a failed
    write (a full disk) leaves nothing behind."""
    path = os.fspath(path)
    # The cyclic GC is off while the lists are made (as timeit does): encoding a trace
    # of 70,000 nodes made it walk every node made so far, again and again (0.36 s of
    # encoding against 0.13 s without).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        data = json.dumps(to_json(trace), separators=(",", ":")).encode()
    finally:
        if gc_was_enabled:
            gc.enable()
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    write_bytes(path, data)


# ----------------------------------------------------------------------------- load


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _wrong(what: str, value: Any, want: str) -> ValueError:
    got = type(value).__name__
    return ValueError(f"{what} must be {want}, not {got}")


def _frames(rows: Any) -> list[Frame]:
    if not isinstance(rows, list):
        raise _wrong("frames", rows, "a list")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 6:
            raise ValueError(f"frame {i} is not a [kind, module, name, file, line, lib] row")
        kind, module, name, file, line, lib = row
        if kind not in KINDS:
            raise ValueError(f"frame {i} has an unknown kind {str(kind)[:40]!r}")
        if not (module.__class__ is str and name.__class__ is str and file.__class__ is str and lib.__class__ is str):
            raise ValueError(f"frame {i}: module, name, file and lib must be strings")
        if line.__class__ is not int:
            raise _wrong(f"frame {i}'s line", line, "an integer")
        out.append(Frame(kind, module, name, file, line, lib))
    return out


def _lines_ok(values: Any) -> bool:
    return values.__class__ is list and all(v.__class__ is int for v in values)


def _decode(flat: Any, frames: list[Frame]) -> Node:
    """A flat pre-order tree back into Nodes; every field is checked, since a wrong
    type here would surface as a traceback in some later stage."""
    if flat.__class__ is not list or not flat:
        raise ValueError("empty tree")
    nodes: list[Node] = []
    append = nodes.append
    n_frames = len(frames)
    for row in flat:
        if row.__class__ is not list or len(row) != 6:
            raise ValueError(f"tree node {len(nodes)} is not a [frame, count, time, call_lines, lines, parent] row")
        f, count, t, call_lines, lines, parent = row
        if f.__class__ is not int or not 0 <= f < n_frames:
            raise ValueError(f"tree node {len(nodes)} names frame {str(f)[:20]}, not one of the {n_frames} frames")
        if count.__class__ is not int or t.__class__ is not int or count < 0 or t < 0:
            raise ValueError(f"tree node {len(nodes)}: count and time must be non-negative integers")
        if (call_lines and not _lines_ok(call_lines)) or (lines and not _lines_ok(lines)) \
                or call_lines.__class__ is not list or lines.__class__ is not list:
            raise ValueError(f"tree node {len(nodes)}: line lists must be lists of integers")
        node = Node(frames[f], count, t, call_lines, lines)
        if parent.__class__ is not int:
            raise ValueError(f"tree node {len(nodes)}: parent must be an index")
        if nodes:
            if not 0 <= parent < len(nodes):
                raise ValueError(f"tree node {len(nodes)}: parent {parent} is not an earlier node")
            nodes[parent].children.append(node)
        elif parent != -1:
            raise ValueError("the first node of a tree must be its root (parent -1)")
        append(node)
    return nodes[0]


def _runs(rows: Any, frames: list[Frame]) -> list[Run]:
    if not isinstance(rows, list):
        raise _wrong("runs", rows, "a list")
    runs = []
    for r in rows:
        if not isinstance(r, dict):
            raise _wrong("a run", r, "an object")
        if r.get("pass") not in PASSES or r.get("phase") not in PHASES:
            raise ValueError(f"a run's pass and phase must be one of {'/'.join(PASSES)} and {'/'.join(PHASES)}")
        layers = r.get("layers")
        if not isinstance(layers, dict):
            raise _wrong("a run's layers", layers, "an object")
        replicas = r.get("replicas", {})
        if not isinstance(replicas, dict) or not all(isinstance(v, list) for v in replicas.values()):
            raise ValueError("a run's replicas must map layer names to lists of trees")
        stats = r.get("stats", {})
        checked = parse_stats(stats)
        run = Run(r["pass"], r["phase"], {str(name): _decode(t, frames) for name, t in layers.items()}, dict(stats),
                  {str(name): [_decode(t, frames) for t in trees] for name, trees in replicas.items()})
        run.__dict__["info"] = checked  # parsed once, here, where a wrong type is the file's error
        runs.append(run)
    return runs


def _sources(rows: Any) -> dict[tuple[str, int], list[str]]:
    if not isinstance(rows, list):
        raise _wrong("sources", rows, "a list")
    out = {}
    for row in rows:
        if not isinstance(row, list) or len(row) != 3:
            raise ValueError("a source entry is not a [file, line, lines] row")
        f, line, src = row
        if f.__class__ is not str or line.__class__ is not int or not isinstance(src, list) \
                or not all(x.__class__ is str for x in src):
            raise ValueError("a source entry must be [file, first line, list of lines]")
        out[(f, line)] = src
    return out


def _without_surrogates(doc: Any) -> Any:
    """Lone surrogates (``\\ud800`` in the JSON) are not text: no terminal or HTML
    file can encode them. Each becomes U+FFFD, iteratively (documents can be deep)."""
    def fix(v: Any) -> Any:
        return _SURROGATE.sub("\ufffd", v) if v.__class__ is str else v

    doc = fix(doc)
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k in list(item):
                v = item.pop(k)
                item[fix(k)] = fixed = fix(v)
                if isinstance(fixed, (dict, list)):
                    stack.append(fixed)
        elif isinstance(item, list):
            for i, v in enumerate(item):
                item[i] = fixed = fix(v)
                if isinstance(fixed, (dict, list)):
                    stack.append(fixed)
    return doc


def from_json(doc: Any, where: str = "trace") -> Trace:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceFormatError(f"{where}: not a dltrace trace (no '\"format\": \"{FORMAT}\"' header)")
    version = doc.get("version")
    if type(version) is not int or version > VERSION or version < 1:  # true is no version (bool is an int)
        raise TraceFormatError(
            f"{where}: trace format version {str(version)[:20]!r} is not supported (this dltrace reads 1..{VERSION})"
        )
    try:
        meta = doc.get("meta")
        info = parse_meta(meta)
        frames = _frames(doc.get("frames"))
        runs = _runs(doc.get("runs"), frames)
        sources = _sources(doc.get("sources", []))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise TraceFormatError(f"{where}: malformed trace ({exc})"[:500]) from None
    trace = Trace(cast("dict[str, Any]", meta), runs, sources)  # parse_meta raised unless meta is a dict
    trace.__dict__["info"] = info  # parsed once, here, where a wrong type is the file's error
    return trace


#: The most a trace may expand to (``DLTRACE_MAX_TRACE_MB`` MiB to change it). The
#: survey's largest traces are a few MB, the 1M-frame benchmark trace 27 MiB of JSON
#: (700 MB loaded: loading costs 10 to 30 times the JSON), so a decompression bomb
#: costs 256 MiB, not what it claims, and loading stays within a few GB.
MAX_TRACE_MIB = 256


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a trace written by :func:`save`; any problem is a one-line TraceFormatError.
    Only regular files are read (a named pipe would block, ``/dev/zero`` never end), and
    what they expand to and the memory loading takes are bounded."""
    path = os.fspath(path)
    limit = limit_from_env("DLTRACE_MAX_TRACE_MB", MAX_TRACE_MIB)
    try:
        _, data = read_maybe_gzip(path, limit)
        doc = json.loads(data)
        if _ESCAPED_SURROGATE.search(data):
            doc = _without_surrogates(doc)
        return from_json(doc, where=path)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (NotRegular, TooLarge) as exc:
        hint = " (set DLTRACE_MAX_TRACE_MB to allow more)" if isinstance(exc, TooLarge) else ""
        raise TraceFormatError(f"{path}: not read: {exc}{hint}") from None
    except MemoryError:
        raise TraceFormatError(f"{path}: too large to load in the memory available") from None
    except RecursionError:
        raise TraceFormatError(f"{path}: not a trace (JSON nested too deeply to read)") from None
    except (EOFError, ValueError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: corrupt or truncated trace ({type(exc).__name__}: {exc})"[:500]) from None
