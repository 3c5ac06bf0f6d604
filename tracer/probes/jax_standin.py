"""JAX's stand-in device: a consumer of StableHLO that runs a program op by op, each
op by a kernel of its own table, and records which ops it executed.

A new accelerator reaches JAX through a PJRT plugin, whose compiler is handed the
step's StableHLO; what that compiler must handle is what the programs the step runs
contain. Reading that from a lowering names what JAX emitted; running it names what
a backend had to execute to get the step's numbers, and proves it: each op is
computed alone, in a module of its own (nothing around it to fuse with or fold into),
so that an op off the table stops the program naming that op, and removing any one
kernel from the table breaks the step. The stand-in's kernel for every op is the op
compiled alone by XLA's CPU compiler (:func:`cpu`); CHLO ops (the exact GELU's
``chlo.erfc``) are kept as JAX emits them, as a plugin gets them. (jaxlib's StableHLO
reference interpreter would do as the kernels, but it aborts the process on CHLO,
fails on a backward convolution's dimension numbers, and takes minutes on CIFAR.)

This file is copied as it is into a JAX skeleton (``dltrace scaffold jax``), whose
op table replaces :func:`cpu` kernel by kernel; it imports nothing of dltrace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: A kernel: (the op, as MLIR's Python bindings give it; its inputs, host arrays) -> its results.
Kernel = Callable[[Any, list[np.ndarray]], list[np.ndarray]]
#: Ops that only structure a program: a function's return and a call into another function
#: of the module (the consumer follows the call), and a region's terminator.
STRUCTURAL = frozenset({"func.return", "func.call", "stablehlo.return"})


class OpRefused(Exception):
    """An op the table has no kernel for: the program cannot run on this backend."""

    def __init__(self, op: str, where: str) -> None:
        super().__init__(f"{op}: no kernel in the op table ({where})")
        self.op = op


@dataclass
class Executed:
    """What the consumer ran: each op (top-level, and inside an op's region: a reduce's
    ``stablehlo.add``) with how often, in first-run order."""

    counts: dict[str, int] = field(default_factory=dict)
    #: ops met only inside another op's region (a reduction's body): the outer op's kernel runs them
    nested: dict[str, str] = field(default_factory=dict)

    top: set[str] = field(default_factory=set)

    def add(self, name: str, inside: str = "") -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        if not inside:
            self.top.add(name)
            self.nested.pop(name, None)
        elif name not in self.top:
            self.nested.setdefault(name, inside)


def _ir() -> Any:
    from jaxlib.mlir import ir

    return ir


def context() -> Any:
    """An MLIR context with the dialects JAX emits."""
    from jax._src.interpreters import mlir as jmlir

    return jmlir.make_ir_context()


def parse(text: str, ctx: Any) -> Any:
    """The module of ``text`` (a lowered program's StableHLO, with the CHLO ops JAX emits
    as they are: a PJRT plugin's compiler is handed them so)."""
    with ctx:
        return _ir().Module.parse(text)


def _alone(op: Any) -> str:
    """The text of a module whose main function takes ``op``'s operands and returns its
    results: the op with nothing around it to fuse with or fold into."""
    ir = _ir()
    from jaxlib.mlir.dialects import func

    with op.context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            for declared in _declarations(op):  # the meshes an op's sharding names (sdy.mesh @empty_mesh)
                declared.clone()
            main = func.FuncOp("main", ir.FunctionType.get([o.type for o in op.operands],
                                                           [r.type for r in op.results]))
            block = main.add_entry_block()
            with ir.InsertionPoint(block):
                clone = op.clone()
                for i, arg in enumerate(block.arguments):
                    clone.operands[i] = arg
                func.ReturnOp(list(clone.results))
            if _calls(op):  # a region that calls the program's other functions (a while loop's body) takes them along
                for other in _functions(op):
                    other.clone()
        return str(module)


def _calls(op: Any) -> bool:
    return any(name == "func.call" for name in _nested(op))


def _top(op: Any) -> list[Any]:
    """The operations at the top of the module ``op`` is in."""
    module = op
    while module.parent is not None:
        module = module.parent
    return [f.operation for f in module.regions[0].blocks[0].operations]


def _functions(op: Any) -> list[Any]:
    """The functions of the module ``op`` is in, but its main one."""
    return [f for f in _top(op) if f.name == "func.func" and f.attributes["sym_name"].value != "main"]


def _declarations(op: Any) -> list[Any]:
    """What the module ``op`` is in declares beside its functions (Shardy's meshes, which
    a sharding constraint or a host callback's result names): an op alone needs them too."""
    return [f for f in _top(op) if f.name != "func.func"]


_COMPILED: dict[str, Any] = {}


def _op_options(xla_client: Any) -> Any:
    """How one op alone is compiled: without LLVM's optimisation passes. An op alone has
    nothing to fuse or schedule, and those passes were 40 % of a step's compile time
    (CIFAR's 272 ops: 12.0 s against 7.5 s); its results stay within :func:`differs`."""
    options = xla_client.CompileOptions()
    options.executable_build_options.debug_options.xla_backend_optimization_level = 0
    return options


def cpu(op: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """``op`` computed alone by XLA's CPU compiler (compiled once per op text, types
    and attributes): the kernel every op of the stand-in has, and the one a skeleton's
    kernel delegates to until the team replaces it."""
    import jax
    from jax._src import config, xla_bridge
    from jax._src.lib import xla_client

    if op.name == "stablehlo.custom_call" and "callback" in str(op.attributes["call_target_name"]):
        # the callback's context lives in the program JAX compiled: compiled alone, it crashes the process
        raise ValueError(f"{op.attributes['call_target_name']}: a host callback (jax.pure_callback, io_callback, "
                         "debug.callback) calls back into the step's Python, which an op run alone cannot")
    text = _alone(op)
    backend = xla_bridge.get_backend("cpu")
    device = backend.local_devices()[0]
    exe = _COMPILED.get(text)
    if exe is None:
        exe = backend.compile_and_load(text, executable_devices=xla_client.DeviceList((device,)),
                                       compile_options=_op_options(xla_client))
        _COMPILED[text] = exe
    with config.enable_x64(True):  # a 64-bit value between two ops (threefry's) is put as it is
        out = exe.execute([jax.device_put(a, device) for a in inputs])
    return [np.asarray(o) for o in out]


def _nested(op: Any) -> list[str]:
    """The ops inside ``op``'s regions (a reduce's body, a while loop's), and inside the
    functions those call (dropout's threefry: a loop body calling the program's
    ``closed_call``), iteratively, each function once."""
    out: list[str] = []
    stack = [r for r in op.regions]
    functions: dict[str, Any] | None = None
    seen: set[str] = set()
    while stack:
        region = stack.pop()
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                out.append(inner.name)
                stack.extend(inner.regions)
                if inner.name == "func.call":
                    callee = inner.attributes["callee"].value
                    if functions is None:
                        functions = {f.attributes["sym_name"].value: f for f in _functions(op)}
                    if callee not in seen and callee in functions:
                        seen.add(callee)
                        stack.extend(functions[callee].regions)
    return out


class Consumer:
    """Runs a StableHLO module op by op: ``kernels`` (op name -> kernel) is the table;
    without one, every op is computed by :func:`cpu` (the stand-in device, which
    registers a kernel for every op and records which ran)."""

    def __init__(self, kernels: Mapping[str, Kernel] | None = None) -> None:
        self.kernels = kernels
        self.executed = Executed()

    def kernel(self, name: str, where: str) -> Kernel:
        if self.kernels is None:
            return cpu
        if name not in self.kernels:
            raise OpRefused(name, where)
        return self.kernels[name]

    def run(self, module: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The module's main function on ``inputs`` (host arrays, in its arguments' order)."""
        functions = {f.operation.attributes["sym_name"].value: f.operation for f in module.body.operations
                     if f.operation.name == "func.func"}
        return self._call(functions, "main", list(inputs))

    def _call(self, functions: dict[str, Any], name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        fn = functions[name]
        block = fn.regions[0].blocks[0]
        values: dict[Any, np.ndarray] = dict(zip(block.arguments, inputs))
        for op in block.operations:
            op = op.operation
            kind = op.name
            args = [values[v] for v in op.operands]
            if kind == "func.return":
                return args
            if kind == "func.call":
                results = self._call(functions, op.attributes["callee"].value, args)
            else:
                inside = [inner for inner in _nested(op) if inner not in STRUCTURAL]
                for inner in inside:
                    self.kernel(inner, f"inside {kind}")
                results = self.kernel(kind, f"in {name}")(op, args)
                self.executed.add(kind)
                for inner in inside:
                    self.executed.add(inner, inside=kind)
            values.update(zip(op.results, results))
        raise ValueError(f"function {name} has no return")


def describe() -> dict[str, Any]:
    """What the trace's meta says of the stand-in: never a GPU, a run on this CPU."""
    return {"evidence": "run on the stand-in device",
            "unit": "StableHLO ops the stand-in executed (what a PJRT plugin's compiler must handle)",
            "backend": "a StableHLO consumer (as a PJRT plugin's compiler is handed the step's programs): each op "
                       "of each program the step runs is executed by a kernel of its own, here the op alone "
                       "compiled by XLA's CPU compiler, and recorded",
            "registered_by_name": [], "reached": {}}


def _is_key(value: Any) -> bool:
    import jax

    dtype = getattr(value, "dtype", None)
    return dtype is not None and bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def host(value: Any) -> np.ndarray:
    """A program's input or output as the buffer a backend holds: a typed PRNG key
    (``jax.random.key``) is its key data (uint32), as the lowered program takes it."""
    import jax

    return np.asarray(jax.random.key_data(value)) if _is_key(value) else np.asarray(value)


def run_program(fn: Callable[..., Any], args: Sequence[Any], consumer: Consumer, ctx: Any) -> list[np.ndarray]:
    """``fn`` (a program the step runs) lowered for ``args`` and run by ``consumer``: its
    outputs, flat. Every argument is kept (``keep_unused``): the program's parameters
    are then the arguments' leaves in order."""
    import jax

    flat = jax.tree_util.tree_leaves(args)
    module = parse(jax.jit(fn, keep_unused=True).trace(*args).lower().as_text(), ctx)
    with ctx:
        return consumer.run(module, [host(a) for a in flat])


def differs(got: Sequence[np.ndarray], want: Sequence[Any], rtol: float = 1e-4, atol: float = 1e-5) -> str:
    """Where ``got`` (the consumer's outputs) is not ``want`` (JAX's own run of the
    program): "" when every output matches. Per-op execution rounds as XLA's fused
    program does not, and through a deep network (MobileNetV2's forward: 1.9e-5 on a
    batch norm's residual) that adds up, hence a tolerance on each output's own scale:
    its largest difference within ``atol + rtol`` times its largest magnitude."""
    if len(got) != len(want):
        return f"{len(got)} outputs, JAX's program gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        w = host(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i} is {g.dtype}{list(g.shape)}, JAX's is {w.dtype}{list(w.shape)}"
        if g.dtype.kind in "fc":
            a, b = g.astype(np.float64), w.astype(np.float64)
            finite = np.isfinite(b)
            if not np.array_equal(np.isnan(a), np.isnan(b)) or not np.array_equal(a[~finite], b[~finite]):
                return f"output {i} differs from JAX's (where it is not finite)"
            worst = float(np.max(np.abs(a[finite] - b[finite]))) if finite.any() else 0.0
            scale = float(np.max(np.abs(b[finite]))) if finite.any() else 0.0
            if worst > atol + rtol * scale:
                return f"output {i} differs from JAX's (max |difference| {worst:.3g}, largest |value| {scale:.3g})"
        elif not np.array_equal(g, w):
            return f"output {i} differs from JAX's"
    return ""
