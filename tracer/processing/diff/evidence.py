"""Which of a sampled layer's splits stand as evidence of a decision.

A sampled split has passed the threshold and the family's significance test
(tracer.processing.sampling) on the summed samples. Two more checks before it is
reported, both because chance and correlated samples (py-spy samples a loop that
repeats the same step) can still make a difference out of nothing:

* **Replication**: each pass is sampled in independent windows (the layer's
  replicas). A one-sided frame must be present on its side, and absent on the
  other, in every window; a split none of whose frames replicate is set aside.
* **The deterministic layers first**: where the python or op layer of the same
  pass shows a split, the decision is named there, and the sampled layer's
  differences are its consequences (counted, not listed). Where they show none, a
  sampled split stands only if, below the split frame, each side reaches vendor
  libraries or kernels (vendor or JIT code, in at least the threshold's share)
  that the other reaches there less than chance allows (the same binomial test):
  a decision replaces one kernel by another. (Which leaf of a library's code a
  sample lands in is itself sampled: oneDNN's ``dnnl_memory_set_data_handle_v2``
  at 2% in one process and 1% in the other, or Eigen's block copy against its
  block evaluation under the same executor, is no kernel the other lacks; both
  were measured on pairs of identical configurations.) Other glue
  above the same kernels decides nothing, nor does the framework's runtime
  bookkeeping (a callback, a cache), nor a kernel one process's samples caught
  on its Python thread and the other's did not (a BLAS that ran on its own worker
  threads there). Measured on A/A pairs: chainer's ``tensordot`` reached
  OpenBLAS in 16 of 91 samples in one process and in none of 53 in the other;
  TensorFlow's ``RunCallbacks`` showed in 8% of one side's samples only.
* **A library that reports speaks for itself**: oneDNN and MKL say what they ran
  in the library layer; where that layer shows no split, a sampled split inside
  their own code, or whose one-sided frames are all their code, is sampling detail,
  and so are the kernels of theirs that one side's samples reached below a split
  (measured on torch A/A pairs: oneDNN's backward-weights lambda reached a JIT
  kernel named ``jit_t`` in one process only; oneDNN's backward-data JIT kernel hung
  straight under the Python frame in 27% of one process's samples, where its
  unwinding stopped, and under oneDNN's own frames in the other's).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from tracer.processing.diff.result import Branch, LayerDiff, Split
from tracer.processing.normalize import Identity
from tracer.knowledge import Knowledge
from tracer.processing.tags import JIT, MKL, ONEDNN, is_gpu_lib, is_jit, is_vendor_lib, library_of
from tracer.processing.sampling import ALPHA, miss_chance
from tracer.processing.tree import children_groups, total_samples
from tracer.trace import Node

#: Libraries that report every call they run (the library layer): they speak for themselves.
REPORTING_LIBS = frozenset({ONEDNN, MKL})

#: The layers whose splits name the decision (every call is recorded there).
NAMING_LAYERS = ("python", "op")
#: Samples each side needs before a sampled layer may decide anything: with fewer, a
#: few misread stacks weigh like a kernel (an A/A pair with 28 samples on one side
#: showed TensorFlow's whole eager entry chain below an Eigen executor in 10 of them).
MIN_SAMPLES = 40


def _at(root: Node, path: tuple[Identity, ...], k: Knowledge) -> list[Node]:
    """The nodes of a tree at the calling context ``path`` (identities below the root);
    none when the tree does not have it."""
    group = [root]
    for step in path:
        found = children_groups(group, k).get(step)
        if not found:
            return []
        group = found
    return group


def _present(root: Node, path: tuple[Identity, ...], ident: Identity | tuple[()], threshold: float,
             k: Knowledge) -> bool:
    """Whether the frame ``ident`` is under the calling context ``path`` of a sampled
    tree in at least ``threshold`` of its samples."""
    group = _at(root, path, k)
    if not group:
        return False
    kids = children_groups(group, k).get(ident) if ident else None
    if not kids:
        return False
    return sum(n.count for n in kids) >= threshold * (total_samples(root) or 1)


def _filter(splits: list[Split], keep: Callable[[Split, Branch, str], bool]) -> tuple[list[Split], int]:
    """The splits with the branches ``keep`` accepts; a split left with none is dropped
    and its nested splits take its place. Returns the splits and how many were dropped."""
    out: list[Split] = []
    dropped = 0
    for s in splits:
        children, n = _filter(s.children, keep)
        dropped += n
        s.only_a = [b for b in s.only_a if keep(s, b, "A")]
        s.only_b = [b for b in s.only_b if keep(s, b, "B")]
        s.children = children
        if s.only_a or s.only_b:
            out.append(s)
        else:
            dropped += 1
            out.extend(children)
    return out, dropped


def replicated(layer: LayerDiff, replicas_a: list[Node], replicas_b: list[Node], k: Knowledge) -> None:
    """Keep the branches that every pair of independent samplings shows (see module doc)."""
    pairs = list(zip(replicas_a, replicas_b))

    def keep(split: Split, branch: Branch, side: str) -> bool:
        return all(_present(mine, split.ident_path, branch.ident, layer.threshold, k)
                   and not _present(theirs, split.ident_path, branch.ident, layer.threshold, k)
                   for mine, theirs in ((a, b) if side == "A" else (b, a) for a, b in pairs))

    layer.splits, layer.unreplicated = _filter(layer.splits, keep)


def _kernels_under(root: Node | None, path: tuple[Identity, ...], silent: frozenset[str],
                   k: Knowledge) -> Counter[tuple[str, str]]:
    """The vendor libraries (and JIT code) reached under the calling context ``path``
    of a sampled tree, and the generated kernels at the leaves (oneDNN's JIT kernels
    are all in one library: their names tell them apart; which leaf of compiled
    library code a sample lands in is sampling detail), with sample counts; not
    those of the ``silent`` libraries, whose own reports showed the same calls on
    both sides."""
    found: Counter[tuple[str, str]] = Counter()
    if root is None:
        return found
    stack: list[tuple[Node, frozenset[str]]] = [(c, frozenset()) for n in _at(root, path, k) for c in n.children]
    while stack:
        node, above = stack.pop()  # above: the libraries already on this stack (counted once)
        lib = library_of(node.frame, k)
        if lib in silent:
            continue
        if is_vendor_lib(lib, k) or is_gpu_lib(lib, k) or lib == JIT:
            if lib not in above:
                found[("library", lib)] += node.count
                above = above | {lib}
            if not node.children and is_jit(node.frame):  # a generated kernel, by its perf-map name
                found[("leaf", node.frame.name)] += node.count
        stack.extend((c, above) for c in node.children)
    return found


def _own_kernels(mine: Counter[tuple[str, str]], total: int, theirs: Counter[tuple[str, str]], their_total: int,
                 threshold: float) -> list[tuple[str, str]]:
    """The libraries and kernel leaves in at least ``threshold`` of one side's samples
    whose absence (or rarity) on the other side is not chance (the binomial test of
    tracer.processing.sampling, at ALPHA)."""
    if not total or not their_total:
        return []
    return [key for key, n in mine.items()
            if n >= threshold * total and miss_chance(theirs.get(key, 0), their_total, n / total) < ALPHA]


def _all_reporting(split: Split) -> bool:
    """Every one-sided frame of the split is code of a library that reports its calls."""
    libs = {lib for b in split.only_a + split.only_b for lib in (b.libraries or [b.library]) if lib}
    return bool(libs) and libs <= REPORTING_LIBS


def after_the_exact_layers(layers: list[LayerDiff], k: Knowledge) -> None:
    """Set aside sampled splits that the python or op layer already names, and those
    whose two sides reach the same kernels and libraries (see module doc)."""
    named = any(d.splits for d in layers if d.layer in NAMING_LAYERS and not d.sampled)
    reported = next((d for d in layers if d.layer == "library"), None)
    silent = reported is not None and not reported.splits  # the reporting libraries ran the same calls
    for d in layers:
        if not d.sampled:
            continue
        if d.samples_a < MIN_SAMPLES or d.samples_b < MIN_SAMPLES:
            d.underpowered = True
            d.consequences += sum(1 for _ in d.all_splits())
            d.splits = []
            continue
        if named:
            d.consequences += sum(1 for _ in d.all_splits())
            d.splits = []
            continue
        kept = []
        quiet = REPORTING_LIBS if silent else frozenset()
        assert d.a_root is not None and d.b_root is not None  # diff_trees keeps both trees (JSON drops them)
        total_a, total_b = total_samples(d.a_root), total_samples(d.b_root)
        for s in d.splits:
            if silent and (s.library in REPORTING_LIBS or _all_reporting(s)):
                d.consequences += 1
                continue
            under_a = _kernels_under(d.a_root, s.ident_path, quiet, k)
            under_b = _kernels_under(d.b_root, s.ident_path, quiet, k)
            if (_own_kernels(under_a, total_a, under_b, total_b, d.threshold)
                    and _own_kernels(under_b, total_b, under_a, total_a, d.threshold)):
                kept.append(s)
            else:
                d.consequences += 1
        d.splits = kept
