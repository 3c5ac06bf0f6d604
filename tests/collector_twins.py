"""Runs inside a framework's environment (``PYTHON tests/collector_twins.py REQUEST``):
records the same warm steps under both Python-level collectors, the C core and the
pure-Python PythonTracer, and prints, as JSON, every node where the two trees differ
(frame, count, calling lines, lines run; not times). tests/test_ctrace.py starts it.
A request ``{"patterns": true}`` records the sample framework's call patterns instead
(tests/sample_patterns.py), under whichever interpreter runs this, and the checks of
how the core lives beside other tools (a recording inside a recording, another tool's
profile and trace functions, code objects released), which tests/test_ctrace.py also
runs in its own process.

Each step is warmed up untraced first, then recorded by each collector in turn
(one tracer per collector, shared by all cases as the harness shares its tracer),
twice, so a difference in the first recording that the framework's own state made
(a cache filled, a lazy import) shows as the two collectors disagreeing in both.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from tracer.collect import cbuild
from tracer.collect.ctracer import CTracer
from tracer.collect.pytrace import PythonTracer
from tracer.trace import Node


def rows(tree: Node) -> list[list[Any]]:
    return [[depth, n.frame.kind, n.frame.module, n.frame.name, n.frame.file, n.frame.line, n.count,
             n.call_lines, n.lines] for depth, n in tree.walk()]


def differences(a: Node, b: Node) -> list[dict[str, Any]]:
    ra, rb = rows(a), rows(b)
    out = [{"index": i, "python": x, "c": y} for i, (x, y) in enumerate(zip(ra, rb)) if x != y]
    if len(ra) != len(rb):
        out.append({"index": min(len(ra), len(rb)), "python": f"{len(ra)} nodes", "c": f"{len(rb)} nodes"})
    return out


def step(case: Any, pass_: str) -> Any:
    """The step the harness traces: the forward call, or the backward call on a fresh
    forward's state (run here, untraced)."""
    if pass_ == "forward":
        return case.forward
    state = case.forward()
    return lambda: case.backward(state)


def nested_recording(module: Any) -> dict[str, Any]:
    """A recording started inside a recording, by another C core (another tracer) and
    by the same one: both refused, and the outer tree goes on past them."""
    from tests import samplefw
    from tests.sample_patterns import PATTERNS

    roots = ["tests.samplefw"]
    outer, other = CTracer(module, roots), CTracer(module, roots)
    errors: list[str] = []

    def step() -> None:
        samplefw.forward(1)
        for tracer in (other, outer):
            try:
                tracer.record(lambda: samplefw.forward(2))
                errors.append("allowed")
            except RuntimeError as exc:
                errors.append(str(exc))
        samplefw.forward(3)

    tree, _ = outer.record(step)
    counts = {n.frame.name: n.count for _, n in tree.walk()}
    after = PATTERNS["branch"]  # and the core refused first records whole
    return {"errors": errors, "forward_calls": counts.get("forward", 0), "hooks_left": hooks_left(),
            "after": differences(PythonTracer(roots).record(after)[0], other.record(after)[0])}


def other_tools_hooks(module: Any) -> dict[str, Any]:
    """A profile and a trace function another tool set (coverage.py, a debugger) are
    there again after a recording, a failed one too, and still get their events."""
    from tests import samplefw
    from tests.sample_patterns import PATTERNS

    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        seen.append(event)

    def trace(frame: Any, event: str, arg: Any) -> None:
        return None

    c = CTracer(module, ["tests.samplefw"])
    sys.settrace(trace)
    sys.setprofile(profile)
    try:
        tree, _ = c.record(PATTERNS["branch"])
        kept = sys.getprofile() is profile and sys.gettrace() is trace
        try:
            c.record(samplefw.failing)
        except ValueError:
            pass
        kept_after_error = sys.getprofile() is profile and sys.gettrace() is trace
        seen.clear()
        samplefw.forward(3)
        events_after = len(seen)
    finally:
        sys.setprofile(None)
        sys.settrace(None)
    return {"kept": kept, "kept_after_error": kept_after_error, "events_after": events_after,
            "tree": differences(PythonTracer(["tests.samplefw"]).record(PATTERNS["branch"])[0], tree)}


def hooks_set_inside(module: Any) -> dict[str, Any]:
    """A step that sets a trace function of its own, or removes the profile function,
    while it is recorded. On 3.11, where the core's events come through those, an
    error naming what was replaced (before, switching lines on called the core with
    the step's function as its state: a crash); on 3.12+, where they come from
    sys.monitoring, a whole tree. What the step set is left as it set it."""
    from tests import samplefw

    def other(frame: Any, event: str, arg: Any) -> None:
        return None

    out: dict[str, Any] = {}
    for name, change in (("settrace", lambda: sys.settrace(other)), ("setprofile", lambda: sys.setprofile(None))):
        c = CTracer(module, ["tests.samplefw"])

        def step() -> None:
            samplefw.forward(1)
            change()
            for i in range(3):
                samplefw.forward(i)  # forward may branch: its line events are switched on

        try:
            tree, _ = c.record(step)
            counts = {n.frame.name: n.count for _, n in tree.walk()}
            out[name] = {"error": None, "forward_calls": counts.get("forward", 0)}
        except RuntimeError as exc:
            out[name] = {"error": str(exc)}
        out[name]["left"] = sys.gettrace() is other if name == "settrace" else sys.getprofile() is None
        sys.settrace(None)
        sys.setprofile(None)
    return out


