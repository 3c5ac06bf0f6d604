"""JAX probe: jax.lax / jax.nn / jax.numpy (functional only; JAX has no layer API).

Each primitive is a jitted function, so the default path is the jit path; the
``nojit`` variant (JAX_DISABLE_JIT=1) runs the same code eagerly, op by op.
forward is ``jax.vjp`` (the primal and the pullback, as in training), backward
applies the pullback to a precomputed cotangent of ones. Everything runs in the
seeded NCHW layout (lax convolution takes the layout as dimension numbers).
The models' training steps (make_model_case) are in tracer/probes/jax_models.py, whose
layer level is the example library JAX ships (jax.example_libraries.stax).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

# The CUDA plugin (the GPU build's environment, jax-gpu-build) refuses to initialise
# without a CUDA runtime; its compiler runs without one (deviceless AOT compilation for a
# described GPU), so where no NVIDIA driver is loaded its version check is skipped.
if importlib.util.find_spec("jax_plugins") and importlib.util.find_spec("jax_plugins.xla_cuda12") \
        and not os.path.exists("/proc/driver/nvidia"):
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from tracer.contract import STANDIN_LIB  # noqa: E402
from tracer.probes import base, jax_models, jax_standin  # noqa: E402

if TYPE_CHECKING:  # the annotations only (jax is Any to mypy: not installed where it runs)
    from jax.extend.core import Jaxpr, JaxprEqn, Primitive

    from tracer.trace import Node

_CONV_DIMS = ("NCHW", "OIHW", "NCHW")
_POOL = (1, 1, base.POOL_K, base.POOL_K)


def gpu_available() -> bool:
    try:
        return any(d.platform in ("gpu", "cuda") for d in jax.devices())
    except RuntimeError:
        return False


def device_info(device: str) -> dict[str, str]:
    """The card and the runtime XLA's GPU client reports (its platform version: "cuda 13000")."""
    gpu = next(d for d in jax.devices() if d.platform in ("gpu", "cuda", "rocm"))
    runtime = str(getattr(gpu.client, "platform_version", "") or gpu.platform)
    plugins = sorted(f"{d.metadata['Name']} {d.version}" for d in importlib.metadata.distributions()
                     if str(d.metadata["Name"] or "").startswith(("jax-cuda", "jax_cuda", "jax-rocm", "jax_rocm")))
    return {"gpu": str(gpu.device_kind), "runtime": ", ".join([runtime, *plugins])}


