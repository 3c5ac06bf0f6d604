"""The kernel that computed a CPU cell, and the op it ran under.

A porting engineer reads a cell as "on the CPU this op ran this kernel of this
library". So a cell names a kernel only where the evidence shows code that
computed, by rules kept as data (libraries.yaml ``computes`` and ``call_ops``,
frameworks.yaml ``knowledge.computes``, ``op_frames`` and ``compiled_ops``), in
this order of evidence:

1. ``library report``: the first call a vendor library reported it ran (oneDNN's
   or MKL's verbose log, every call; layout reorders left out);
2. ``compiled program``: the instruction of the XLA program the step ran that did
   the primitive's work (a library call such as ``dot`` first, then a fusion holding
   the primitive's own work: a gather, a reduce-window; then the largest), named
   with what it fused;
3. ``sampled``: the native frame that computes, innermost on each sampled stack,
   most sampled (a vendor library's first). A stack whose leaf is a helper (an
   allocator, a lock, eager bookkeeping) counts for the computing frame above it,
   and a stack with none counts for nothing: the most sampled leaf alone never names
   a kernel.

Where none of these names a kernel the cell says so. The op beside the kernel is
the op under which it ran: the op frame above it on its stacks, else the reached
op whose name holds the library call's kind or shares the kernel's words, else the
only op reached; never just the first op of the pass. Pure.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from tracer.knowledge import Knowledge
from tracer.processing.kernel_names import implausible, not_a_kernel
from tracer.processing.tags import _bare, is_incidental, is_system_lib, is_unnamed, library_of, library_order
from tracer.processing.tree import total_samples
from tracer.trace import Frame, Node, Trace

#: The evidence a kernel is named from, strongest first.
LIBRARY_REPORT, COMPILED, SAMPLED = "library report", "compiled program", "sampled"
#: A computing frame in fewer samples than this, or this share of the pass's, is not named.
MIN_SAMPLES = 2
MIN_SHARE = 0.02
#: An XLA instruction that moves or relabels data and computes nothing.
_XLA_LAYOUT = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy", "reshape",
                         "transpose", "broadcast", "slice", "concatenate", "iota", "convert", "pad",
                         "dynamic-slice", "dynamic-update-slice", "copy-start", "copy-done"})
#: XLA instructions that are a primitive's own work where they appear (a gather is the
#: embedding, a reduce-window the pooling), before the element-wise work fused around them.
_XLA_STRUCTURAL = frozenset({"gather", "scatter", "reduce", "reduce-window", "select-and-scatter", "sort"})
#: XLA instructions that hand the work to a library or a runtime routine.
_XLA_CALLS = ("dot", "convolution", "custom-call", "fft", "fusion(kCustom")


@dataclass(frozen=True)
class NamedKernel:
    """What a CPU cell names: the op, the kernel ("" where none computed in the
    evidence), its library, the evidence it is named from, and why none is named."""

    op: str
    kernel: str
    library: str
    evidence: str
    why_none: str = ""


def _norm(name: str) -> str:
    """An op or call name compared by its letters: no namespace, case or underscores."""
    return re.sub(r"[^a-z0-9]", "", name.rsplit("::", 1)[-1].lower())


#: Words every kernel or op name may hold that say nothing of what it computes.
_NO_WORDS = frozenset({"native", "anonymous", "namespace", "internal", "impl", "cpu", "kernel", "eigen", "tensor",
                       "evaluator", "run", "operator", "const", "float", "long", "mxnet", "mshadow", "tensorflow",
                       "aten", "forward", "compute", "op", "jit", "avx", "fusion", "loop", "custom", "call",
                       "lambda", "func", "function", "functor", "void"})


def _words(name: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name) if len(w) > 2} - _NO_WORDS


def computes(frame: Frame, k: Knowledge) -> bool:
    """A native frame a cell may name as the kernel: one the rules say computes, and
    none that names a helper (tracer.processing.kernel_names), system code, a frame that
    only says where a thread was, or a name that cannot be what ran."""
    if frame.kind != "native" or is_unnamed(frame):
        return False
    bare = _bare(frame.name).strip()
    rules = [r for r in (k.libraries.computes, k.computes) if r is not None]
    if not any(r.search(bare) or r.search(frame.name) for r in rules):
        return False
    return not (not_a_kernel(frame.name, k) or implausible(frame.name, k) or is_incidental(frame, k)
                or is_system_lib(library_of(frame, k), k))


def _op_of_frames(chain: list[Frame], ops: list[str], k: Knowledge) -> str:
    """The reached op an op frame on this stack names (the nearest above the kernel)."""
    by_norm = {_norm(o): o for o in ops}
    named = set(ops)
    seen: list[str] = []
    for f in reversed(chain):
        if f.kind == "python" and f.name in named:  # a pure-Python framework's op (Chainer's Sum.forward)
            return f.name
        for text in (_bare(f.name), f.name):  # an op's kernel class may be a template argument
            for pattern in k.op_frames:
                for m in pattern.finditer(text):
                    hit = _same_op(m.group(1), by_norm)
                    if hit:
                        return hit
                    seen.append(m.group(1))
    # a kernel class named with the op's words abbreviated (SparseSoftmaxXentWithLogitsOp):
    # the reached op sharing most words with the nearest, two at least
    for name in seen:
        mine = _words(name)
        best = max(ops, key=lambda o: len(mine & _words(o)), default="")
        if best and len(mine & _words(best)) >= 2:
            return best
    return ""


def _same_op(name: str, by_norm: dict[str, str]) -> str:
    """The reached op ``name`` names: the same letters, or those and a version (AddV2 for add)."""
    mine = _norm(name)
    if mine in by_norm:
        return by_norm[mine]
    return next((o for n, o in by_norm.items() if re.fullmatch(re.escape(mine) + r"v\d+", n)), "")


def _op_by_words(kernel: str, ops: list[str], family: tuple[str, ...] = ()) -> str:
    """The reached op whose name holds one of the call's ``family`` words, else the one
    sharing most words with the kernel's name, else the only op reached."""
    for word in family:
        hit = next((o for o in ops if word in _norm(o)), "")
        if hit:
            return hit
    mine = _words(kernel)
    scored = sorted(((len(mine & _words(o)), -i, o) for i, o in enumerate(ops)), reverse=True)
    if scored and scored[0][0] > 0:
        return scored[0][2]
    return ops[0] if len(set(ops)) == 1 else ""


