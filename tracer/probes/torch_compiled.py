"""The compiled door of torch: what a ``torch.compile`` backend must lower for a step.

A compiler-first accelerator reaches torch through ``torch.compile``: its backend is
handed FX graphs after AOTAutograd has split the step into forward and backward
graphs and decomposed them. The list such a backend must lower is not the eager
stand-in's (out= overloads, what composite ops leave): it is the ops of those graphs,
in functional form, after the decomposition table the backend starts from. This
module records it by running the case's passes under ``torch.compile`` with a
recording backend built on torch's own AOTAutograd
(``torch._dynamo.backends.common.aot_autograd``) and the Core ATen decomposition
table (``torch._decomp.core_aten_decompositions``); each graph is then run on the CPU
by its own ``GraphModule.forward``, so the step computes as it would eagerly.

What it keeps goes into the case's ``info["compiled"]`` (the trace's meta, as the
stand-in's ``info["standin"]``): per op (OpOverload name) its input variations
(dtypes, shapes, other arguments) and how many graph nodes had each; the graphs; the
graph breaks with their reason and what ran eagerly; a compile that failed, in one
line (the pass then runs eagerly, so the trace is still written).

Imported only inside torch's environment (tracer/probes/torch.py, for ``--door compiled``).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

import torch

#: The decomposition table a backend starts from, as the trace names it.
TABLE = "torch._decomp.core_aten_decompositions() (Core ATen)"
#: The longest a non-tensor argument is written in a variation.
_ARG_CHARS = 40
#: The most tensors of a list argument (a foreach op's) written one by one.
_LIST_TENSORS = 6
#: The steps run under the recording backend before the trace's runs: an optimizer's
#: first step makes its state, and its second may recompile against it.
WARM_STEPS = 2


def _size(s: Any) -> str:
    """A dimension: its number, or its symbol where the graph is dynamic (``s0``)."""
    return str(int(s)) if str(s).isdigit() else str(s)


def _tensor(v: Any) -> str:
    return f"{str(v.dtype).replace('torch.', '')}[{', '.join(_size(s) for s in v.shape)}]"


def _describe(a: Any) -> str:
    """One argument of a graph node as a variation writes it: a tensor its dtype and
    shape (``float32[5, 3]``), anything else its value, clipped."""
    val = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
    if isinstance(val, torch.Tensor):
        return _tensor(val)
    if isinstance(val, (list, tuple)) and val and all(isinstance(x, torch.fx.Node) for x in val):
        items = [_describe(x) for x in val]
        more = f", …+{len(items) - _LIST_TENSORS}" if len(items) > _LIST_TENSORS else ""
        return f"[{', '.join(items[:_LIST_TENSORS])}{more}]"
    text = repr(val)
    return text if len(text) <= _ARG_CHARS else text[:_ARG_CHARS] + "…"


def _tensors(args: list[Any]) -> list[Any]:
    """The tensor inputs of a node, flattened (a list argument's tensors each)."""
    out = []
    for a in args:
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
            if isinstance(val, torch.Tensor):
                out.append(val)
    return out


def _name(target: Any) -> str | None:
    """The op a node calls, as the stand-in names what reached it (``aten::mm``,
    ``aten::add.Tensor``); None for Python's own (``getitem``)."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target.name())
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order::{target.name()}"
    return None


class Recorder:
    """The graphs AOTAutograd handed the backend, and what was in them."""

    def __init__(self) -> None:
        self.pass_ = "forward"  # the probe's pass whose call is compiling
        self.seen: set[str] = set()  # a recompiled graph of the same code counts once
        self.graphs: list[dict[str, Any]] = []
        self.ops: dict[str, dict[str, Any]] = {}

    def compiler(self, kind: str) -> Callable[..., Any]:
        """AOTAutograd's compiler of ``kind`` graphs (forward, backward, inference):
        record the graph, and run it as it is (its nodes computed by torch's CPU kernels)."""
        from torch._functorch.aot_autograd import make_boxed_func

        def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            self.record(kind, gm)
            return make_boxed_func(gm.forward)

        return compile_graph

    def record(self, kind: str, gm: torch.fx.GraphModule) -> None:
        key = hashlib.sha1(f"{kind}\n{gm.code}".encode()).hexdigest()
        if key in self.seen:
            return
        self.seen.add(key)
        counts: dict[str, int] = {}
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            name = _name(node.target)
            if name is None:
                continue
            counts[name] = counts.get(name, 0) + 1
            entry = self.ops.setdefault(name, {"variations": {}, "graphs": [], "from": []})
            if kind not in entry["graphs"]:
                entry["graphs"].append(kind)
            original = _name(node.meta.get("original_aten"))
            if original and original != name and original not in entry["from"]:
                entry["from"].append(original)  # the op Core ATen decomposed into this one
            args = [*node.args, *node.kwargs.values()]
            text = ", ".join(_describe(a) for a in args)
            var = entry["variations"].setdefault(text, {
                "inputs": text, "dtypes": [str(t.dtype).replace("torch.", "") for t in _tensors(args)],
                "shapes": [[int(s) if str(s).isdigit() else str(s) for s in t.shape] for t in _tensors(args)],
                "count": 0})
            var["count"] += 1
        self.graphs.append({"kind": kind, "pass": self.pass_, "nodes": sum(counts.values()), "ops": counts})


def _table_facts(ops: list[str]) -> dict[str, dict[str, bool]]:
    """Per op of the graphs, what torch says of it: tagged Core ATen, and whether
    every backend gets a kernel of it from torch (CompositeExplicitAutograd: the
    eager door's stand-in never sees it)."""
    out: dict[str, dict[str, bool]] = {}
    for name in ops:
        if not name.startswith("aten::"):
            continue
        base, _, overload = name[len("aten::"):].partition(".")
        op = getattr(getattr(torch.ops.aten, base, None), overload or "default", None)
        if op is None:
            continue
        out[name] = {"core": torch.Tag.core in op.tags,
                     "composite": bool(torch._C._dispatch_has_kernel_for_dispatch_key(
                         op.name(), "CompositeExplicitAutograd"))}
    return out


def _breaks() -> list[dict[str, Any]]:
    """The graph breaks Dynamo counted: each reason's first line, what ran eagerly
    because of it (its explanation: the call Dynamo left to Python), how many times."""
    from torch._dynamo.utils import counters

    out = []
    for text, count in counters["graph_break"].items():
        lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
        eager = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Explanation:")), "")
        context = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Developer debug context:")), "")
        out.append({"reason": lines[0] if lines else "", "eager": eager or context, "count": int(count)})
    return out


def _resumed() -> list[str]:
    """Where Dynamo took the compiled frames up again after a break (``backward line 19``)."""
    from torch._dynamo.utils import counters

    return [k.replace("torch_dynamo_resume_in_", "").replace("_at_", " line ") for k in counters["resumes"]]


def _one_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0].strip() if lines else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def describe() -> dict[str, Any]:
    """What the trace's meta says of the compiled door before anything is recorded."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    return {"evidence": "run under torch.compile with a recording backend (AOTAutograd), graphs run on this CPU",
            "unit": "ops in the FX graphs AOTAutograd hands a torch.compile backend, after decomposition",
            "backend": "torch._dynamo.backends.common.aot_autograd with a compiler that records each graph and runs "
                       "it by its GraphModule.forward",
            "decompositions": TABLE, "table_size": len(table),
            "decomposed": sorted({_name(k) or str(k) for k in table.keys()}),
            "graphs": [], "ops": {}, "facts": {}, "graph_breaks": [], "seconds": 0.0}


def compile_case(case: Any, passes: tuple[str, ...]) -> None:
    """Run ``case``'s passes under torch.compile with the recording backend from here
    on, after :data:`WARM_STEPS` steps that compile (and recompile) every graph, so the
    trace's runs time and record the compiled step, not Dynamo's tracing. A compile
    that fails is one line (``error``), and the pass runs eagerly."""
    import torch._dynamo
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    rec = Recorder()
    record = describe()
    case.info["compiled"] = record
    backend = aot_autograd(fw_compiler=rec.compiler("forward"), bw_compiler=rec.compiler("backward"),
                           inference_compiler=rec.compiler("inference"), decompositions=core_aten_decompositions())
    failed: dict[str, str] = {}

    def door(pass_: str, eager: Callable[..., Any]) -> Callable[..., Any]:
        compiled = torch.compile(eager, backend=backend)

        def run(*args: Any) -> Any:
            if pass_ in failed:
                return eager(*args)
            rec.pass_ = pass_
            try:
                return compiled(*args)
            except Exception as exc:  # noqa: BLE001 - a compile that fails is recorded; the step runs eagerly
                why = _one_line(exc)
            result = eager(*args)  # the user's own error is eager's too, and raised from here
            failed[pass_] = why
            return result

        return run

    case.forward = door("forward", case.forward)
    if "backward" in passes:
        case.backward = door("backward", case.backward)
    t0 = time.perf_counter()
    for _ in range(WARM_STEPS):
        y = case.forward()
        if "backward" in passes:
            case.backward(y)
    record.update({"seconds": round(time.perf_counter() - t0, 3), "warm_steps": WARM_STEPS, "graphs": rec.graphs,
                   "ops": {name: {"graphs": e["graphs"], "from": e["from"],
                                  "variations": list(e["variations"].values())} for name, e in rec.ops.items()},
                   "facts": _table_facts(list(rec.ops)), "graph_breaks": _breaks(), "resumed": _resumed()})
    if failed:
        record["error"] = "; ".join(f"{p}: {why}" for p, why in failed.items())
