"""The diff engine: where two execution paths of the same primitive split.

Two call trees (CPU vs GPU, default vs a variant, one machine vs another) are
aligned top-down: the children of two aligned nodes are matched by normalised
identity (:func:`tracer.processing.normalize.identity`), regardless of order. A
**split point** is a node present in both trees whose children differ: some
child frames run on one side only. For each split the result carries the common
path from the root, each side's differing first frames with a summary of what
they reach (libraries, ISA-specific code), the deciding code fragment and a
classification of the decision.

Design choices, each for a reason:

* Siblings with the same identity are merged into one group (their counts add
  up, their children are pooled). Normalisation makes ``f.isra.0`` and
  ``f.cold`` the same function, and two ``<genexpr>`` of one function are
  consequences of the same parent; comparing groups keeps alignment one-to-one.
* Sampled layers (native stacks: ``Node.count`` = samples containing the frame,
  the root's count = all samples) are noisy. A child is present only if its
  share of its side's samples is at least ``threshold``; a frame seen in 3 of 800
  samples is not a split. A frame above the threshold on one side only is a split
  only if its absence on the other side is not chance either: the binomial
  probability that the other side's samples would miss a frame of that share
  must be under ``ALPHA`` (3 of 138 samples against 0 of 50 is chance, p = 0.33;
  66 of 138 against 0 of 50 is not). Both are carried in the result. And when
  the traces have a python layer, a sampled layer's Python frames on one side
  only are not splits either: the python layer records every call, so it alone
  says whether the Python path differs; in a sampled stack a short Python call
  is there or not by chance.
* Splits below a common node that lies under an earlier split are nested in that
  split's ``children``: the reader sees the first decision, then its
  consequences. Independent splits (in disjoint subtrees) stay side by side, in
  the order of a depth-first walk of side A.
* Frames that run wherever they are triggered (garbage-collector callbacks,
  ``noise`` in a framework's tracer.knowledge) never make a split.
* Everything is iterative (traces can be thousands of frames deep) and linear:
  each node is visited once, identities are numbered once per Frame object, and
  the common cases (same children in the same order, single-call chains, leaves)
  are aligned without building groups, mostly in C (itertools, operator).

Modules, one job each: result (the data and its JSON), align (the alignment),
split (one split point), fragment (the deciding code), classify (the kind of
decision), context (splits that are no decision: model context, version
difference); shared tree helpers and the sampling statistics are in
tracer.processing.tree and tracer.processing.sampling.

Pure: no I/O, no framework imported.
"""

from __future__ import annotations

from typing import Any, Sequence

from tracer.contract import LAYERS
from tracer.errors import DltraceError
from tracer.processing.diff.align import diff_trees
from tracer.processing.diff.context import label_context
from tracer.processing.diff.evidence import after_the_exact_layers, replicated
from tracer.processing.diff.result import DiffResult
from tracer.processing.sampling import DEFAULT_THRESHOLD
from tracer.knowledge import Knowledge
from tracer.processing.tags import is_incidental
from tracer.processing.tree import looks_sampled, splice
from tracer.trace import Frame, Node, Run, Trace

#: Meta fields that must agree unless forced: diffing conv2d against relu finds nothing useful.
MUST_MATCH = ("framework", "primitive")
#: Meta fields whose difference is the point of the diff, shown in the header.
COMPARED = ("framework_version", "framework_build", "api", "device", "variant", "shape")


class DiffError(DltraceError):
    """Traces that cannot be diffed as asked (mismatched, missing run or layer, bad threshold)."""


def describe(trace: Trace) -> dict[str, Any]:
    """What a trace is, in the fields a diff header shows."""
    m = trace.info
    release, _, build = (m.framework_version or "").partition("+")
    return {
        "framework": m.framework,
        # the release (PEP 440's public version): two builds of one release (torch's
        # x86 +cpu and aarch64 +cu130 wheels) run one source, so they are no version
        # difference; the build label (local version) is compared apart
        "framework_version": release,
        "framework_build": build,
        "primitive": m.primitive,
        "api": m.api,
        "device": m.device,
        "variant": m.variant,
        "shape": list(m.shape),
        "arch": m.machine.arch or "",
        "cpu": m.machine.cpu or "",
    }