def _from_library(calls: list[Node], ops: list[str], k: Knowledge) -> NamedKernel | None:
    calls = [n for n in calls if not n.frame.name.startswith("reorder")]
    if not calls:
        return None
    first = calls[0].frame
    kind = first.name.split(" ", 1)[0].lower()
    family = next((words for pattern, words in k.libraries.call_ops if pattern.fullmatch(kind)), ())
    return NamedKernel(_op_by_words(first.name, ops, family), first.name, library_of(first, k), LIBRARY_REPORT)


def _xla_program(op_root: Node) -> Node | None:
    return next((n for _, n in op_root.walk() if n.frame.module == "xla" and n.frame.name.startswith("XLA:cpu")), None)


def _instruction_label(node: Node) -> tuple[str, list[str]]:
    """A compiled instruction's name and what it computes (a fusion's computing instructions)."""
    inner = list(dict.fromkeys(c.frame.name for c in node.children if c.frame.name not in _XLA_LAYOUT))
    # the library call or the primitive's own work first, then what is fused around it
    inner.sort(key=lambda d: not (d.startswith(_XLA_CALLS) or d in _XLA_STRUCTURAL))
    return node.frame.name, inner or [node.frame.name]


def _from_compiled(op_root: Node, ops: list[str], k: Knowledge) -> NamedKernel | None:
    program = _xla_program(op_root)
    if program is None:
        return None
    found = []
    for i, node in enumerate(program.children):
        name, does = _instruction_label(node)
        if name in _XLA_LAYOUT or all(d in _XLA_LAYOUT for d in does):
            continue
        calls = name.startswith(_XLA_CALLS) or any(d.startswith(_XLA_CALLS) for d in does)
        structural = any(d in _XLA_STRUCTURAL for d in does)
        found.append((not calls, not structural, -len(does), i, name, does))
    if not found:
        return None
    *_, name, does = min(found)
    kernel = name if does == [name] else f"{name}: {', '.join(does[:4])}{' …' if len(does) > 4 else ''}"
    # a fusion ran the ops it fused: each one its instructions come from, in order
    fused = [next((o for o in ops if re.fullmatch(k.compiled_ops.get(i) or re.escape(i), o)), "") for i in does]
    named = list(dict.fromkeys(o for o in fused if o))
    op = " + ".join(named[:3]) + (" …" if len(named) > 3 else "")
    return NamedKernel(op or _op_by_words(kernel, ops), kernel, "XLA", COMPILED)


