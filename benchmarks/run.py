"""dltrace's benchmark suite: how much the tracer disturbs what it measures, how long
a survey takes, and how the diff and the report scale. Benchmarks, not tests: run
it and read the tables.

    .venv/bin/python benchmarks/run.py [--quick] [--only overhead,native,survey,scaling,pipeline]

Prints five tables and writes benchmarks/results.json:

1. Python tracing overhead: one training step (forward + backward) of conv2d, dense,
   relu and batchnorm (functional API) per framework, untraced, under dltrace's
   PythonTracer, under viztracer, under cProfile, and with empty hooks (the floor
   of any tracer written in Python) (benchmarks/overhead_worker.py, run inside each
   framework's environment; viztracer is pip-installed there on first use). Modes
   alternate, medians of the repeats, ratio to untraced.
2. Native capture cost: conv2d (4x8x32x32) captured with all three layers in each
   framework; samples, unwinding errors and slowdown as the collector records them
   (Run.stats["layers"]["native"]).
3. Survey time: the full CPU survey of all five frameworks, fresh, against a bare
   baseline that imports each framework and runs every probe case once untraced
   (benchmarks/bare_worker.py), with the same jobs and the same parallelism.
4. Diff scaling (benchmarks/bench_diff.py's trees) and HTML report rendering of
   synthetic 10k- and 100k-node traces.
5. The commands a user runs on trace files (diff, report, export), loading included,
   on a 1M-frame pair and on a trace 200,000 calls deep: seconds and peak memory.

Run it on a quiet machine: it measures wall-clock time, and the frameworks use
both cores (the survey also reports the CPU seconds of its probe processes, which
the load of other processes hardly moves).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import scaling  # noqa: E402

from tracer import envs, registry  # noqa: E402
from tracer.contract import PRIMITIVES  # noqa: E402
from tracer.registry import ROOT  # noqa: E402
from tracer.registry_entries import Framework  # noqa: E402

OVERHEAD_PRIMITIVES = ("conv2d", "dense", "relu", "batchnorm")
#: "dltrace": the collector a probe runs (the C core where it builds), its tree built;
#: "dltrace-in-step": the same calls, only the time from hooks on to hooks off (how much
#: the traced step itself slowed); "dltrace-python": the pure-Python PythonTracer it
#: falls back to.
MODES = ("untraced", "dltrace", "dltrace-in-step", "dltrace-python", "viztracer", "cprofile", "empty-hooks")
SURVEY_TARGET_X, SURVEY_TARGET_S = 2.0, 300.0
RENDER_TARGET_S, DIFF_TARGET_S = 10.0, 2.0


# ----------------------------------------------------------------------------- helpers


def _fw_env(fw: Framework, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a probe of ``fw`` runs in (as tracer.runner sets it up)."""
    env = {**os.environ, **fw.env, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(c) for c in header]] + [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    cells = [r + [""] * (len(header) - len(r)) for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n## {title}\n")
    for j, r in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))


def ensure_viztracer(python: Path) -> str:
    """viztracer in a framework's environment, installed on first use (for the
    benchmark only: nothing in dltrace imports it). Returns '' or why it is missing."""
    if subprocess.run([str(python), "-c", "import viztracer"], capture_output=True).returncode == 0:
        return ""
    print(f"  installing viztracer into {python.parent.parent} ...", flush=True)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "viztracer"],
                          capture_output=True, text=True)
    return "" if proc.returncode == 0 else f"pip install viztracer failed: {proc.stderr.strip().splitlines()[-1:]}"


# ----------------------------------------------------------------------------- 1. overhead


