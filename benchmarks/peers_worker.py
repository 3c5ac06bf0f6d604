"""Runs inside torch's environment (``PYTHON benchmarks/peers_worker.py REQUEST OUT``):
for each workload file, each pass (forward; backward on a fresh forward's state, as
the probe times it) is timed untraced and under each recorder, in rounds (every mode
once a round, the order rotating each round, the garbage collector off while timing, as
tracer.collect.costs pairs the probe's own steps), and writes each mode's seconds per
round as JSON. benchmarks/workloads.py starts it; its ratios are read per round (the
mode's step over the same round's untraced step).

Modes: ``dltrace-python`` (the Python-level collector a probe runs, its tree built:
what the harness times), ``dltrace-op`` (the step under torch.profiler as dltrace's op
layer runs it, tracer.probes.torch.record_ops: the step alone, as the audit's cost reads
it) and ``dltrace-op-record`` (the same record whole: the profiler's start, the step, its
stop and dltrace's reading of its events), ``torch.profiler`` and
``torch.profiler+stacks`` (torch.profiler.profile on the CPU, bare and with
record_shapes and with_stack: the step inside it, and ``-record`` the with block whole),
``viztracer`` (start, step, stop; its buffer cleared after each, untimed) and
``cprofile`` (enable, step, disable)."""

from __future__ import annotations

import cProfile
import gc
import importlib
import json
import sys
import time
from typing import Any, Callable

from tracer.collect.collector import python_tracer
from tracer.contract import UserWorkload
from tracer.probes.cases import make_case

Timer = Callable[[Callable[[], Any]], dict[str, float]]  # runs the pass once: {mode: seconds}


def _modes(roots: list[str], case: Any) -> dict[str, Timer]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from viztracer import VizTracer

    from tracer.probes import torch as torch_probe

    dl = python_tracer(roots)
    viz = VizTracer(verbose=0, tracer_entries=2_000_000)

    def timed(run: Callable[[], Any], into: dict[str, float], key: str) -> Callable[[], Any]:
        def step() -> Any:
            t0 = time.perf_counter()
            out = run()
            case.sync()
            into[key] = time.perf_counter() - t0
            return out
        return step

    def untraced(run: Callable[[], Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        timed(run, out, "untraced")()
        return out

    def dltrace_python(run: Callable[[], Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        dl.record(run)
        case.sync()
        return {"dltrace-python": time.perf_counter() - t0}

    def dltrace_op(run: Callable[[], Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        t0 = time.perf_counter()
        torch_probe.record_ops(case, "forward", timed(run, out, "dltrace-op"))
        out["dltrace-op-record"] = time.perf_counter() - t0
        return out

    def profiler(name: str, **kw: Any) -> Timer:
        def under(run: Callable[[], Any]) -> dict[str, float]:
            out: dict[str, float] = {}
            t0 = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU], **kw) as prof:
                timed(run, out, name)()
            prof.events()  # what a user of its table or trace reads: the events, processed
            out[f"{name}-record"] = time.perf_counter() - t0
            return out
        return under

    def viztracer(run: Callable[[], Any]) -> dict[str, float]:
        viz.start()
        t0 = time.perf_counter()
        run()
        case.sync()
        t = time.perf_counter() - t0
        viz.stop()
        viz.clear()
        return {"viztracer": t}

    def cprofile(run: Callable[[], Any]) -> dict[str, float]:
        prof = cProfile.Profile()
        prof.enable()
        t0 = time.perf_counter()
        run()
        case.sync()
        t = time.perf_counter() - t0
        prof.disable()
        return {"cprofile": t}

    del torch
    return {"untraced": untraced, "dltrace-python": dltrace_python, "dltrace-op": dltrace_op,
            "torch.profiler": profiler("torch.profiler"),
            "torch.profiler+stacks": profiler("torch.profiler+stacks", record_shapes=True, with_stack=True),
            "viztracer": viztracer, "cprofile": cprofile}


def measure(req: dict[str, Any]) -> dict[str, Any]:
    import torch

    probe = importlib.import_module(req["probe"])
    out: dict[str, Any] = {"torch": str(torch.__version__), "threads": torch.get_num_threads(),
                           "viztracer": importlib.import_module("viztracer").__version__, "workloads": {}}
    for name, file in req["workloads"].items():
        case = make_case(probe, name, "", "cpu", (), UserWorkload.parse(file))
        modes = _modes(req["source_roots"], case)
        names = list(modes)
        passes: dict[str, Any] = {}
        for pass_ in ("forward", "backward"):
            def prepare(pass_: str = pass_) -> Callable[[], Any]:
                if pass_ == "forward":
                    return case.forward
                state = case.forward()
                return lambda: case.backward(state)

            for mode in names:  # warm every path (and each recorder's first start) first
                for _ in range(2):
                    modes[mode](prepare())
            seconds: dict[str, list[float]] = {}
            t_end = time.perf_counter() + req["budget_s"]
            rounds = 0
            while rounds < req["least"] or (rounds < req["most"] and time.perf_counter() < t_end):
                k = rounds % len(names)
                gc.collect()
                gc.disable()
                try:
                    for mode in names[k:] + names[:k]:
                        for key, value in modes[mode](prepare()).items():
                            seconds.setdefault(key, []).append(value)
                finally:
                    gc.enable()
                rounds += 1
            passes[pass_] = {"rounds": rounds, "seconds": seconds}
        out["workloads"][name] = passes
        print(f"  {name}: done", file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        request = json.load(fh)
    result = measure(request)
    with open(sys.argv[2], "w") as fh:
        json.dump(result, fh)
