"""Diff and report scaling on synthetic traces (section 4 of benchmarks/run.py).

The trees come from benchmarks/bench_diff.py (the diff engine's own benchmark):
a realistic mix of depth and fan-out, B a copy of A that calls other functions in
a few subtrees. The report is rendered from two such traces of a made-up
framework, as the default CPU path and a variant, so that it has a pair to diff
and split points to draw.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_diff
from tracer.process.diff import diff_trees
from tracer.render.html import write_report
from tracer.trace import Node, Run, Trace


def trees(size: int) -> tuple[Node, Node]:
    """Two loaded-like trees of ``size`` frames that differ in a few subtrees."""
    shape = bench_diff.build(size)
    a, b = bench_diff.copy(shape), bench_diff.copy(shape)
    bench_diff.perturb(b, bench_diff.SPLITS)
    return a, b


def diff_scaling(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """Median seconds (wall and CPU) of diff_trees per tree size."""
    rows = []
    for size in sizes:
        a, b = trees(size)
        wall, cpu = [], []
        splits = 0
        for _ in range(repeat):
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            result = diff_trees(a, b, "python")
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
            splits = sum(1 for _ in result.all_splits())
        rows.append({"frames": size, "wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu),
                     "us_per_frame": statistics.median(cpu) / size * 1e6, "splits": splits})
        del a, b
    return rows


def _trace(tree: Node, variant: str) -> Trace:
    meta = {"framework": "synthetic", "framework_version": "0", "primitive": "conv2d", "api": "functional",
            "device": "cpu", "variant": variant, "variant_env": {}, "variant_set": {}, "shape": [2, 3, 8, 8],
            "passes": ["forward"], "source_roots": ["fw"],
            "machine": {"cpu": "bench", "arch": "x86_64", "cores": 2, "isa": [], "os": "", "python": ""},
            "tool": "dltrace", "tool_version": "0", "created": "", "command": "benchmarks/run.py"}
    sources = {}
    for _, node in tree.walk():
        f = node.frame
        if f.kind == "python" and (f.file, f.line) not in sources:
            sources[(f.file, f.line)] = [f"def {f.name}(x):", "    if x > 0:", "        return x", "    return -x"]
    return Trace(meta, [Run("forward", "warm", {"python": tree}, {"untraced_s": 1e-4, "traced_s": 2e-4})], sources)


def report_scaling(sizes: list[int]) -> list[dict[str, Any]]:
    """Seconds to render the HTML report of a default/variant pair of ``size`` frames."""
    rows = []
    for size in sizes:
        a, b = trees(size)
        traces = [_trace(a, "default"), _trace(b, "variant")]
        with tempfile.TemporaryDirectory(prefix="dltrace-report-") as tmp:
            gc.collect()
            t0 = time.perf_counter()
            write_report(traces, [], Path(tmp))
            secs = time.perf_counter() - t0
            svgs = sorted(Path(tmp, "graphs").glob("*.svg"))
            pages = [p.read_text() for p in Path(tmp).glob("*.html")]
        rows.append({"frames": size, "seconds": secs, "html_bytes": sum(len(p) for p in pages),
                     "inline_graphs": sum(p.count("<svg") for p in pages), "full_graphs": len(svgs)})
    return rows