def is_sampled(run: Run, layer: str, root: Node | None) -> bool:
    """Whether a layer's counts are samples: its run's stats say so or its frames are
    native stack frames."""
    return run.info.is_sampled(layer) or (root is not None and looks_sampled(root))


def diff_traces(a: Trace, b: Trace, pass_: str = "forward", phase: str = "warm",
                layers: Sequence[str] = LAYERS, threshold: float = DEFAULT_THRESHOLD,
                force: bool = False, *, k: Knowledge) -> DiffResult:
    """Diff the ``pass_``/``phase`` run of two loaded traces, layer by layer.

    Traces of a different framework or primitive are refused (DiffError) unless
    ``force``. Layers missing on both sides are skipped; a layer on one side only is
    a warning; no layer in common is an error. ``k``: what the stages know (tracer.knowledge,
    loaded once by the entry point that calls this and handed down).
    """

    def incidental(f: Frame) -> bool:
        return is_incidental(f, k)

    if not 0 <= threshold < 1:
        raise DiffError(f"threshold {threshold} is not a share of samples (0 <= threshold < 1)")
    da, db = describe(a), describe(b)
    warnings: list[str] = []
    for key in MUST_MATCH:
        if da[key] != db[key]:
            msg = f"the traces are of different {key}s (A: {da[key] or '?'}, B: {db[key] or '?'})"
            if not force:
                raise DiffError(f"{msg}; use --force to diff them anyway")
            warnings.append(msg)
    differs = {k: [da[k], db[k]] for k in (*COMPARED, "arch", "cpu") if da[k] != db[k]}
    ra, rb = a.run(pass_, phase), b.run(pass_, phase)
    for side, run, trace in (("A", ra, a), ("B", rb, b)):
        if run is None:
            have = ", ".join(f"{r.phase} {r.pass_}" for r in trace.runs) or "none"
            raise DiffError(f"trace {side} has no {phase} {pass_} run (it has: {have})")
    assert ra is not None and rb is not None
    results = []
    for layer in layers:
        ta, tb = ra.layers.get(layer), rb.layers.get(layer)
        if ta is None and tb is None:
            continue
        if ta is None or tb is None:
            warnings.append(f"the {layer} layer is only in trace {'A' if tb is None else 'B'}; not diffed")
            continue
        sampled = is_sampled(ra, layer, ta) or is_sampled(rb, layer, tb)
        if sampled:  # where a sample found a thread waiting or allocating says nothing of what was chosen
            ta, tb = splice(ta, incidental), splice(tb, incidental)
        python_elsewhere = layer != "python" and "python" in ra.layers and "python" in rb.layers
        result = diff_trees(ta, tb, layer, threshold, sampled=sampled, sources_a=a.sources, sources_b=b.sources,
                            devices_differ=da["device"] != db["device"], python_elsewhere=python_elsewhere, k=k)
        reps_a, reps_b = ra.replicas.get(layer), rb.replicas.get(layer)
        if sampled and reps_a and reps_b and len(reps_a) == len(reps_b):
            replicated(result, [splice(t, incidental) for t in reps_a], [splice(t, incidental) for t in reps_b], k)
        results.append(result)
    if not results:
        have_a = ", ".join(ra.layers) or "none"
        have_b = ", ".join(rb.layers) or "none"
        raise DiffError(f"no {'/'.join(layers)} layer in both traces (A has: {have_a}; B has: {have_b})")
    after_the_exact_layers(results, k)
    diff = DiffResult(da, db, pass_, phase, threshold, differs, results, warnings)
    label_context(diff, a, b, k)
    return diff