def overhead(frameworks: list[Framework], quick: bool) -> dict[str, Any]:
    """Per framework and primitive: seconds per step in each mode and ratios."""
    result: dict[str, Any] = {}
    for fw in frameworks:
        python = envs.python_for(fw)
        problem = ensure_viztracer(python)
        req = {"import": fw.import_name, "probe": fw.probe, "device_select": fw.devices["cpu"],
               "source_roots": list(fw.source_roots), "primitives": list(OVERHEAD_PRIMITIVES),
               "shapes": {p: list(PRIMITIVES[p].shape) for p in OVERHEAD_PRIMITIVES},
               "batch_s": 0.05 if quick else 0.1, "repeats": 3 if quick else 7}
        with tempfile.TemporaryDirectory(prefix="dltrace-bench-") as tmp:
            (Path(tmp) / "req.json").write_text(json.dumps(req))
            out = Path(tmp) / "out.json"
            t0 = time.perf_counter()
            proc = subprocess.run([str(python), str(HERE / "overhead_worker.py"), str(Path(tmp) / "req.json"),
                                   str(out)],
                                  env=_fw_env(fw), capture_output=True, text=True, cwd=tmp)
            if proc.returncode != 0:
                result[fw.name] = {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
                continue
            data = json.loads(out.read_text())
        cases = {}
        for prim, case in data["cases"].items():
            med = {m: statistics.median(v) for m, v in case["seconds"].items()}
            cases[prim] = {"seconds": med, "ratio": {m: med[m] / med["untraced"] for m in med},
                           "calls_per_batch": case["calls_per_batch"], "all": case["seconds"]}
        summary = {m: _geomean([c["ratio"][m] for c in cases.values() if m in c["ratio"]]) for m in MODES[1:]
                   if all(m in c["ratio"] for c in cases.values())}
        result[fw.name] = {"version": data["version"], "cases": cases, "geomean_ratio": summary,
                           "collector": data.get("collector", {"python": "python"}),
                           "viztracer_problem": problem, "wall_s": time.perf_counter() - t0}
        print(f"  {fw.name}: done in {time.perf_counter() - t0:.0f} s", flush=True)
    return result


def print_overhead(res: dict[str, Any]) -> None:
    rows = []
    for name, fw in res.items():
        if "error" in fw:
            rows.append([name, "-", fw["error"]])
            continue
        for prim, c in fw["cases"].items():
            s, r = c["seconds"], c["ratio"]
            row = [name, prim, f"{s['untraced'] * 1e6:.0f}"]
            for m in MODES[1:]:
                row.append(f"{s[m] * 1e6:.0f} ({r[m]:.2f}x)" if m in s else "n/a")
            rows.append(row)
        g = fw["geomean_ratio"]
        ok = g["dltrace"] <= g.get("viztracer", float("inf"))
        rows.append([name, "geomean", ""] + [f"{g[m]:.2f}x" if m in g else "n/a" for m in MODES[1:]]
                    + ["met" if ok else "MISSED"])
    _table("1. Python tracing overhead: µs per forward+backward step (ratio to untraced); target dltrace <= viztracer",
           ["framework", "primitive", "untraced", "dltrace", "dltrace in step", "dltrace (Python)", "viztracer",
            "cProfile", "empty hooks", "target"], rows)
    print("  dltrace: the collector a probe runs, per framework: "
          + ", ".join(f"{n} {fw.get('collector', {}).get('python', 'python')}"
                      for n, fw in res.items() if "error" not in fw))
    print("  dltrace in step: the same calls from hooks on to hooks off, without building the tree afterwards")
    print("  empty hooks: sys.setprofile and sys.settrace with callbacks that do nothing, "
          "the floor of a tracer in Python")



# ----------------------------------------------------------------------------- 3. survey time


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed_jobs(jobs: list[Any], run_one: Callable[[Any], None], workers: int) -> tuple[float, float, dict[str, float]]:
    """Run ``run_one`` over the jobs ``workers`` at a time, as tracer.survey.run does;
    (total wall seconds, CPU seconds of the probe subprocesses, wall seconds per job
    folder). CPU seconds hardly move with the load of other processes; wall does."""
    per: dict[str, float] = {}

    def timed(job: Any) -> None:
        t0 = time.perf_counter()
        run_one(job)
        per[job.folder] = time.perf_counter() - t0

    t0, c0 = time.perf_counter(), _children_cpu_s()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for fut in [pool.submit(timed, job) for job in jobs]:
            fut.result()
    return time.perf_counter() - t0, _children_cpu_s() - c0, per


def _bare_job(job: Any) -> None:
    fw = job.framework
    var = fw.variants.get(job.variant)
    req = {"import": fw.import_name, "probe": fw.probe, "device_select": fw.devices[job.device],
           "variant_set": dict(var.set) if var else {},
           "cases": [{"primitive": c.primitive, "api": c.api, "shape": list(c.resolved_shape())} for c in job.cases]}
    with tempfile.TemporaryDirectory(prefix="dltrace-bare-") as tmp:
        (Path(tmp) / "req.json").write_text(json.dumps(req))
        proc = subprocess.run([str(envs.python_for(fw)), str(HERE / "bare_worker.py"), str(Path(tmp) / "req.json")],
                              env=_fw_env(fw, var.env if var else {}), capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        raise RuntimeError(f"bare {job.folder} failed: {proc.stderr.strip()[-300:]}")


def _timing_loop_s(untraced: float, traced: float) -> float:
    """A lower bound of the harness's timing loops for one warm pass (harness._timed:
    at least 5 calls each; untraced up to 20 calls or 0.1 s, traced 5 calls, of which
    one is the traced step the trace keeps)."""
    def loop(x: float, budget: float, most: int) -> float:
        return x * min(most, max(5, math.ceil(budget / x))) if x > 0 else 0.0
    return loop(untraced, 0.1, 20) + loop(traced, 0.1, 5) - traced


def survey_time(frameworks: list[Framework], workers: int = 2) -> dict[str, Any]:
    """The full CPU survey (fresh, in a temporary folder) against the bare baseline;
    also reads back what section 2 needs from the survey's traces."""
    from tracer import survey as sv
    from tracer.trace import load

    jobs = sv.plan(frameworks, native=False)  # Python and op layers: native sampling is table 2
    print(f"  bare baseline: {len(jobs)} jobs, {sum(len(j.cases) for j in jobs)} cases, {workers} at a time ...",
          flush=True)
    bare_total, bare_cpu, bare_per = _timed_jobs(jobs, _bare_job, workers)
    print("  survey ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="dltrace-survey-") as tmp:
        root = Path(tmp)
        gaps: list[Any] = []
        survey_total, survey_cpu, survey_per = _timed_jobs(
            jobs, lambda job: gaps.extend(sv.run_job(job, root, fresh=True).gaps), workers)
        timing, native = {}, {}
        for job in jobs:
            for spec in job.cases:
                path = sv.case_path(root, job, spec)
                if not path.exists():
                    continue
                trace = load(path)
                for run in trace.runs:
                    if run.phase == "warm" and "untraced_s" in run.stats:
                        timing[job.folder] = timing.get(job.folder, 0.0) + _timing_loop_s(
                            run.stats["untraced_s"], run.stats.get("traced_s") or 0.0)
                    stats = native_stats(run.stats)
                    if stats:
                        native.setdefault(job.framework.name, []).append(
                            stats | {"case": spec.slug(), "pass": run.pass_})
    return {"workers": workers, "jobs": len(jobs), "cases": sum(len(j.cases) for j in jobs),
            "bare_s": bare_total, "survey_s": survey_total, "ratio": survey_total / bare_total,
            "bare_cpu_s": bare_cpu, "survey_cpu_s": survey_cpu,
            "cpu_ratio": survey_cpu / bare_cpu if bare_cpu else None,
            "bare_per_job": bare_per, "survey_per_job": survey_per, "timing_loop_per_job": timing,
            "gaps": [f"{g.framework} {g.variant} {g.primitive} {g.api}: {g.error}" for g in gaps], "native": native}


def print_survey(res: dict[str, Any]) -> None:
    rows = [[job, f"{res['bare_per_job'][job]:.1f}", f"{res['survey_per_job'][job]:.1f}",
             f"{res['survey_per_job'][job] / res['bare_per_job'][job]:.2f}x",
             f"{res['timing_loop_per_job'].get(job, 0):.1f}"]
            for job in res["survey_per_job"]]
    ok = res["ratio"] <= SURVEY_TARGET_X and res["survey_s"] < SURVEY_TARGET_S
    rows.append([f"all ({res['jobs']} jobs, {res['cases']} cases, {res['workers']} at a time)", f"{res['bare_s']:.1f}",
                 f"{res['survey_s']:.1f}", f"{res['ratio']:.2f}x", f"{sum(res['timing_loop_per_job'].values()):.1f}",
                 "met" if ok else "MISSED"])
    if res.get("cpu_ratio"):
        rows.append(["all, CPU seconds of the probe processes", f"{res['bare_cpu_s']:.1f}",
                     f"{res['survey_cpu_s']:.1f}", f"{res['cpu_ratio']:.2f}x", "", ""])
    _table(f"3. Survey time, wall seconds (target <= {SURVEY_TARGET_X:g}x bare and < {SURVEY_TARGET_S:g} s)",
           ["job", "bare", "survey", "ratio", "harness timing loops >=", "target"], rows)
    if res["gaps"]:
        print(f"  gaps: {len(res['gaps'])}: " + "; ".join(res["gaps"][:5]))


# ----------------------------------------------------------------------------- 2. native capture cost


def native_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """The native collector's figures of one run: Run.stats["layers"]["native"] (or,
    as first planned, Run.stats itself) keys 'samples', 'errors', 'slowdown'."""
    for where in (stats.get("layers", {}).get("native"), stats):
        if isinstance(where, dict) and any(k in where for k in ("samples", "errors", "slowdown")):
            return {k: where.get(k) for k in ("samples", "errors", "slowdown")}
    return {}


NATIVE_SHAPE = (4, 8, 32, 32)  # big enough that the conv kernel is more than a few samples


def native_runs(frameworks: list[Framework]) -> dict[str, list[dict[str, Any]]]:
    """Capture conv2d with all three layers in each framework (surveys leave the
    native layer out, it costs seconds per case) and read back the collector's stats."""
    from tracer.runner import CaseSpec, run_probe
    from tracer.trace import load

    out: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="dltrace-native-") as tmp:
        for fw in frameworks:
            spec = CaseSpec("conv2d", "functional", NATIVE_SHAPE, layers=("python", "op", "native"))
            (res,) = run_probe(fw, [spec], Path(tmp, fw.name), timeout=600)
            if res.path is None:
                continue
            for run in load(res.path).runs:
                stats = native_stats(run.stats)
                if stats:
                    out.setdefault(fw.name, []).append(stats | {"case": spec.slug(), "pass": run.pass_})
    return out


def native_capture_cost(native: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per framework: samples, unwinding errors and the probe loop's slowdown, as
    the native collector writes them (see native_stats). Nothing is made up: a
    framework whose traces have none of them is reported as not available."""
    out: dict[str, Any] = {}
    for fw, runs in native.items():
        slow = [r["slowdown"] for r in runs if isinstance(r.get("slowdown"), (int, float))]
        out[fw] = {"runs": len(runs), "samples": sum(r.get("samples") or 0 for r in runs),
                   "errors": sum(r.get("errors") or 0 for r in runs),
                   "slowdown_median": statistics.median(slow) if slow else None,
                   "slowdown_max": max(slow) if slow else None}
    return out


def print_native(res: dict[str, Any] | None) -> None:
    if not res:
        print("\n## 2. Native capture cost\n\n"
              "  the native layer is not available: no trace of this survey has native stats"
              " (Run.stats['layers']['native'] 'samples', 'errors', 'slowdown')")
        return
    rows = [[fw, r["runs"], r["samples"], r["errors"],
             "-" if r["slowdown_median"] is None else f"{r['slowdown_median']:.2f}x",
             "-" if r["slowdown_max"] is None else f"{r['slowdown_max']:.2f}x",
             "met" if r["slowdown_max"] is not None and r["slowdown_max"] <= 3 else "MISSED"] for fw, r in res.items()]
    _table("2. Native capture cost, conv2d 4x8x32x32 forward and backward (target: slowdown <= 3x)",
           ["framework", "runs", "samples", "unwind errors", "slowdown (median)", "slowdown (max)", "target"], rows)


# ----------------------------------------------------------------------------- 4. diff and report scaling


def print_scaling(diff: list[dict[str, Any]], report: list[dict[str, Any]]) -> None:
    rows = [[f"{r['frames']:,}", f"{r['wall_s']:.3f}", f"{r['cpu_s']:.3f}", f"{r['us_per_frame']:.2f}", r["splits"],
             ("met" if r["cpu_s"] < DIFF_TARGET_S else "MISSED") if r["frames"] >= 1_000_000 else ""] for r in diff]
    _table("4a. Diff of synthetic traces "
           f"(benchmarks/bench_diff.py trees; target 1M frames < {DIFF_TARGET_S:g} s, linear)",
           ["frames per tree", "wall s", "CPU s", "µs per frame", "splits", "target"], rows)
    rows = [[f"{r['frames']:,}", f"{r['seconds']:.2f}", f"{r['html_bytes'] / 1e3:.0f} kB", r["inline_graphs"],
             r["full_graphs"], "met" if r["seconds"] < RENDER_TARGET_S else "MISSED"] for r in report]
    _table(f"4b. HTML report of a default/variant pair (target < {RENDER_TARGET_S:g} s)",
           ["frames per trace", "seconds", "HTML", "inline graphs", "full graphs", "target"], rows)


def print_pipeline(r: dict[str, Any]) -> None:
    def row(name: str, m: dict[str, Any]) -> list[Any]:
        return [name, f"{m['seconds']:.1f}", f"{m['peak_mib']:.0f}", "ok" if m["ok"] else f"FAILED: {m['error']}"]

    print(f"\n(trace files of {r['frames']:,} frames: {r['file_mib']:.0f} MiB each; "
          f"load of one in-process: {r['load_s']:.1f} s)")
    _table(f"5. Commands on trace files: a {r['frames']:,}-frame pair, and a trace {r['depth']:,} calls deep "
           "(seconds and peak memory of the dltrace process, loading included)",
           ["command", "seconds", "peak MiB", "result"],
           [row("diff A B --json", r["diff"]), row("report (the pair)", r["report"]),
            row("export collapsed", r["export_collapsed"]), row("export speedscope", r["export_speedscope"]),
            row("export collapsed (deep)", r["deep_collapsed"]), row("export speedscope (deep)", r["deep_speedscope"]),
            row("diff (deep, with itself)", r["deep_diff"])])


def machine() -> dict[str, Any]:
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "os": platform.platform(), "load_before": os.getloadavg()}

def print_all(results: dict[str, Any]) -> None:
    """The four tables (also: ``benchmarks/run.py --show`` reprints results.json)."""
    m = results["machine"]
    print(f"\nmachine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; load average before "
          f"{m['load_before'][0]:.2f}, after {results['load_after'][0]:.2f}; command: {results['command']}")
    if "overhead" in results:
        print_overhead(results["overhead"])
    if "native" in results or "survey" in results:
        print_native(results.get("native"))
    if "survey" in results:
        print_survey(results["survey"])
    if "diff" in results:
        print_scaling(results["diff"], results["report"])
    if "pipeline" in results:
        print_pipeline(results["pipeline"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no 1M-node diff")
    ap.add_argument("--only", default="overhead,native,survey,scaling,pipeline")
    ap.add_argument("--frameworks", default="",
                    help="comma-separated subset (default: every framework with an environment)")
    ap.add_argument("--out", type=Path, default=HERE / "results.json")
    ap.add_argument("--show", action="store_true", help="reprint the tables of --out, measure nothing")
    args = ap.parse_args()
    if args.show:
        print_all(json.loads(args.out.read_text()))
        return
    only = set(args.only.split(","))
    fws = list(registry.load().values())
    if args.frameworks:
        fws = [f for f in fws if f.name in args.frameworks.split(",")]
    ready = [f for f in fws if envs.status(f).ready]
    results: dict[str, Any] = {"machine": machine(), "command": " ".join(["benchmarks/run.py", *sys.argv[1:]]),
                               "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(f"machine: {results['machine']['cpu']}, {results['machine']['cores']} cores; "
          f"frameworks: {', '.join(f.name for f in ready)}")
    if "overhead" in only:
        print("1. overhead ...", flush=True)
        results["overhead"] = overhead(ready, args.quick)
    if "survey" in only:
        print("3. survey ...", flush=True)
        results["survey"] = survey_time(ready)
    if "native" in only:
        print("2. native capture ...", flush=True)
        results["native"] = native_capture_cost(native_runs(ready))
    if "scaling" in only:
        print("4. scaling ...", flush=True)
        sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
        results["diff"] = scaling.diff_scaling(sizes, 1 if args.quick else 3)
        results["report"] = scaling.report_scaling([10_000, 100_000])
    if "pipeline" in only:
        print("5. commands on trace files ...", flush=True)
        results["pipeline"] = scaling.pipeline_scaling(100_000 if args.quick else 1_000_000,
                                                       20_000 if args.quick else 200_000)
    results["load_after"] = os.getloadavg()
    args.out.write_text(json.dumps(results, indent=1))
    print_all(results)


if __name__ == "__main__":
    main()
