"""Runs inside a framework's environment (``python -m tracer.collect.harness REQUEST``):
imports the probe, applies the variant, traces each case and writes one trace file
per case. The tool talks to it only through files and the exit status:

  0  ran (a case that failed is written as CASE.error next to its trace path)
  3  the requested device is not available (message on stderr)
  4  the framework or probe could not be imported (message on stderr)
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable

from tracer import __version__, machine
from tracer.collect.pytrace import PythonTracer
from tracer.trace import Run, Trace, save

EXIT_NO_DEVICE = 3
EXIT_IMPORT = 4


def _set_dotted(dotted: str, value: Any) -> Any:
    """Apply a variant's ``set`` entry, e.g. torch.backends.mkldnn.enabled = False;
    returns the value read back, so the trace shows that the switch took effect."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:-1], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    setattr(obj, parts[-1], value)
    return getattr(obj, parts[-1])


def _timed(step: Callable[[], Any], sync: Callable[[], None], budget_s: float = 0.3, most: int = 50) -> float:
    """Median seconds per call of ``step``; repeats until the budget or ``most``."""
    times: list[float] = []
    t_end = time.perf_counter() + budget_s
    while len(times) < 5 or (len(times) < most and time.perf_counter() < t_end):
        times.append(step())
        sync()
    return statistics.median(times)


def _trace_case(req: dict, case_req: dict, probe: Any, version: str, applied: dict) -> Trace:
    shape = tuple(case_req["shape"])
    case = probe.make_case(case_req["primitive"], case_req["api"], req["device_select"], shape)
    tracer = PythonTracer(req["source_roots"], root_name=f"{case_req['primitive']}")
    passes = case_req["passes"]
    runs: list[Run] = []

    def traced(pass_: str) -> Callable[[], tuple]:
        """One traced step: (tree, seconds). Backward traces only the backward call."""
        label = f"{case_req['primitive']}.{pass_}"
        if pass_ == "forward":
            t0 = time.perf_counter()
            tree, _ = tracer.record(case.forward, label)
            return tree, time.perf_counter() - t0
        state = case.forward()
        t0 = time.perf_counter()
        tree, _ = tracer.record(lambda: case.backward(state), label)
        return tree, time.perf_counter() - t0

    def untraced(pass_: str) -> float:
        if pass_ == "forward":
            t0 = time.perf_counter()
            case.forward()
            return time.perf_counter() - t0
        state = case.forward()
        t0 = time.perf_counter()
        case.backward(state)
        return time.perf_counter() - t0

    # Cold: the very first call of each pass, with its one-time initialisation.
    for pass_ in passes:
        tree, secs = traced(pass_)
        case.sync()
        runs.append(Run(pass_, "cold", {"python": tree}, {"seconds": secs}))
    for _ in range(req.get("warmup", 3)):
        case.backward(case.forward()) if "backward" in passes else case.forward()
        case.sync()
    for pass_ in passes:
        tree, _ = traced(pass_)
        case.sync()
        stats = {
            "untraced_s": _timed(lambda: untraced(pass_), case.sync),
            "traced_s": _timed(lambda: traced(pass_)[1], case.sync, most=20),
        }
        stats["overhead"] = stats["traced_s"] / stats["untraced_s"] if stats["untraced_s"] else None
        runs.append(Run(pass_, "warm", {"python": tree}, stats))

    meta = {
        "framework": req["framework"],
        "framework_version": version,
        "primitive": case_req["primitive"],
        "api": case_req["api"],
        "device": req["device"],
        "variant": req["variant"],
        "variant_env": req.get("variant_env", {}),
        "variant_set": applied,
        "shape": list(shape),
        "passes": passes,
        "source_roots": req["source_roots"],
        "machine": machine.describe(),
        "tool": "dltrace",
        "tool_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": req.get("command", ""),
    }
    meta.update(case.info)
    return Trace(meta, runs, tracer.sources)


def main(argv: list[str]) -> int:
    with open(argv[0]) as fh:
        req = json.load(fh)
    try:
        fw = importlib.import_module(req["import"])
        applied = {dotted: _set_dotted(dotted, value) for dotted, value in req.get("variant_set", {}).items()}
        probe = importlib.import_module(req["probe"])
    except Exception as exc:  # noqa: BLE001 - reported as one line to the tool
        print(f"cannot import {req['import']} / {req['probe']}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_IMPORT
    if req["device"] != "cpu" and not probe.gpu_available():
        print(f"no {req['device'].upper()} visible to {req['framework']} on this machine", file=sys.stderr)
        return EXIT_NO_DEVICE
    version = str(getattr(fw, "__version__", "unknown"))
    for case_req in req["cases"]:
        out = case_req["out"]
        try:
            save(_trace_case(req, case_req, probe, version, applied), out)
        except Exception as exc:  # noqa: BLE001 - one case failing must not lose the others
            with open(out + ".error", "w") as fh:
                json.dump({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}, fh)
        print(f"done {case_req['primitive']} {case_req['api']}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
