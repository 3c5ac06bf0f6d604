"""Runs inside a framework's environment (``PYTHON benchmarks/overhead_worker.py REQUEST OUT``):
times one training step (forward, then backward) of each primitive untraced, under
dltrace's Python-level collector as a probe chooses it (tracer/collect/collector.py:
the C core where it can be built, mode "dltrace"), under the pure-Python
PythonTracer ("dltrace-python"), under viztracer and under cProfile, and writes the
per-call seconds of every batch as JSON. benchmarks/run.py starts it; see there.

"empty-hooks" installs the same hooks as dltrace (sys.setprofile, and the builtin
getattr as sys.settrace) with callbacks that do nothing: what any tracer written
in Python pays on this interpreter before it records anything.

Each traced call is wrapped on its own (start, step, stop), as the harness wraps
``tracer.record`` around one step; dltrace's time includes building its call tree.
"dltrace-in-step" is not a mode of its own: the time dltrace's root node measured
around the step in the "dltrace" batches (hooks on to hooks off), i.e. how much the
traced step itself was slowed, without the tree built after it.
Modes alternate within each repeat (in rotating order), so that drift of the
machine hits all of them alike.
"""

from __future__ import annotations

import cProfile
import importlib
import json
import sys
import time
from typing import Any, Callable

from tracer.collect.collector import python_tracer
from tracer.collect.pytrace import PythonTracer

Step = Callable[[], Any]


def _wrappers(roots: list[str], in_step: list[int]) -> tuple[dict[str, Callable[[Step], Any]], Callable[[], None],
                                                              dict[str, str]]:
    """(mode -> how to run one step under it, what empties the tracers' buffers
    between batches, which collector mode "dltrace" is); each "dltrace" step's
    in-step nanoseconds are appended to ``in_step``."""
    dl = python_tracer(roots)

    def under_dltrace(step: Step) -> Any:
        tree, result = dl.record(step)
        in_step.append(tree.time_ns)
        return result

    dl_python = PythonTracer(roots)
    prof = cProfile.Profile()

    def under_cprofile(step: Step) -> Any:
        prof.enable()
        try:
            return step()
        finally:
            prof.disable()

    def nothing(frame: Any, event: str, arg: Any) -> None:
        return None

    def under_empty_hooks(step: Step) -> Any:
        """The hooks dltrace installs, with callbacks that do nothing: the floor of
        any tracer written in Python on this interpreter."""
        sys.settrace(getattr)
        sys.setprofile(nothing)
        try:
            return step()
        finally:
            sys.setprofile(None)
            sys.settrace(None)

    modes: dict[str, Callable[[Step], Any]] = {
        "untraced": lambda step: step(),
        "dltrace": under_dltrace,
        "dltrace-python": lambda step: dl_python.record(step),
        "cprofile": under_cprofile,
        "empty-hooks": under_empty_hooks,
    }
    try:
        from viztracer import VizTracer
    except ImportError:
        return modes, lambda: None, dl.collector
    viz = VizTracer(verbose=0)

    def under_viztracer(step: Step) -> Any:
        viz.start()
        try:
            return step()
        finally:
            viz.stop()

    modes["viztracer"] = under_viztracer
    return modes, viz.clear, dl.collector


def _batch(run: Callable[[Step], Any], step: Step, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        run(step)
    return (time.perf_counter() - t0) / calls


def measure(req: dict) -> dict:
    fw = importlib.import_module(req["import"])
    probe = importlib.import_module(req["probe"])
    in_step: list[int] = []
    modes, clear, collector = _wrappers(req["source_roots"], in_step)
    out: dict[str, Any] = {"version": str(getattr(fw, "__version__", "?")), "modes": list(modes), "cases": {},
                           "collector": collector}
    for prim in req["primitives"]:
        case = probe.make_case(prim, "functional", req["device_select"], tuple(req["shapes"][prim]))

        def step(case=case) -> Any:
            r = case.backward(case.forward())
            case.sync()
            return r

        for run in modes.values():  # warm every path (and every tracer's caches) first
            for _ in range(3):
                run(step)
        clear()
        t = min(_batch(modes["untraced"], step, 1) for _ in range(5))
        calls = max(2, min(200, int(req["batch_s"] / max(t, 1e-6))))
        times: dict[str, list[float]] = {m: [] for m in [*modes, "dltrace-in-step"]}
        names = list(modes)
        for rep in range(req["repeats"]):
            k = rep % len(names)
            for m in names[k:] + names[:k]:
                in_step.clear()
                times[m].append(_batch(modes[m], step, calls))
                if m == "dltrace":
                    times["dltrace-in-step"].append(sum(in_step) / len(in_step) / 1e9)
                clear()
        out["cases"][prim] = {"calls_per_batch": calls, "seconds": times}
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        request = json.load(fh)
    result = measure(request)
    with open(sys.argv[2], "w") as fh:
        json.dump(result, fh)