def _stacks(native: Node) -> Iterator[tuple[Node, list[Frame]]]:
    """Each sampled leaf with the frames from the root down to it. The list is one path
    kept as the walk goes (a chain thousands deep is not copied per frame): read it
    before the next leaf."""
    path: list[Frame] = []
    stack: list[tuple[Node, int]] = [(native, 0)]
    while stack:
        node, depth = stack.pop()
        del path[depth:]
        path.append(node.frame)
        if not node.children:
            yield node, path
        stack.extend((c, depth + 1) for c in reversed(node.children))


@dataclass
class Attributed:
    """One computing frame's samples: its ``own`` (stacks ending in it) and those of
    helpers sampled below it (``below``: an allocator, a lock), with the op each ran under."""

    frame: Frame
    own: int = 0
    below: int = 0
    ops: Counter[str] = field(default_factory=Counter)


def attribute(natives: list[Node], k: Knowledge, ops: Sequence[str] = ()) -> tuple[list[Attributed], int]:
    """Each sampled stack given to its innermost frame that computes (:func:`computes`),
    with the total samples. A stack ending below that frame (in a helper, or in unnamed
    code: a stripped local function of the kernel's, or one it called) counts as below
    it; a stack reaching no computing frame is given to none."""
    found: dict[str, Attributed] = {}
    total = 0
    for native in natives:
        total += total_samples(native)
        for leaf, chain in _stacks(native):
            at = next((i for i in range(len(chain) - 1, -1, -1) if computes(chain[i], k)), None)
            if at is None:
                continue
            entry = found.setdefault(chain[at].label, Attributed(chain[at]))
            if at == len(chain) - 1:
                entry.own += leaf.count
            else:
                entry.below += leaf.count
            op = _op_of_frames(chain[:at], list(ops), k) if ops else ""
            if op:
                entry.ops[op] += leaf.count
    return list(found.values()), total


def ranked(found: list[Attributed], floor: float, k: Knowledge) -> list[Attributed]:
    """The computing frames in at least ``floor`` samples, most telling first: frames
    sampled computing themselves before those only a helper below them names (a caller
    whose allocations were sampled is no hotter a kernel than the kernel it called), a
    vendor library's before the framework's, then by samples."""
    own = [a for a in found if a.own >= floor]
    pool = own or [a for a in found if a.own + a.below >= floor]
    return sorted(pool, key=lambda a: (library_order(library_of(a.frame, k), k)[0], -(a.own + a.below),
                                       a.frame.label))


def _from_samples(natives: list[Node], ops: list[str], k: Knowledge) -> NamedKernel | None:
    found, total = attribute(natives, k, ops)
    best = next(iter(ranked(found, max(MIN_SAMPLES, MIN_SHARE * total), k)), None)
    if best is None:
        return None
    f = best.frame
    op = best.ops.most_common(1)[0][0] if best.ops else _op_by_words(f.name, ops)
    return NamedKernel(op, f.name, library_of(f, k), SAMPLED)


def named_kernel(traces: list[Trace], pass_: str, ops: list[str], k: Knowledge) -> NamedKernel:
    """The kernel a CPU cell names for ``pass_`` from ``traces`` (one case's CPU traces,
    the one whose op and library layers speak for the cell first; the others add
    their native samples, which a larger shape has), with ``ops`` the ops the pass
    reached, in order."""
    for t in traces:
        run = t.run(pass_, "warm")
        if run is not None and "library" in run.layers:
            found = _from_library(list(run.layers["library"].children), ops, k)
            if found and not found.op and "op" in run.layers:
                # a library call no op's name tells (XLA's convolution handed to a gemm): the
                # compiled program's call instruction's op
                compiled = _from_compiled(run.layers["op"], ops, k)
                found = replace(found, op=compiled.op if compiled else "")
            if found:
                return found
    for t in traces:
        run = t.run(pass_, "warm")
        if run is not None and "op" in run.layers:
            found = _from_compiled(run.layers["op"], ops, k)
            if found:
                return found
    natives = [n for t in traces if (r := t.run(pass_, "warm")) is not None and (n := r.layers.get("native"))]
    found = _from_samples(natives, ops, k) if natives else None
    if found:
        return found
    why = ("no library reported a call, and no sampled stack reached code that computes" if natives else
           "no library reported a call, and no native stacks were sampled")
    return NamedKernel("", "", "", "", why)