def _dense(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.dot(x, w) + b


def _conv2d(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    pad = base.CONV_K // 2
    y = lax.conv_general_dilated(x, w, (1, 1), ((pad, pad), (pad, pad)), dimension_numbers=_CONV_DIMS)
    return y + b[None, :, None, None]


def _maxpool2d(x: jax.Array) -> jax.Array:
    return lax.reduce_window(x, -jnp.inf, lax.max, _POOL, _POOL, "VALID")


def _avgpool2d(x: jax.Array) -> jax.Array:
    return lax.reduce_window(x, 0.0, lax.add, _POOL, _POOL, "VALID") / (base.POOL_K * base.POOL_K)


def _batchnorm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    # Training mode: normalise with the batch statistics (biased variance), per channel.
    mean = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
    var = jnp.var(x, axis=(0, 2, 3), keepdims=True)
    return (x - mean) * lax.rsqrt(var + base.BN_EPS) * g[None, :, None, None] + b[None, :, None, None]


def _softmax(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x, axis=-1)


def _layernorm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    # jax.nn.standardize over the last axis (its default "fast" variance, mean(x^2) - mean(x)^2,
    # as flax's LayerNorm computes it), then the scale and shift
    return jax.nn.standardize(x, axis=-1, epsilon=base.LN_EPS) * g + b


def _gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)  # the exact form (jax.nn.gelu's default is the tanh one)


def _attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    # jax.nn.dot_product_attention takes B x L x H x D: the probe's B x H x L x D transposed
    # there and back; implementation=None, JAX's own choice
    bt = (0, 2, 1, 3)
    y = jax.nn.dot_product_attention(q.transpose(bt), k.transpose(bt), v.transpose(bt))
    return y.transpose(bt)


def _embedding(table: jax.Array, ids: jax.Array) -> jax.Array:
    return jnp.take(table, ids, axis=0)  # table[ids]


def _crossentropy(x: jax.Array, labels: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(x, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def _adam(p: jax.Array, m: jax.Array, v: jax.Array, t: jax.Array,
          g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One bias-corrected Adam update with jnp, as optax.adam computes it (its count an int32)."""
    a = base.ADAM
    t = t + 1
    m = a["beta1"] * m + (1 - a["beta1"]) * g
    v = a["beta2"] * v + (1 - a["beta2"]) * g * g
    tf = t.astype(jnp.float32)
    m_hat = m / (1 - a["beta1"] ** tf).astype(m.dtype)
    v_hat = v / (1 - a["beta2"] ** tf).astype(v.dtype)
    return p - a["lr"] * m_hat / (jnp.sqrt(v_hat) + a["eps"]), m, v, t


_FUNCS: dict[str, Callable[..., Any]] = {
    "layernorm": _layernorm,
    "gelu": _gelu,
    "attention": _attention,
    "embedding": _embedding,
    "crossentropy": _crossentropy,
    "adam": _adam,
    "dense": _dense,
    "conv2d": _conv2d,
    "relu": jax.nn.relu,
    "sigmoid": jax.nn.sigmoid,
    "tanh": jnp.tanh,
    "softmax": _softmax,
    "maxpool2d": _maxpool2d,
    "avgpool2d": _avgpool2d,
    "batchnorm": _batchnorm,
}


def _params(primitive: str, shape: tuple[int, ...]) -> list[np.ndarray]:
    c = shape[1] if len(shape) > 1 else 1
    if primitive == "dense":
        return [base.dense_weight(shape[1]).T.copy(), base.bias(base.DENSE_OUT)]  # (in, out)
    if primitive == "conv2d":
        return [base.conv_weight(c), base.bias(base.CONV_OUT)]  # OIHW, as torch
    if primitive == "batchnorm":
        return [base.array((c,), 3) * 0.1 + 1, base.bias(c)]
    if primitive == "layernorm":
        return [base.ln_scale(shape[-1]), base.bias(shape[-1])]
    if primitive == "attention":
        return list(base.attention_kv(shape))
    return []


#: What JAX chose by default for a primitive where it has a choice (case.info["defaults"]).
_DEFAULTS = {
    "gelu": {"gelu": "jax.nn.gelu defaults to the tanh approximation (approximate=True): the probe asks for "
                     "approximate=False, the exact erf form"},
    "attention": {"attention": "jax.nn.dot_product_attention(implementation=None): XLA's composite "
                               "(_dot_product_attention_xla: einsum, softmax, einsum) on every platform; cuDNN's "
                               "fused attention only when asked (implementation='cudnn')",
                  "layout": "B x L x H x D (the probe's B x H x L x D transposed there and back)"},
    "layernorm": {"layernorm": "jax.nn.standardize (variance algorithm 'fast': mean(x^2) - mean(x)^2, as "
                               "flax.linen.LayerNorm's default) times the scale plus the shift"},
    "embedding": {"embedding": "jnp.take(table, ids, axis=0)", "ids": "int32 (JAX's default integer: x64 off)"},
    "crossentropy": {"crossentropy": "-mean(take_along_axis(jax.nn.log_softmax(x), labels))",
                     "labels": "int32 (JAX's default integer: x64 off)"},
    "adam": {"adam": "the update written with jnp under jit, as optax.adam computes it (no optimizer object: "
                     "JAX's functional level)"},
}


def _data(primitive: str, shape: tuple[int, ...]) -> list[np.ndarray]:
    """The arguments after the differentiated ones: integer ids and labels (never
    differentiated), Adam's fixed gradient."""
    if primitive == "embedding":
        return [base.token_ids(shape)]
    if primitive == "crossentropy":
        return [base.class_labels(shape[0], shape[1])]
    return []


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    if api != "functional":
        raise base.ProbeError(f"jax has no {api!r} api: it has no layer API, only functional (jax.lax / jax.nn)")
    if primitive not in _FUNCS:
        raise base.ProbeError(f"unknown primitive {primitive}")
    dev = _device(device)
    f = jax.jit(_FUNCS[primitive])
    dtype = jnp.dtype(base.dtype())

    def put(a: np.ndarray) -> jax.Array:  # floats in the probe's dtype, integers in JAX's default int
        return jax.device_put(jnp.asarray(a, dtype if a.dtype.kind == "f" else None), dev)

    info = {"jit": not jax.config.jax_disable_jit, "layout": "NCHW" if len(shape) == 4 else "NF",
            "dtype": base.dtype(), **({"defaults": _DEFAULTS[primitive]} if primitive in _DEFAULTS else {})}
    if primitive == "adam":
        return _on(device, _adam_case(f, put, shape, dev, info))
    if primitive == "embedding":
        args = [put(base.embed_table()), *map(put, _data(primitive, shape))]
    else:
        args = [put(a) for a in (base.array(shape), *_params(primitive, shape), *_data(primitive, shape))]
    wrt = len(args) - len(_data(primitive, shape))  # the data (ids, labels) are arguments, never differentiated
    ones = jax.device_put(jnp.ones(base.output_shape(primitive, shape), dtype), dev)
    jax.block_until_ready((args, ones))
    last: list[jax.Array | None] = [None]  # what sync waits for: the latest output or gradients

    def vjp() -> tuple[jax.Array, Callable[[jax.Array], tuple[jax.Array, ...]]]:
        if wrt == len(args):
            return jax.vjp(f, *args)  # type: ignore[no-any-return]
        return jax.vjp(lambda *d: f(*d, *args[wrt:]), *args[:wrt])  # type: ignore[no-any-return]

    def forward() -> tuple[jax.Array, Callable[[jax.Array], tuple[jax.Array, ...]]]:
        y, pullback = vjp()
        last[0] = y
        return y, pullback

    def backward(state: tuple[jax.Array, Callable[[jax.Array], tuple[jax.Array, ...]]]) -> tuple[jax.Array, ...]:
        _, pullback = state
        grads = pullback(ones)
        jax.block_until_ready(grads)
        return grads

    def sync() -> None:
        if last[0] is not None:
            jax.block_until_ready(last[0])

    private = {"f": f, "args": args, "wrt": wrt, "ones": ones, "device": dev}
    return _on(device, base.Case(forward=forward, backward=backward, sync=sync, info=info, private=private))


def _adam_case(f: Callable[..., Any], put: Callable[[np.ndarray], jax.Array], shape: tuple[int, ...], dev: Any,
               info: dict[str, Any]) -> base.Case:
    """One jitted Adam update per forward call, the state (p, m, v, step) carried from call
    to call; no backward: the update is the step (``private["differentiable"]`` False:
    the op layer and the GPU evidence read the update's own program)."""
    p = put(base.array(shape))
    state = [p, jnp.zeros_like(p), jnp.zeros_like(p), jax.device_put(jnp.zeros((), jnp.int32), dev)]
    g = put(base.adam_grad(shape))
    jax.block_until_ready((state, g))

    def forward() -> jax.Array:
        state[:] = f(*state, g)
        return state[0]

    def backward(_: Any) -> None:
        raise base.ProbeError("an optimizer step has no backward pass: its forward is the update")

    def sync() -> None:
        jax.block_until_ready(state)

    private = {"f": f, "args": lambda: [*state, g], "differentiable": False, "device": dev}
    return base.Case(forward=forward, backward=backward, sync=sync, info=info, private=private)


#: The device selector of the stand-in backend (frameworks.yaml devices: standin).
STANDIN = "standin"


def device_available(device: str) -> bool:
    """The stand-in (``--device standin``) is always there: this process plays it; a GPU
    is there when JAX sees one."""
    return device == STANDIN or gpu_available()


def _device(device: str) -> Any:
    """JAX's device; the stand-in's arrays live on the host (its programs are run op by
    op by tracer.probes.jax_standin in :func:`record_ops`)."""
    if device == STANDIN:
        return jax.devices("cpu")[0]
    try:
        return jax.devices(device)[0]
    except RuntimeError as exc:
        raise base.ProbeError(f"jax has no {device!r} device: {exc}") from exc


def workload_case(build: Callable[[Any], base.Case], device: str) -> base.Case:
    """A user's own workload (tracer.contract.WorkloadProbe): ``build`` gets the
    ``jax.Device`` and runs, as its passes do, with it as JAX's default device; each
    pass waits for what it computed (JAX dispatches asynchronously). The op layer reads
    the programs the pass compiles (:func:`record_ops`)."""
    dev = _device(device)
    with jax.default_device(dev):
        case = build(dev)
    case.private["device"] = dev
    case.private["workload"] = True
    case.info.update({"jit": not jax.config.jax_disable_jit})
    return _on(device, base.within(case, lambda: jax.default_device(dev), jax.block_until_ready))


def make_model_case(model: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """A model's training step (tracer.contract.ModelProbe): tracer/probes/jax_models.py."""
    base.check_model(model, api, shape)
    return _on(device, jax_models.training_step(model, api, _device(device), shape))


def _on(device: str, case: base.Case) -> base.Case:
    """``case``, marked as the stand-in's where it runs there: its op layer then runs the
    pass's programs on the stand-in (:func:`_standin_record`)."""
    if device == STANDIN:
        case.info["standin"] = jax_standin.describe()
    return case


_HLO_STRUCTURAL = {"parameter", "constant", "tuple", "get-tuple-element"}


def _hlo_computations(text: str) -> tuple[dict[str, list[str]], str]:
    """Compiled HLO text -> {computation: instruction lines}, entry computation name."""
    comps: dict[str, list[str]] = {}
    entry, current = "", None
    for line in text.splitlines():
        s = line.strip()
        if s.endswith("{") and " -> " in s and "=" not in s.split("(", 1)[0]:
            is_entry = s.startswith("ENTRY ")
            name = s.removeprefix("ENTRY ").split(" ", 1)[0].lstrip("%")
            current = comps.setdefault(name, [])
            entry = name if is_entry else entry
        elif s == "}":
            current = None
        elif current is not None and " = " in s:
            current.append(s)
    return comps, entry


def _hlo_opcode(instr: str) -> tuple[str, str]:
    """(opcode, called computation or "") of one HLO instruction line."""
    rest = instr.split(" = ", 1)[1]
    if rest.startswith("("):  # a tuple type: skip the balanced parentheses
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                rest = rest[i + 1 :].lstrip()
                break
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else rest
    opcode = rest.split("(", 1)[0].strip()
    calls = ""
    if "calls=" in rest:
        calls = rest.split("calls=", 1)[1].split(",", 1)[0].split("}", 1)[0].strip().lstrip("%{")
    if opcode == "fusion" and "kind=" in rest:
        opcode = f"fusion({rest.split('kind=', 1)[1].split(',', 1)[0].strip()})"
        # a custom fusion names the library XLA:CPU hands it to (YNNPACK: __ynn_fusion)
        if '"fusion_config":{"kind":"' in rest:
            opcode += ":" + rest.split('"fusion_config":{"kind":"', 1)[1].split('"', 1)[0]
    elif opcode == "custom-call" and 'custom_call_target="' in rest:
        target = rest.split('custom_call_target="', 1)[1].split('"', 1)[0]
        opcode = f"custom-call:{target}"
    return opcode, calls


def _hlo_primitive(instr: str) -> str:
    """The jaxpr primitive an HLO instruction came from, by the op_name XLA keeps in its
    metadata ("jit(f)/transpose(jvp(conv_general_dilated))" -> conv_general_dilated); ""
    where it has none."""
    m = re.search(r'op_name="([^"]*)"', instr)
    if not m:
        return ""
    last = m.group(1).rsplit("/", 1)[-1]
    while "(" in last and last.endswith(")"):  # transpose(jvp(...)): the primitive inside
        last = last[last.index("(") + 1 : -1]
    return last


def _hlo_nodes(text: str, primitives: frozenset[str] | None = None) -> list[Node]:
    """The instructions XLA compiled, by opcode, fusions with what they fuse; given the
    jaxpr's ``primitives``, each under an op node of the primitive it came from (an
    instruction XLA made for an argument, a layout change of the cotangent, under
    "(the program's arguments)")."""
    comps, entry = _hlo_computations(text)

    def nodes(comp: str, depth: int) -> list[tuple[str, Node]]:
        out = []
        for instr in comps.get(comp, []):
            opcode, calls = _hlo_opcode(instr)
            if opcode in _HLO_STRUCTURAL:
                continue
            kids = [n for _, n in nodes(calls, depth + 1)] if calls and depth < 4 else []
            # an instruction of the entry computation is a kernel, in the library it calls
            # (cuDNN for __cudnn$convForward); what a fusion fused is no kernel of its own
            out.append((_hlo_primitive(instr),
                        base.op_node(opcode, "xla", _hlo_lib(opcode) if depth == 0 else "", children=kids)))
        return out

    top = nodes(entry, 0)
    if primitives is None:
        return base.merge_siblings([n for _, n in top])
    return base.merge_siblings([base.op_node(prim if prim in primitives else "(the program's arguments)", "jax",
                                             children=[n]) for prim, n in top])


#: HLO opcodes whose StableHLO op has another name
_STABLEHLO_NAMES = {"dot": "dot_general", "broadcast": "broadcast_in_dim"}
#: XLA's own layout changes: no op of the program
_HLO_LAYOUT = {"bitcast", "copy", "constant"}
#: the instructions XLA:CPU's runtime hands to Eigen (its convolution and dot thunks)
_EIGEN_THUNKS = {"convolution", "dot"}
#: custom fusions and calls, by their target's prefix: the library XLA:CPU hands them to
_CPU_LIBRARIES = (("__ynn", "YNNPACK"), ("__xnn", "XNNPACK"), ("__onednn", "oneDNN"))


def _cpu_call(opcode: str) -> str:
    """What computes an instruction of a compiled CPU program, as a library call
    ("YNNPACK: __ynn_fusion", "Eigen: convolution (XLA:CPU runtime)"); XLA's own emitted
    code is a call of "XLA" (tracer.analysis.arm_ops: the framework's own kernel)."""
    target = opcode.split(":", 1)[1] if ":" in opcode else ""
    lib = next((name for prefix, name in _CPU_LIBRARIES if target.startswith(prefix)), "")
    if lib:
        return f"{lib}: {target}"
    if opcode in _EIGEN_THUNKS:
        return f"Eigen: {opcode} (XLA:CPU runtime)"
    return f"XLA: {opcode}"


def _compiled_per_op(texts: list[str]) -> dict[str, dict[str, Any]]:
    """The per-op record of compiled CPU programs (tracer.analysis.arm_ops): for each
    StableHLO op of the program (XLA's own layout changes left out), the instructions it
    became and what computes them: the library a fusion or call is handed to, Eigen's
    thunks, or XLA's own emitted code."""
    ops: dict[str, dict[str, Any]] = {}

    def add(comps: dict[str, list[str]], comp: str, call: str, depth: int) -> None:
        for instr in comps.get(comp, []):
            opcode, calls = _hlo_opcode(instr)
            here = call or _cpu_call(opcode)
            if opcode.startswith("fusion") and calls and depth < 4:
                add(comps, calls, here, depth + 1)
                continue
            # inside a fusion, what XLA made itself (a layout transpose, a constant's
            # broadcast) keeps no op_name; an instruction of its own is a kernel either way
            if opcode in _HLO_STRUCTURAL or opcode in _HLO_LAYOUT or (depth and 'op_name="' not in instr):
                continue
            bare = opcode.split(":", 1)[0]
            name = "stablehlo." + _STABLEHLO_NAMES.get(bare, bare).replace("-", "_")
            if bare == "custom-call" and ":" in opcode:
                name = f"stablehlo.custom_call @{opcode.split(':', 1)[1]}"
            rec = ops.setdefault(name, {"count": 0, "calls": {}})
            rec["count"] += 1
            rec["calls"][here] = rec["calls"].get(here, 0) + 1

    for text in texts:
        comps, entry = _hlo_computations(text)
        add(comps, entry, "", 0)
    return ops


def _jaxpr_nodes(jaxpr: Jaxpr) -> list[Node]:
    """A closed jaxpr's equations as op nodes; a pjit's inner jaxpr nests under it."""
    out = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        kids = []
        inner = eqn.params.get("jaxpr")
        if inner is not None:
            kids = _jaxpr_nodes(getattr(inner, "jaxpr", inner))
            if eqn.params.get("name"):
                name = f"{name}:{eqn.params['name']}"
        out.append(base.op_node(name, "jax", children=kids))
    return base.merge_siblings(out)


def _held(value: Any, aval: Any) -> np.ndarray:
    """A program's argument as a host copy of the type the program was traced for: a
    Python int (optimizers.adam's step counter) is a weak int32 to the program, where
    NumPy would make it int64, and the compiled program refuses a buffer of another size;
    a typed PRNG key stays a key (a copy of its data: a donated buffer is gone after the call)."""
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(np.array(jax.random.key_data(value)), impl=jax.random.key_impl(value))
    return np.array(value, dtype=aval.dtype)


def _ran_programs(run: Callable[[], object], values: bool = False
                  ) -> tuple[list[tuple[Callable[..., Any], Sequence[Any]]], list[str]]:
    """The programs ``run()`` (a user's pass, whose programs dltrace cannot name in
    advance) dispatches, as (function, argument shapes), or with ``values`` the
    arguments themselves (host copies, taken before the call: a donated buffer is gone
    after it); and, where each was compiled for this CPU, its compiled HLO text. JAX's
    dispatch caches are cleared first, so that each jitted program (a ``jax.jit``, a
    pullback, an eager primitive's own little program) passes once through JAX's Python
    dispatch, where its closed jaxpr is read; its lowering and compiled executable stay
    cached, so nothing is compiled again (under QEMU a compile takes minutes). The pass
    runs once more for it (one more step of the user's training)."""
    from jax._src import core as jcore
    from jax._src import pjit as jpjit
    from jax._src.lib import _jax

    seen: list[tuple[Any, Any]] = []
    lowered: list[Any] = []
    original, resolve = jpjit._pjit_call_impl_python, jpjit._resolve_and_lower

    def capture(*args: Any, jaxpr: Any, **params: Any) -> Any:
        seen.append((jaxpr, [_held(a, aval) for a, aval in zip(args, jaxpr.in_avals)] if values else None))
        return original(*args, jaxpr=jaxpr, **params)

    def lower(*args: Any, **params: Any) -> Any:
        computation = resolve(*args, **params)
        lowered.append(computation)
        return computation

    # what jax.clear_caches clears of the C++ dispatch, not its lowering and compilation caches
    jpjit._cpp_pjit_cache_fun_only.clear()
    jpjit._cpp_pjit_cache_explicit_attributes.clear()
    _jax.PjitFunctionCache.clear_all()
    jpjit._pjit_call_impl_python, jpjit._resolve_and_lower = capture, lower
    try:
        jax.block_until_ready(run())
    finally:
        jpjit._pjit_call_impl_python, jpjit._resolve_and_lower = original, resolve
    out: list[tuple[Callable[..., Any], Sequence[Any]]] = []
    for closed, held in seen:
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
        # curried: a function of the arguments
        out.append((jcore.jaxpr_as_fun(closed), structs if held is None else held))
    texts: list[str] = []
    if len(lowered) == len(seen):  # one lowering per program dispatched: each one's executable
        try:
            texts = [computation.compile().as_text() for computation in lowered]
        except Exception:  # noqa: BLE001 - the programs are compiled again where they are read
            texts = []
    return out, texts


def _pass_programs(case: base.Case, pass_: str,
                   run: Callable[[], object] | None = None) -> list[tuple[Callable[..., Any], Sequence[Any]]]:
    """(function, arguments) of each program a pass runs: forward is ``jax.vjp``'s forward
    (the primal and the residuals the pullback keeps), backward the pullback with those
    residuals as parameters, then, for a model (``private["update"]``), the optimizer's
    update of the gradients. Jitting the pullback itself would close over the residuals
    as constants, and XLA would fold them: for conv2d it compiles a forward convolution
    where the step runs cuDNN's backward-data and backward-filter calls.

    ``private``: ``f`` and ``args`` (a list, or a callable giving a model's current
    arguments), differentiated with respect to the first ``wrt`` arguments (all unless
    given: a model's data are arguments of its program, never differentiated), and
    ``ones``, the output's cotangent."""
    p = case.private
    if p.get("workload"):  # a user's own step: the programs it ran, read once per pass
        key = f"programs:{pass_}"
        if key not in p:
            if run is None:
                raise base.ProbeError("a workload's programs are read from a run of its pass")
            # the stand-in (and a skeleton's check) runs them on their arguments' values
            p[key], p[f"compiled:{pass_}"] = _ran_programs(
                run, values=case.info.get("standin") is not None or bool(p.get("values")))
        ran: list[tuple[Callable[..., Any], Sequence[Any]]] = p[key]
        return ran
    f = p["f"]
    args = tuple(p["args"]() if callable(p["args"]) else p["args"])
    if not p.get("differentiable", True):  # an optimizer step: its one program is the update
        if pass_ != "forward":
            raise base.ProbeError("an optimizer step has no backward pass: its forward is the update")
        return [(f, args)]
    n = p.get("wrt", len(args))

    def vjp(*a: Any) -> Any:
        if n == len(a):
            return jax.vjp(f, *a)
        return jax.vjp(lambda *d: f(*d, *a[n:]), *a[:n])

    if pass_ == "forward":
        def vjp_forward(*a: Any) -> tuple[Any, list[jax.Array]]:
            y, pullback = vjp(*a)
            # an input or output the pullback keeps as it is (conv2d's x and w, tanh's y) is
            # forwarded around the program, not through it: returning it again would add a
            # copy the step never runs
            kept = [*jax.tree_util.tree_leaves(a), *jax.tree_util.tree_leaves(y)]
            res: list[jax.Array] = []
            for r in jax.tree_util.tree_leaves(pullback):
                if not any(r is k for k in kept):
                    kept.append(r)
                    res.append(r)
            return y, res
        return [(vjp_forward, args)]
    _, pullback = vjp(*args)
    residuals, tree = jax.tree_util.tree_flatten(pullback)

    def vjp_backward(res: list[jax.Array], ct: jax.Array) -> Any:
        return jax.tree_util.tree_unflatten(tree, res)(ct)
    programs: list[tuple[Callable[..., Any], Sequence[Any]]] = [(vjp_backward, (residuals, p["ones"]))]
    if "update" in p:
        update, uargs = p["update"](pullback(p["ones"])[0])
        programs.append((update, uargs))
    return programs


def _jaxpr(programs: list[tuple[Callable[..., Any], Sequence[Any]]]) -> list[Jaxpr]:
    return [jax.make_jaxpr(fn)(*fargs).jaxpr for fn, fargs in programs]


def record_ops(case: base.Case, pass_: str, run: Callable[[], object]) -> base.OpRecord:
    """JAX's own view, which is static: the primitives of the step's jaxpr, then the
    platform it is lowered for and the HLO instructions XLA compiled (convolution,
    fusion(kLoop) > transpose...), each with how often the program runs it. The
    programs are the ones the pass runs (:func:`_pass_programs`: a model's backward runs
    the pullback and the update, two programs, whose instructions are listed together),
    compiled here as a whole (``run`` is not needed: nothing is learnt from running it
    again). On the stand-in, the programs run there (:func:`_standin_record`)."""
    if case.info.get("standin") is not None:
        return _standin_record(case, pass_, run)
    programs = _pass_programs(case, pass_, run)
    ops = base.merge_siblings([n for jaxpr in _jaxpr(programs) for n in _jaxpr_nodes(jaxpr)])
    platform = case.private["device"].platform
    info = {"platform": platform, "jit": not jax.config.jax_disable_jit}
    if not jax.config.jax_disable_jit:
        # a workload's programs as they were compiled for its run, else compiled here
        texts = case.private.get(f"compiled:{pass_}") or \
            [jax.jit(fn).lower(*fargs).compile().as_text() for fn, fargs in programs]
        hlo = [n for text in texts for n in _hlo_nodes(text)]
        ops.append(base.op_node(f"XLA:{platform}", "xla", "XLA", children=base.merge_siblings(hlo)))
        if platform == "cpu":  # what computes each op here: the per-op ARM table's evidence
            info["per_op"] = _compiled_per_op(texts)
        if len(programs) > 1:
            info["programs"] = len(programs)
    return base.OpRecord(ops, "jax (jaxpr, compiled HLO)", info)


def _standin_record(case: base.Case, pass_: str, run: Callable[[], object]) -> base.OpRecord:
    """The pass's programs (:func:`_pass_programs`) run op by op on the stand-in
    (tracer.probes.jax_standin), each program's outputs checked against JAX's own run of
    it: the ops it executed, per program, are what a PJRT plugin had to execute
    (``standin.reached``, in first-run order)."""
    consumer = jax_standin.Consumer()
    ctx = jax_standin.context()
    programs = []
    for i, (fn, fargs) in enumerate(_pass_programs(case, pass_, run)):
        before = dict(consumer.executed.counts)
        try:
            got = jax_standin.run_program(fn, fargs, consumer, ctx)
        except Exception as exc:  # noqa: BLE001 - an op the stand-in cannot compute: the probe's one line
            raise base.ProbeError(f"the stand-in could not run program {i + 1} of the {pass_} pass: "
                                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}") \
                from None
        wrong = jax_standin.differs(got, jax.tree_util.tree_leaves(_reference(fn, fargs)))
        if wrong:
            raise base.ProbeError(f"the stand-in's run of program {i + 1} of the {pass_} pass is not JAX's: {wrong}")
        ran = {op: n - before.get(op, 0) for op, n in consumer.executed.counts.items() if n > before.get(op, 0)}
        kids = [base.op_node(op, op.split(".", 1)[0], STANDIN_LIB, n) for op, n in ran.items()]
        programs.append(base.op_node(getattr(fn, "__name__", "program"), "jax", children=kids))
    case.info["standin"]["reached"][pass_] = list(consumer.executed.counts)
    nested = consumer.executed.nested
    if nested:
        case.info["standin"].setdefault("nested", {}).update(nested)
    return base.OpRecord(base.merge_siblings(programs), "jax (StableHLO run op by op on the stand-in)",
                         {"platform": STANDIN, "programs": len(programs)})


def _reference(fn: Callable[..., Any], fargs: Sequence[Any]) -> Any:
    """JAX's own run of a program, what the stand-in's run (and a skeleton's check,
    tracer.probes.jax_skeleton) is checked against: the same
    program compiled by XLA without LLVM's optimisation passes, as the stand-in's ops are
    (jax_standin._op_options). Compiled with them, CIFAR's three programs took 7.5 s of the
    stand-in's 23 s op layer; without them, 1.8 s. They schedule and vectorise; what the
    program computes stays within the rounding :func:`jax_standin.differs` allows."""
    compiled = jax.jit(fn).lower(*fargs).compile(compiler_options={"xla_backend_optimization_level": 0})
    return compiled(*fargs)


#: The GPU platforms JAX lowers for: StableHLO for each is produced here, on the CPU.
_GPU_PLATFORMS = ("cuda", "rocm")


def _leaf_eqns(jaxpr: Jaxpr) -> list[JaxprEqn]:
    """The equations that are primitives of their own: a call (pjit, custom_jvp...)
    is looked through into its inner jaxpr."""
    out = []
    for eqn in jaxpr.eqns:
        inner = next((eqn.params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in eqn.params), None)
        if inner is not None and hasattr(getattr(inner, "jaxpr", inner), "eqns"):
            out += _leaf_eqns(getattr(inner, "jaxpr", inner))
        else:
            out.append(eqn)
    return out


def _rules(prim: Primitive) -> dict[str, str]:
    """platform -> the lowering rule JAX registers for ``prim`` there: a platform's
    own rule where it has one (conv_general_dilated on cuda and rocm), else the
    generic rule every platform shares."""
    from jax._src.interpreters import mlir

    def name(entry: object) -> str:
        rule = getattr(entry, "rule", entry)
        rule = getattr(rule, "func", rule)  # functools.partial
        return (f"{getattr(rule, '__module__', '?')}."
                f"{getattr(rule, '__qualname__', getattr(rule, '__name__', repr(rule)))}")

    out = {}
    generic = mlir._lowerings.get(prim)
    for platform in ("cpu", *_GPU_PLATFORMS):
        own = mlir._platform_specific_lowerings.get(platform, {}).get(prim)
        if own is not None:
            out[platform] = f"{name(own)} ({platform}-specific)"
        elif generic is not None:
            out[platform] = f"{name(generic)} (generic)"
    return out


def _stablehlo_ops(eqn: JaxprEqn, platform: str) -> list[str]:
    """The StableHLO (and CHLO) ops one equation lowers to for ``platform``, in order,
    custom calls with their target: the equation alone, lowered on this machine."""

    avals = [v.aval for v in eqn.invars]
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    fn = jax.jit(lambda *xs: eqn.primitive.bind(*xs, **eqn.params))
    text = fn.trace(*structs).lower(lowering_platforms=(platform,)).as_text()
    ops = []
    for line in text.splitlines():
        m = re.search(r"(?:=\s*|^\s*)\"?((?:stablehlo|chlo|mhlo)\.[a-z_]+)[\s(\"@]", line)
        if not m or m.group(1) == "stablehlo.return":
            continue
        target = re.search(r'call_target_name = "([^"]+)"|stablehlo\.custom_call @(\w+)', line)
        op = f"{m.group(1)} @{target.group(1) or target.group(2)}" if target else m.group(1)
        if op not in ops:
            ops.append(op)
    return ops


#: The GPU XLA compiles for without one (a GpuTargetConfigProto, text format): the
#: device description an NVIDIA H100 80GB HBM3 reports, with CUDA 12.8 and cuDNN 9.7.
_H100_TARGET = """
gpu_device_info { threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000 l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: 84929347584 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536 registers_per_block_limit: 65536 }
runtime_version: { major: 12 minor: 8 patch: 0 }
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 7 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def _hlo_lib(opcode: str) -> str:
    """The library a compiled HLO instruction runs in: a custom call names the library
    XLA hands it to, anything else is XLA's own code."""
    if "cudnn" in opcode:
        return "cuDNN"
    if "cublas" in opcode:
        return "cuBLAS"
    if "triton" in opcode:
        return "Triton"
    if "onednn" in opcode:
        return "oneDNN"
    return "XLA"


def _as_doc(node: Node) -> dict[str, Any]:
    """A compiled program's node as the derived trace's plain dict: a jaxpr primitive
    (module jax) with the instructions it became (module xla.cuda), with their counts."""
    module = node.frame.module if node.frame.module == "jax" else "xla.cuda"
    return {"name": node.frame.name, "module": module, "lib": node.frame.lib, "count": node.count,
            "children": [_as_doc(c) for c in node.children]}


def _compiled_for_cuda(case: base.Case, pass_: str) -> list[dict[str, Any]]:
    """The programs the pass runs (:func:`_pass_programs`) compiled by XLA's CUDA compiler
    here, deviceless, for the H100 target (the CUDA plugin's topology description): their
    top-level HLO instructions, each with how often the programs run it."""
    from jax.experimental import topologies

    topo = topologies.get_topology_desc("dltrace", "cuda", target_config=_H100_TARGET, topology="1x1x1")
    sharding = jax.sharding.SingleDeviceSharding(topo.devices[0])
    nodes = []
    for target, targs in _pass_programs(case, pass_):
        structs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), targs)
        text = jax.jit(target).trace(*structs).lower().compile().as_text()
        prims = frozenset(e.primitive.name for e in _leaf_eqns(jax.make_jaxpr(target)(*targs).jaxpr))
        nodes += _hlo_nodes(text, prims)
    return [_as_doc(n) for n in base.merge_siblings(nodes)]


def gpu_evidence(case: base.Case, pass_: str, run: Callable[[], object]) -> dict[str, Any]:
    """For each primitive of the step's jaxpr (forward: the jitted primitive;
    backward: its pullback): the lowering rule JAX registers per platform and the
    StableHLO it lowers to for cuda and rocm, lowered here without a GPU. Which
    kernels run (cuDNN, cuBLAS, fusions) is decided later, by XLA's GPU compiler."""
    programs = _pass_programs(case, pass_, run)
    eqns = [e for jaxpr in _jaxpr(programs) for e in _leaf_eqns(jaxpr)]
    ops, needs, seen = [], {}, set()
    for eqn in eqns:
        prim = eqn.primitive
        if prim.name in seen:
            continue
        seen.add(prim.name)
        rules = _rules(prim)
        kids: list[dict[str, Any]] = []
        for platform in _GPU_PLATFORMS:
            try:
                hlo = _stablehlo_ops(eqn, platform)
            except Exception as exc:  # noqa: BLE001 - a primitive that does not lower alone is a gap in its row
                hlo = [f"not lowered alone: {type(exc).__name__}"]
            kids.append({"name": f"{platform}: {rules.get(platform, 'no lowering rule')}",
                         "module": f"jax.lowering.{platform}", "lib": "JAX lowering",
                         "children": [{"name": h, "module": "stablehlo", "lib": "XLA"} for h in hlo]})
        ops.append({"name": prim.name, "module": "jax", "children": kids})
        specific = sorted(k for k, v in rules.items() if v.endswith("-specific)"))
        hlo_ops = sorted({h["name"] for k in kids for h in k["children"]})
        needs[prim.name] = {"must": True, "implement": hlo_ops, "platform_specific": specific,
                            "free": "lowered to StableHLO by JAX" + (f" (own rules for {', '.join(specific)})"
                                                                     if specific else " (one rule for every platform)")}
    evidence, info = "lowered", {}
    if importlib.util.find_spec("jax_plugins") and importlib.util.find_spec("jax_plugins.xla_cuda12"):
        try:
            cuda_hlo = _compiled_for_cuda(case, pass_)
            # the program: no library of its own (each instruction under its primitive is a kernel)
            ops.append({"name": "XLA:cuda (compiled deviceless, H100 target)", "module": "xla",
                        "children": cuda_hlo})
            chose = [h["name"] for p in cuda_hlo for h in p["children"]]
            needs["XLA:cuda (compiled deviceless, H100 target)"] = {
                "must": False, "free": "what XLA's CUDA compiler chose: " + ", ".join(dict.fromkeys(chose))}
            evidence = "compiled"
        except Exception as exc:  # noqa: BLE001 - the lowering stands without it; the trace says why
            info[f"compile_error_{pass_}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    else:
        info["compile_error"] = "the CUDA plugin is not installed here (dltrace env setup jax-gpu-build)"
    texts = {pl: [jax.jit(fn).trace(*fargs).lower(lowering_platforms=(pl,)).as_text() for fn, fargs in programs]
             for pl in ("cpu", *_GPU_PLATFORMS)}
    same = [pl for pl in _GPU_PLATFORMS if texts[pl] == texts["cpu"]]
    compiled = "; compiled deviceless by the CUDA plugin's XLA for an H100 target" if evidence == "compiled" else ""
    return {"evidence": evidence, "ops": ops,
            "provenance": {"read": f"jax {jax.__version__} lowering for {', '.join(_GPU_PLATFORMS)} "
                                   "(jax._src.interpreters.mlir lowering rules; "
                                   "jit(...).trace().lower(lowering_platforms))"
                                   + compiled,
                           "reached": "the primitives of the step's jaxpr"},
            "backend": {"key": "PJRT plugin (an XLA compiler for the StableHLO ops)", "ops": needs},
            # the whole step's StableHLO: where it is cpu's text, the split is in XLA's compilers
            "info": {"platforms": list(_GPU_PLATFORMS), f"stablehlo_same_as_cpu_{pass_}": same, **info}}
