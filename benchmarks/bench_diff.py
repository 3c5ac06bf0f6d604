"""How long the diff engine takes on synthetic trees of 10k, 100k and 1M frames.

Not a test: run it and read the table.

    .venv/bin/python benchmarks/bench_diff.py [--sizes 10000,100000,1000000] [--repeat 3]

Shape: a call tree with a realistic mix of depth and fan-out (1-6 children, a few
long chains, depth up to ~40), frames drawn from a pool of a few thousand distinct
functions as in real traces. B is a separate copy of A (no shared objects) in which
a few subtrees call different functions: so the diff walks every frame and finds
a handful of split points. Times exclude building the trees; medians of
``--repeat`` runs are shown, as wall-clock time and as this process's CPU time
(which other processes on the machine do not inflate). The last column diffs the
same trees read as a sampled layer (threshold 0, so every frame counts), which
takes the general path of the alignment instead of its fast paths.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.processing.diff import diff_trees  # noqa: E402
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node  # noqa: E402

K = knowledge()

POOL = 4000  # distinct functions
SPLITS = 5  # subtrees that differ


def frames(n: int, prefix: str) -> list[Frame]:
    return [Frame("python", f"{prefix}.mod{i % 97}", f"fn_{i}x", f"{prefix}/mod{i % 97}.py", 10 + i, "")
            for i in range(n)]


def build(size: int, seed: int = 1) -> Node:
    """A tree of exactly ``size`` nodes, built breadth-first with random fan-out and
    occasional chains, so that it is both wide and deep."""
    rng = random.Random(seed)
    pool = frames(POOL, "fw")
    root = Node(Frame("root", "", "probe"), 1)
    made = 1
    frontier = [(root, 0)]
    while made < size:
        nxt = []
        for node, depth in frontier:
            if made >= size:
                break
            fan = rng.choice((1, 1, 2, 2, 3, 4, 6)) if depth < 40 else 0
            for i in range(fan):
                if made >= size:
                    break
                child = Node(pool[rng.randrange(POOL)], rng.randint(1, 5), 0, [depth + 3], [depth + 1])
                node.children.append(child)
                made += 1
                nxt.append((child, depth + 1))
        if not nxt:  # depth cap reached everywhere: restart from random leaves
            nxt = [(n, 0) for n, _ in rng.sample(frontier, min(len(frontier), 64))]
        frontier = nxt
    return root


def copy(root: Node) -> Node:
    """A deep copy with fresh Frame and Node objects, created in pre-order as
    tracer.trace.load creates them: as two loaded traces would be."""
    frames_seen: dict[int, Frame] = {}

    def fresh(f: Frame) -> Frame:
        g = frames_seen.get(id(f))
        if g is None:
            g = frames_seen[id(f)] = Frame(f.kind, f.module, f.name, f.file, f.line, f.lib)
        return g

    new_root = None
    stack: list[tuple[Node, Node | None]] = [(root, None)]
    while stack:
        old, parent = stack.pop()
        node = Node(fresh(old.frame), old.count, old.time_ns, list(old.call_lines), list(old.lines))
        if parent is None:
            new_root = node
        else:
            parent.children.append(node)
        stack.extend((c, node) for c in reversed(old.children))
    assert new_root is not None
    return new_root


def perturb(root: Node, splits: int, seed: int = 2) -> None:
    """Replace one child's frame in ``splits`` subtrees: B calls something else there."""
    rng = random.Random(seed)
    inner = [n for _, n in root.walk() if len(n.children) >= 2]
    for k, node in enumerate(rng.sample(inner, min(splits, len(inner)))):
        victim = node.children[-1]
        victim.frame = Frame("python", "fw.other", f"forward_gpu_{k}x", "fw/other.py", 5, "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'frames/tree':>12} {'build s':>8} {'wall s':>8} {'(min)':>7} {'CPU s':>7} {'µs/frame':>9} {'splits':>7}"
          f" {'sampled CPU s':>14}")
    for size in (int(s) for s in args.sizes.split(",")):
        t0 = time.perf_counter()
        shape = build(size)
        a, b = copy(shape), copy(shape)
        del shape
        perturb(b, SPLITS)
        built = time.perf_counter() - t0
        wall, cpu, sampled_cpu = [], [], []
        result = None
        for _ in range(args.repeat):
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            result = diff_trees(a, b, "python", k=K)
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
            gc.collect()
            c0 = time.process_time()
            diff_trees(a, b, "native", sampled=True, threshold=0.0, k=K)  # same trees, read as samples
            sampled_cpu.append(time.process_time() - c0)
        assert result is not None
        med_wall, med_cpu = statistics.median(wall), statistics.median(cpu)
        n = sum(1 for _ in result.all_splits())
        print(f"{size:>12,} {built:>8.2f} {med_wall:>8.3f} {min(wall):>7.3f} {med_cpu:>7.3f} "
              f"{med_cpu / size * 1e6:>9.2f} {n:>7} {statistics.median(sampled_cpu):>14.3f}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(CPU s: this process only, unaffected by other processes sharing the cores)")

if __name__ == "__main__":
    main()
