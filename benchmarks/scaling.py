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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_diff

from tracer.processing.diff import diff_trees
from tracer.analysis.portability import survey_reports
from tracer.analysis.survey_model import assemble
from tracer.knowledge import knowledge
from tracer.render.html import write_report
from tracer.trace import Node, Run, Trace, load, save

K = knowledge()


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
            result = diff_trees(a, b, "python", k=K)
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
            k = knowledge()
            write_report(assemble(survey_reports(traces, [], k=k), [], [], k), Path(tmp))
            secs = time.perf_counter() - t0
            svgs = sorted(Path(tmp, "graphs").glob("*.svg"))
            pages = [p.read_text() for p in Path(tmp).glob("*.html")]
        rows.append({"frames": size, "seconds": secs, "html_bytes": sum(len(p) for p in pages),
                     "inline_graphs": sum(p.count("<svg") for p in pages), "full_graphs": len(svgs)})
    return rows


# ----------------------------------------------------------------------------- end to end, from files


#: Runs a command and prints its peak memory. Linux keeps a process's peak RSS across
#: fork and exec, so a command started straight from this (large) benchmark process
#: would report the benchmark's own; started from this small one, it reports its own.
_MEASURE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")


def _command(args: list[str]) -> dict[str, Any]:
    """Wall seconds and peak memory (max RSS, MiB) of one dltrace command."""
    exe = str(Path(sys.executable).parent / "dltrace")
    proc = subprocess.run([sys.executable, "-c", _MEASURE, exe, *args], capture_output=True, text=True,
                          close_fds=True)
    secs, rss, rc = proc.stdout.split()
    err = proc.stderr.strip().splitlines()
    return {"seconds": float(secs), "peak_mib": int(rss) / 1024, "ok": rc == "0",
            "error": err[-1] if err and rc != "0" else ""}


def _chain(depth: int) -> Node:
    """A trace as deep as a runaway recursion: ``depth`` nested calls, one leaf."""
    root = node = Node(bench_diff.frames(1, "deep")[0], 1)
    pool = bench_diff.frames(64, "deep")
    for i in range(depth):
        child = Node(pool[i % 64], 1)
        node.children.append(child)
        node = child
    return root


def pipeline_scaling(size: int, depth: int) -> dict[str, Any]:
    """The commands a user runs on a pair of ``size``-frame trace files (loading
    included), and the exports of a ``depth``-deep trace: seconds and peak memory."""
    a, b = trees(size)
    out: dict[str, Any] = {"frames": size, "depth": depth}
    with tempfile.TemporaryDirectory(prefix="dltrace-pipeline-") as tmp:
        folder = Path(tmp, "traces")
        folder.mkdir()
        pa, pb = folder / "a.json", folder / "b.json"
        save(_trace(a, "default"), pa)
        save(_trace(b, "variant"), pb)
        out["file_mib"] = pa.stat().st_size / 2**20
        del a, b
        gc.collect()
        t0 = time.perf_counter()
        load(pa)
        out["load_s"] = time.perf_counter() - t0
        out["diff"] = _command(["diff", str(pa), str(pb), "--json"])
        out["report"] = _command(["report", str(folder), "-o", str(Path(tmp, "report"))])
        out["export_collapsed"] = _command(["export", str(pa), "--format", "collapsed", "-o", str(Path(tmp, "a.txt"))])
        out["export_speedscope"] = _command(["export", str(pa), "--format", "speedscope", "-o", str(Path(tmp, "a.ss"))])
        deep = Path(tmp, "deep.json")
        save(_trace(_chain(depth), "default"), deep)
        out["deep_collapsed"] = _command(["export", str(deep), "--format", "collapsed", "-o", str(Path(tmp, "d.txt"))])
        out["deep_speedscope"] = _command(["export", str(deep), "--format", "speedscope", "-o", str(Path(tmp, "d.ss"))])
        out["deep_diff"] = _command(["diff", str(deep), str(deep)])
    return out