#: New functions a step makes, for the release check.
_MADE = 300


def code_release(module: Any) -> dict[str, Any]:
    """Steps that make new framework functions (exec'd, as generated code is) and new
    classes, and call the functions and the classes' C methods: the code objects and
    classes die once the step's objects are dropped, though the core classified them,
    and its caches shrink back; the tree is the Python collector's."""
    import gc
    import weakref

    from tests import samplefw  # noqa: F401  (the roots' package, imported)

    source = "".join(f"def f{i}(x):\n    if x:\n        return x + {i}\n    return {i}\n" for i in range(_MADE))
    refs: list[Any] = []
    classes: list[Any] = []

    def step() -> int:
        ns: dict[str, Any] = {"__name__": "tests.samplefw.made"}
        exec(compile(source, "<made>", "exec"), ns)
        fns = [ns[f"f{i}"] for i in range(_MADE)]
        refs.extend(weakref.ref(fn.__code__) for fn in fns)
        for i in range(_MADE):
            cls = type(f"Made{i}", (list,), {})
            cls().append(i)  # a C method of an instance of a new class: cached by (class, method)
            classes.append(weakref.ref(cls))
        return sum(fn(1) for fn in fns)

    roots = ["tests.samplefw"]
    expected = PythonTracer(roots).record(step)[0]
    refs.clear()
    classes.clear()
    c = CTracer(module, roots)
    c.record(lambda: samplefw.forward(1))  # the tracer's own first classifications
    before = c._core.stats()
    cached = []
    for _ in range(3):
        tree, _ = c.record(step)
        gc.collect()
        now = c._core.stats()
        cached.append([now["code_objects"] - before["code_objects"], now["c_functions"] - before["c_functions"]])
    return {"made": [len(refs), len(classes)], "alive": [sum(r() is not None for r in refs),
                                                         sum(r() is not None for r in classes)],
            "cached_after": cached, "python_side": [len(c._code), len(c._alive), len(c._ctypes), len(c._cfn)],
            "nodes": tree.size(), "diffs": differences(expected, tree)[:20]}


def hooks_left() -> bool:
    """Whether a profile or trace function, or a sys.monitoring event, is still set."""
    return sys.getprofile() is not None or sys.gettrace() is not None or (
        hasattr(sys, "monitoring") and any(sys.monitoring.get_events(tool) for tool in range(6)))


def patterns() -> dict[str, Any]:
    """The sample framework's call patterns (tests/sample_patterns.py), each recorded
    twice by each collector; and what a failing step leaves behind."""
    from tests import samplefw
    from tests.sample_patterns import PATTERNS

    roots = ["tests.samplefw"]
    py, c = PythonTracer(roots), CTracer(cbuild.load(), roots)
    report: dict[str, Any] = {"python": sys.version.split()[0], "cases": []}
    for name, fn in PATTERNS.items():
        for attempt in (1, 2):  # the second time from the caches
            (a, ra), (b, rb) = py.record(fn, name), c.record(fn, name)
            report["cases"].append({"pattern": name, "attempt": attempt, "nodes": a.size(),
                                    "same_result": ra == rb, "diffs": differences(a, b)[:20]})
    report["same_sources"] = c.sources == py.sources
    try:
        c.record(samplefw.failing)
        report["error"] = None
    except ValueError as exc:
        report["error"] = str(exc)
    # after the failed step: no hook left, and the next recording is whole again
    report["hooks_left"] = hooks_left()
    tree, _ = c.record(PATTERNS["branch"], "branch")
    report["after_error"] = differences(py.record(PATTERNS["branch"], "branch")[0], tree)

    def broken(frame: Any) -> Any:
        raise RuntimeError("classification failed")

    fresh = CTracer(cbuild.load(), roots)  # nothing classified yet
    fresh._classify_code = broken  # type: ignore[method-assign]
    try:
        fresh.record(PATTERNS["branch"])
        report["classification_error"] = None
    except RuntimeError as exc:
        report["classification_error"] = str(exc)
    module = cbuild.load()
    report["nested"] = nested_recording(module)
    report["other_tools"] = other_tools_hooks(module)
    report["inside"] = hooks_set_inside(module)
    report["release"] = code_release(module)
    return report


def main(path: str) -> int:
    with open(path) as fh:
        req = json.load(fh)
    if req.get("patterns"):
        print(json.dumps(patterns()))
        return 0
    importlib.import_module(req["import"])
    probe = importlib.import_module(req["probe"])
    py = PythonTracer(req["source_roots"])
    c = CTracer(cbuild.load(), req["source_roots"])
    report: dict[str, Any] = {"cases": []}
    for prim in req["primitives"]:
        for api in req["apis"]:
            case = probe.make_case(prim, api, req["device_select"], tuple(req["shapes"][prim]))
            for _ in range(3):
                case.backward(case.forward())
                case.sync()
            for pass_ in ("forward", "backward"):
                for attempt in (1, 2):
                    trees = [tracer.record(step(case, pass_), "step")[0] for tracer in (py, c)]
                    case.sync()
                    diffs = differences(*trees)
                    if not diffs:
                        break
                report["cases"].append({"primitive": prim, "api": api, "pass": pass_, "nodes": trees[0].size(),
                                        "attempts": attempt,
                                        "lines": sum(len(n.lines) for _, n in trees[0].walk()),
                                        "diffs": diffs[:20]})
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
