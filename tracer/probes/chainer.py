"""Chainer probe: chainer.functions (functional) and chainer.links (layer).

Primitives without a link (activations, pooling, GELU, attention) run at the layer
level as the same functions called from a ``chainer.Sequential``, so that level goes
through the link machinery. Chainer accumulates gradients into leaf variables, so
``backward`` clears them first (as a training step's ``cleargrads`` would). Adam's
step is an update rule, not a FunctionNode: its functional level drives chainer's
AdamRule on a Parameter, its layer level chainer.optimizers.Adam on a Link.

Chainer computes with NumPy, which has no bfloat16: float32 and float16 only
(``base.dtype()``, chainer.config.dtype while the case is built).
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from tracer.probes import base, chainer_models

if TYPE_CHECKING:
    import ast


def gpu_available() -> bool:
    try:
        return bool(chainer.backends.cuda.available)
    except Exception:  # noqa: BLE001 - a broken CUDA set-up means no GPU
        return False


def _pool(primitive: str) -> Callable[[chainer.Variable], chainer.Variable]:
    if primitive == "maxpool2d":
        # cover_all=False: floor the output size, as torch and mxnet do.
        return functools.partial(F.max_pooling_2d, ksize=base.POOL_K, stride=base.POOL_K, cover_all=False)
    return functools.partial(F.average_pooling_2d, ksize=base.POOL_K, stride=base.POOL_K)


def _dtype() -> type:
    """The NumPy type the case computes in (base.dtype()); NumPy has no bfloat16."""
    name = base.dtype()
    if name == "bfloat16":
        raise base.ProbeError("chainer computes with NumPy, which has no bfloat16 (float32 and float16 only)")
    return cast(type, getattr(np, name))


def _attention(q: chainer.Variable, k: chainer.Variable, v: chainer.Variable) -> chainer.Variable:
    """softmax(q k^T / sqrt(D)) v over the last two axes: chainer 7 has no attention function."""
    scores = F.matmul(q, k, transb=True) * (1.0 / math.sqrt(q.shape[-1]))
    return F.matmul(F.softmax(scores, axis=scores.ndim - 1), v)


#: What the probe builds from chainer's primitives, where chainer 7 has no function or link
#: for it (the case's info["built_from_primitives"], at the levels it applies to).
BUILT = {
    "gelu": "no GELU in chainer 7 (chainer.functions nor links): built as 0.5 * x * (1 + F.erf(x / sqrt(2))), "
            "the exact form; the layer level calls it from a chainer.Sequential",
    "attention": "no attention function or link in chainer 7: built from F.matmul (batched, transb), a scale "
                 "and F.softmax; the layer level calls it from a chainer.Sequential",
}
#: Primitives with no link of their own: the layer level runs the function in a link.
NO_LINK = {
    "crossentropy": "no cross-entropy link in chainer 7: L.Classifier (the link chainer computes a loss with, "
                    "lossfun F.softmax_cross_entropy) around an identity predictor",
}


def _functional(primitive: str, x: chainer.Variable,
                dev: chainer.backend.Device) -> tuple[Callable[[], chainer.Variable], list[chainer.Variable]]:
    c = x.shape[1] if x.ndim > 1 else 1
    dtype = _dtype()
    param: Callable[[Any], chainer.Variable] = lambda a: chainer.Variable(dev.send(a.astype(dtype)))  # noqa: E731
    if primitive == "dense":
        w, b = param(base.dense_weight(x.shape[1])), param(base.bias(base.DENSE_OUT))
        return (lambda: F.linear(x, w, b)), [w, b]
    if primitive == "conv2d":
        w, b = param(base.conv_weight(c)), param(base.bias(base.CONV_OUT))
        return (lambda: F.convolution_2d(x, w, b, stride=1, pad=1)), [w, b]
    if primitive == "relu":
        return (lambda: F.relu(x)), []
    if primitive == "sigmoid":
        return (lambda: F.sigmoid(x)), []
    if primitive == "tanh":
        return (lambda: F.tanh(x)), []
    if primitive == "softmax":
        axis = x.ndim - 1  # the last axis, as the other probes
        return (lambda: F.softmax(x, axis=axis)), []
    if primitive in ("maxpool2d", "avgpool2d"):
        pool = _pool(primitive)
        return (lambda: pool(x)), []
    if primitive == "batchnorm":
        g, b = param(base.array((c,), 3) * 0.1 + 1), param(base.bias(c))
        xp = dev.xp
        mean, var = dev.send(xp.zeros(c, dtype=dtype)), dev.send(xp.ones(c, dtype=dtype))
        return (
            lambda: F.batch_normalization(x, g, b, eps=base.BN_EPS, running_mean=mean, running_var=var,
                                          decay=base.BN_MOMENTUM)
        ), [g, b]
    if primitive == "layernorm":
        g, b = param(base.ln_scale(x.shape[-1])), param(base.bias(x.shape[-1]))
        return (lambda: F.layer_normalization(x, g, b, eps=base.LN_EPS)), [g, b]
    if primitive == "gelu":
        return (lambda: chainer_models.gelu(x)), []
    if primitive == "attention":
        k, v = (param(a) for a in base.attention_kv(x.shape))
        return (lambda: _attention(x, k, v)), [k, v]
    if primitive == "embedding":  # x: the ids, an integer array (no gradient)
        w = param(base.embed_table())
        return (lambda: F.embed_id(x, w)), [w]
    if primitive == "crossentropy":
        t = dev.send(base.class_labels(x.shape[0], x.shape[1]))
        return (lambda: F.softmax_cross_entropy(x, t)), []  # reduce="mean": the batch's mean
    raise base.ProbeError(f"unknown primitive {primitive}")


def _layer(primitive: str, x: chainer.Variable,
           dev: chainer.backend.Device) -> tuple[Callable[[], chainer.Variable], list[chainer.Variable]]:
    c = x.shape[1] if x.ndim > 1 else 1
    if primitive == "dense":
        m = L.Linear(
            x.shape[1], base.DENSE_OUT,
            initialW=base.dense_weight(x.shape[1]), initial_bias=base.bias(base.DENSE_OUT),
        )
    elif primitive == "conv2d":
        m = L.Convolution2D(
            c, base.CONV_OUT, base.CONV_K, stride=1, pad=1,
            initialW=base.conv_weight(c), initial_bias=base.bias(base.CONV_OUT),
        )
    elif primitive == "batchnorm":
        m = L.BatchNormalization(c, eps=base.BN_EPS)
    elif primitive == "layernorm":
        f = x.shape[-1]
        const = chainer.initializers.Constant  # an array as initial_gamma would be called as an initializer
        m = L.LayerNormalization(f, eps=base.LN_EPS, initial_gamma=const(base.ln_scale(f)),
                                 initial_beta=const(base.bias(f)))
    elif primitive == "embedding":
        m = L.EmbedID(base.EMBED_VOCAB, base.EMBED_DIM, initialW=base.embed_table())
    elif primitive == "gelu":
        m = chainer.Sequential(chainer_models.gelu)
    elif primitive == "attention":
        m = chainer.Sequential(_attention)
        k, v = (chainer.Variable(dev.send(a.astype(x.dtype))) for a in base.attention_kv(x.shape))
        m.to_device(dev)
        return (lambda: m(x, k, v)), [k, v]
    elif primitive == "crossentropy":
        m = L.Classifier(lambda y: y, lossfun=F.softmax_cross_entropy)
        m.compute_accuracy = False
        t = dev.send(base.class_labels(x.shape[0], x.shape[1]))
        m.to_device(dev)
        return (lambda: m(x, t)), []
    elif primitive in ("relu", "sigmoid", "tanh"):
        m = chainer.Sequential(getattr(F, primitive))
    elif primitive == "softmax":
        m = chainer.Sequential(functools.partial(F.softmax, axis=x.ndim - 1))
    elif primitive in ("maxpool2d", "avgpool2d"):
        m = chainer.Sequential(_pool(primitive))
    else:
        raise base.ProbeError(f"unknown primitive {primitive}")
    m.to_device(dev)
    # a Link keeps its parameters' names in a set: the order is the probe's own (the layer's arguments')
    order = {"layernorm": ["gamma", "beta"]}.get(primitive)
    return (lambda: m(x)), [getattr(m, n) for n in order] if order else sorted(m.params(), key=lambda p: p.name)


def _adam(api: str, dev: chainer.backend.Device, shape: tuple[int, ...]) -> tuple[Callable[[], Any], str]:
    """One Adam step per call, from a fixed gradient: AdamRule on a Parameter (functional),
    chainer.optimizers.Adam on a Link (layer). Returns (the step, what it runs)."""
    A, dtype = base.ADAM, _dtype()
    hyper = dict(alpha=A["lr"], beta1=A["beta1"], beta2=A["beta2"], eps=A["eps"])
    grad = dev.send(base.adam_grad(shape).astype(dtype))
    if api == "functional":
        p = chainer.Parameter(dev.send(base.array(shape).astype(dtype)))
        rule = chainer.optimizers.adam.AdamRule(**hyper)
        if dtype == np.float16:
            rule.use_fp32_update()

        def step() -> chainer.Parameter:
            p.grad = grad
            rule.update(p)  # t += 1, then update_core_cpu/gpu on the arrays
            return p
        return step, "chainer.optimizers.adam.AdamRule.update on a chainer.Parameter (no Optimizer, no Link)"
    link = chainer.Link()
    with link.init_scope():
        link.p = chainer.Parameter(base.array(shape).astype(dtype))
    link.to_device(dev)
    opt = chainer.optimizers.Adam(**hyper)
    opt.setup(link)
    if dtype == np.float16:
        opt.use_fp32_update()

    def update() -> chainer.Parameter:
        link.p.grad = grad
        opt.update()  # the gradients are there: no loss function
        return link.p
    return update, "chainer.optimizers.Adam.update on a chainer.Link (its AdamRule per parameter)"


def _no_backward(state: Any) -> None:
    raise base.ProbeError("an optimizer step has no backward pass: its forward is the update")


def _info(primitive: str, api: str) -> dict[str, Any]:
    """What a new primitive's case records of chainer's choices (meta: dtype, defaults, built_from_primitives)."""
    info: dict[str, Any] = {"dtype": base.dtype()}
    defaults: dict[str, Any] = {}
    if primitive in BUILT:
        info["built_from_primitives"] = {primitive: BUILT[primitive]}
    if primitive == "crossentropy" and api == "layer":
        info["built_from_primitives"] = {primitive: NO_LINK[primitive]}
    if primitive == "gelu":
        defaults["gelu"] = "none in chainer 7; the exact (erf) form built here"
        defaults["erf_cpu"] = ("scipy.special.erf" if _has("scipy") else
                               "numpy.vectorize(math.erf): no SciPy in this environment (chainer's slow fallback)")
    if primitive == "layernorm":
        defaults["eps"] = "F.layer_normalization 1e-5, L.LayerNormalization 1e-6: LN_EPS 1e-5 passed"
    if primitive == "embedding":
        defaults["ids"] = "int64 (any signed integer type: F.embed_id checks the kind); L.EmbedID's own " \
                          "initialisation Normal(1.0), the table from base here"
    if primitive == "crossentropy":
        defaults["reduce"] = "F.softmax_cross_entropy reduce='mean', normalize=True: the mean over the batch"
    if primitive == "adam":
        defaults["adam"] = ("chainer's defaults are torch's (alpha 1e-3, betas 0.9/0.999, eps 1e-8); its "
                            "bias correction is folded into the step size (alpha_t = alpha sqrt(1-beta2^t)/"
                            "(1-beta1^t)) and eps is added to sqrt(v) uncorrected, so the update differs from "
                            "torch's by eps (1 - sqrt(1-beta2^t)) in the denominator")
        if base.dtype() == "float16":
            # without it m and v are float16: v = (1-beta2) g^2 underflows and the step becomes alpha_t / eps
            defaults["fp32_update"] = ("use_fp32_update(): a float32 master copy of the float16 parameter, its m "
                                       "and v in float32 (chainer's default keeps them float16, where v underflows "
                                       "and a step of alpha_t / eps moved the parameter by 11 here)")
    if defaults:
        info["defaults"] = defaults
    return info


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    dev = chainer.get_device(device)
    dtype = _dtype()
    sync = dev.device.synchronize if isinstance(dev, chainer.backend.GpuDevice) else base._noop
    info = _info(primitive, api)
    with chainer.using_config("dtype", dtype):  # the links' own parameters (BatchNormalization's)
        if primitive == "adam":
            step, how = _adam(api, dev, shape)
            info["update"] = how
            return base.Case(forward=step, backward=_no_backward, sync=sync, info=info)
        if primitive == "embedding":  # integer ids: no gradient, not a leaf
            ids = dev.send(base.token_ids(shape))
            run, leaves = (_functional if api == "functional" else _layer)(primitive, ids, dev)
        else:
            x = chainer.Variable(dev.send(base.array(shape).astype(dtype)))
            run, params = (_functional if api == "functional" else _layer)(primitive, x, dev)
            leaves = [x, *params]
    grad = dev.send(dev.xp.ones(base.output_shape(primitive, shape), dtype=dtype))

    def backward(y: chainer.Variable) -> None:
        for v in leaves:
            v.cleargrad()
        y.grad = grad
        y.backward()

    return base.Case(forward=run, backward=backward, sync=sync, info=info, private={"leaves": leaves})


def workload_case(build: Callable[[Any], base.Case], device: str) -> base.Case:
    """A user's own workload (tracer.contract.WorkloadProbe): ``build`` gets the
    chainer device (``chainer.get_device("@numpy")``, "@cupy:0") and runs, as its passes
    do, under ``chainer.using_device`` of it, in training mode."""
    dev = chainer.get_device(device)
    np.random.seed(0)
    with chainer.using_device(dev), chainer.using_config("train", True):
        case = build(dev)
    case.info.update({"use_ideep": chainer.config.use_ideep})

    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        with chainer.using_device(dev), chainer.using_config("train", True):
            yield

    return base.within(case, scope)


def make_model_case(model: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """A model's training step (tracer.contract.ModelProbe): chainer.functions or links,
    the loss, the gradients and the optimizer's update (tracer/probes/chainer_models.py)."""
    return chainer_models.training_step(model, api, device, shape)


class _OpHook(chainer.FunctionHook):  # type: ignore[misc]  # chainer is Any to mypy: an untyped base
    """Records each FunctionNode's forward and backward, with wall-clock intervals."""

    name = "dltrace_ops"

    def __init__(self) -> None:
        import time

        self._now = time.perf_counter_ns
        self.events: list[base.OpEvent] = []
        self._open: list[tuple[str, str, int]] = []

    def _pre(self, function: chainer.FunctionNode, what: str) -> None:
        # the class, not its label: basic_math labels an op by its operands ("_ * 0.5"),
        # so one operator would be as many ops as constants; a backend implements MulConstant
        self._open.append((f"{type(function).__name__}.{what}", type(function).__module__, self._now()))

    def _post(self, function: chainer.FunctionNode, what: str) -> None:
        name, module, t0 = self._open.pop()
        self.events.append(base.OpEvent(name, t0, self._now(), module))

    def forward_preprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...]) -> None:
        self._pre(function, "forward")

    def forward_postprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...]) -> None:
        self._post(function, "forward")

    def backward_preprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...],
                            out_grad: tuple[Any, ...]) -> None:
        self._pre(function, "backward")

    def backward_postprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...],
                             out_grad: tuple[Any, ...]) -> None:
        self._post(function, "backward")


class _After(chainer.FunctionHook):  # type: ignore[misc]  # chainer is Any to mypy: an untyped base
    """Calls back as each FunctionNode's forward or backward returns (tracer.contract.OpHooks)."""

    name = "dltrace_after"

    def __init__(self, after: Callable[[str], None]) -> None:
        self._after = after

    def forward_postprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...]) -> None:
        self._after(f"{type(function).__name__}.forward")

    def backward_postprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...],
                             out_grad: tuple[Any, ...]) -> None:
        self._after(f"{type(function).__name__}.backward")


@contextlib.contextmanager
def op_hooks(after: Callable[[str], None]) -> Iterator[None]:
    """tracer.contract.OpHooks: ``after(op)`` as each FunctionNode's forward or backward
    returns, and as each parameter's update rule returns, named as the op layer names
    them (Convolution2DFunction.forward, MomentumSGDRule.update: a rule's update is array
    code, never a FunctionNode, so the FunctionHook alone would leave the optimizer out
    of the per-op table). Chainer's kernels are NumPy's: what a vendor library reported
    while an op ran (iDeep's oneDNN, where it is on) is that op's; OpenBLAS reports
    nothing per call."""
    method = vars(chainer.optimizer.UpdateRule)["update"]

    @functools.wraps(method)
    def update(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            after(f"{type(self).__name__}.update")

    chainer.optimizer.UpdateRule.update = update
    try:
        with _After(after):
            yield
    finally:
        chainer.optimizer.UpdateRule.update = method


@contextlib.contextmanager
def _optimizer_updates(events: list[base.OpEvent]) -> Iterator[None]:
    """The optimizer's work as op records: chainer runs an update as plain array code
    (each parameter's UpdateRule.update_core_cpu/gpu), never a FunctionNode, so no
    FunctionHook sees it. GradientMethod.update (the optimizer) and UpdateRule.update
    (one per parameter: SGDRule, MomentumSGDRule, AdamRule) are timed while recording."""
    import time

    def timed(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return method(self, *args, **kwargs)
            finally:
                events.append(base.OpEvent(f"{type(self).__name__}.update", t0, time.perf_counter_ns(),
                                           type(self).__module__))
        return wrapper

    targets = [(chainer.optimizer.GradientMethod, "update"), (chainer.optimizer.UpdateRule, "update")]
    saved = [(cls, name, vars(cls)[name]) for cls, name in targets]
    try:
        for cls, name, method in saved:
            setattr(cls, name, timed(method))
        yield
    finally:
        for cls, name, method in saved:
            setattr(cls, name, method)


def record_ops(case: base.Case, pass_: str, run: Callable[[], object]) -> base.OpRecord:
    """Chainer's FunctionNodes as they run (a FunctionHook's forward/backward
    pre/post-process), nested by time: Convolution2DFunction.forward, and in
    backward Convolution2DGradW.forward... (a backward runs new FunctionNodes); and an
    optimizer's update with its rules (MomentumSGD.update > MomentumSGDRule.update)."""
    hook = _OpHook()
    with hook, _optimizer_updates(hook.events):
        run()
        case.sync()
    info = {"use_ideep": chainer.config.use_ideep}
    return base.OpRecord(base.nest(hook.events), "chainer.FunctionHook", info)


# ----------------------------------------------------------------------------- GPU evidence: source


class _Reached(chainer.FunctionHook):  # type: ignore[misc]  # chainer is Any to mypy: an untyped base
    """The FunctionNode classes a step runs (forward, and those a backward runs)."""

    name = "dltrace_reached"

    def __init__(self) -> None:
        self.classes: list[type] = []

    def forward_preprocess(self, function: chainer.FunctionNode, in_data: tuple[Any, ...]) -> None:
        if type(function) not in self.classes:
            self.classes.append(type(function))


@contextlib.contextmanager
def _rules_reached(classes: list[type]) -> Iterator[None]:
    """The update rules a step runs (AdamRule...): an optimizer's work is array code in
    each rule's update_core_cpu/gpu, never a FunctionNode, so no FunctionHook sees it."""
    method = vars(chainer.optimizer.UpdateRule)["update"]

    @functools.wraps(method)
    def update(self: Any, *args: Any, **kwargs: Any) -> Any:
        if type(self) not in classes:
            classes.append(type(self))
        return method(self, *args, **kwargs)

    chainer.optimizer.UpdateRule.update = update
    try:
        yield
    finally:
        chainer.optimizer.UpdateRule.update = method


def _entry(cls: type) -> str:
    """Where a class's device path starts: an update rule's update_core_gpu (cpu), a
    function's forward_gpu (cpu)."""
    return "update_core" if issubclass(cls, chainer.optimizer.UpdateRule) else "forward"


def _methods(cls: type) -> dict[str, tuple[type, ast.FunctionDef]]:
    """name -> (defining class, ast.FunctionDef) for the methods ``cls`` defines or
    inherits from chainer's own function classes (not FunctionNode's machinery)."""
    import ast
    import inspect
    import textwrap

    out: dict[str, tuple[type, ast.FunctionDef]] = {}
    for klass in reversed(cls.__mro__):
        if (klass in (chainer.FunctionNode, chainer.Function, chainer.optimizer.UpdateRule, object)
                or not klass.__module__.startswith("chainer.")):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        # the source of a class parses to one statement, the class
        for node in cast("ast.ClassDef", tree.body[0]).body:
            if isinstance(node, ast.FunctionDef):
                out[node.name] = (klass, node)
    return out


#: Conditions whose true arm runs on the CPU alone: iDeep (oneDNN for NumPy arrays on
#: Intel CPUs) never takes a CuPy array, so a GPU path never enters that arm.
_CPU_ONLY = ("should_use_ideep", "inputs_all_ready", "_config_use_ideep")


def _calls(func: ast.AST, gpu: bool = False) -> list[str]:
    """The dotted names a method calls, in source order (``cuda.cudnn.convolution_forward``);
    with ``gpu``, not those in an arm only the CPU can take (``self._forward_ideep()``
    under ``if intel64.should_use_ideep(...)``)."""
    import ast

    skip: set[int] = set()
    if gpu:
        for node in ast.walk(func):
            if isinstance(node, ast.If) and any(k in ast.unparse(node.test) for k in _CPU_ONLY):
                skip.update(id(n) for part in [node.test, *node.body] for n in ast.walk(part))
    names = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and id(node) not in skip:
            name = ast.unparse(node.func)
            if "(" not in name and name not in names:
                names.append(name)
    return names


def _is_decision(call: str) -> bool:
    """A call that decides between a library and CuPy (``chainer.should_use_cudnn``): the
    decision, listed with the calls, never a kernel of a library."""
    return call.lower().endswith("should_use_cudnn")


def _call(c: str) -> dict[str, str]:
    return {"name": c, "module": "decision"} if _is_decision(c) else {"name": c, "module": "call", "lib": _lib(c)}


def _lib(call: str) -> str:
    """The library a GPU method's call lands in."""
    low = call.lower()
    if "cudnn" in low and not _is_decision(call):
        return "cuDNN"
    if call.startswith(("cuda.", "cupy.", "xp.", "chainer.backends.cuda.")) or ".cupy." in call:
        return "CuPy"
    return ""


def _path_methods(cls: type, device: str = "gpu") -> list[str]:
    """The methods on a device's path: forward_gpu (forward_cpu), an update rule's
    update_core_gpu (cpu), and the helpers it calls on self, transitively; a class
    without it runs ``forward`` (array-module generic)."""
    methods = _methods(cls)
    entry = _entry(cls)
    start = f"{entry}_{device}" if f"{entry}_{device}" in methods else entry
    todo, seen = [start], []
    while todo:
        name = todo.pop(0)
        if name in seen or name not in methods:
            continue
        seen.append(name)
        todo += [c[len("self."):] for c in _calls(methods[name][1], gpu=device == "gpu") if c.startswith("self.")]
    return seen


def _device_impls(cls: type, path: list[str]) -> dict[type, set[str]]:
    """Device implementation classes a path picks at run time through a module-level
    selector (batch_normalization's ``_impl_selector`` -> _CudnnBatchNormalizationImpl):
    the module's classes with cuDNN/GPU/CUDA in their name that such a function names,
    and where the path calls a method of such an object (``self._impl.backward``) only
    that method: class -> the methods called (empty: not known, all of them)."""
    import ast
    import inspect
    import sys
    import textwrap

    module = sys.modules[cls.__module__]
    methods = _methods(cls)
    found: dict[type, set[str]] = {}
    for name in path:
        for call in _calls(methods[name][1], gpu=True):
            parts = call.split(".")
            if len(parts) == 3 and parts[0] == "self" and parts[1] not in methods:
                # self._impl.backward: an impl object the forward chose, of a device class here
                for n, c in vars(module).items():
                    if (inspect.isclass(c) and any(k in n.lower() for k in ("cudnn", "gpu", "cuda"))
                            and parts[2] in vars(c)):
                        found.setdefault(c, set()).add(parts[2])
                continue
            call = call[len("self."):] if call.startswith("self.") and call[len("self."):] not in methods else call
            fn = getattr(module, call, None)
            if "." in call or not inspect.isfunction(fn):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            except (OSError, TypeError, SyntaxError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Name):
                    continue
                target = getattr(module, node.id, None)
                if inspect.isclass(target) and any(k in node.id.lower() for k in ("cudnn", "gpu", "cuda")):
                    found.setdefault(target, set())
    return found


def _function_doc(cls: type) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(the op node, its backend need, forward_cpu's calls) for one FunctionNode class."""
    import ast
    import inspect

    methods = _methods(cls)
    kids: list[dict[str, Any]] = []
    implement: list[str] = []
    decisions: list[str] = []
    for name in _path_methods(cls):
        klass, func = methods[name]
        calls = [c for c in _calls(func, gpu=True) if not c.startswith("self.")]
        decisions += [ast.unparse(n) for n in ast.walk(func) if isinstance(n, ast.Call)
                      and ast.unparse(n.func).endswith("should_use_cudnn")]
        source_file = inspect.getsourcefile(klass)
        assert source_file is not None  # _methods parsed the class's source from it
        where = (f"{source_file.split('site-packages/')[-1]}:"
                 f"{func.lineno + inspect.getsourcelines(klass)[1] - 1}")
        kids.append({"name": f"{klass.__name__}.{name}", "module": klass.__module__, "lib": "chainer",
                     "children": [_call(c) for c in calls if _lib(c) or _is_decision(c)]})
        implement.append(f"{klass.__name__}.{name} ({where})")
    for impl, called in _device_impls(cls, _path_methods(cls)).items():
        for name, (klass, func) in _methods(impl).items():
            if name.startswith("__") or (called and name not in called):
                continue
            calls = [c for c in _calls(func, gpu=True) if not c.startswith("self.")]
            kids.append({"name": f"{impl.__name__}.{name}", "module": impl.__module__, "lib": "chainer",
                         "children": [_call(c) for c in calls if _lib(c) or _is_decision(c)]})
            implement.append(f"{impl.__name__}.{name}")
    gpu_entry = f"{_entry(cls)}_gpu"
    generic = gpu_entry not in methods and not any(c.get("lib") for k in kids for c in k["children"])
    cpu = list(dict.fromkeys(c for m in _path_methods(cls, "cpu") for c in _calls(methods[m][1])
                             if c.startswith(("numpy.", "np.", "xp.", "intel64.", "conv.", "chainer.utils.conv."))))
    need: dict[str, Any] = {
        "must": not generic, "implement": implement[:1] if generic else
        [i for i in implement if gpu_entry in i or "Impl." in i] or implement[:1],
        "others": {"cuDNN": ", ".join(sorted({c["name"] for k in kids for c in k["children"]
                                              if c.get("lib") == "cuDNN"})),
                   "decision": "; ".join(dict.fromkeys(decisions))},
        "free": "array-module generic forward (runs on any NumPy-compatible xp)" if generic else ""}
    need["others"] = {k: v for k, v in need["others"].items() if v}
    return {"name": cls.__name__, "module": cls.__module__, "children": kids}, need, cpu


def gpu_evidence(case: base.Case, pass_: str, run: Callable[[], object]) -> dict[str, Any]:
    """For every FunctionNode the step runs (a backward runs FunctionNodes of its own)
    and every optimizer update rule (AdamRule): its GPU methods read from the installed
    source (forward_gpu or update_core_gpu and the helpers it calls), the CuPy and cuDNN
    calls they make, the chainer.should_use_cudnn decision that picks cuDNN, and the CPU
    method's NumPy calls beside them. Chainer has no backend interface below its array
    modules: these methods are what a new device module's arrays must serve."""
    hook = _Reached()
    rules: list[type] = []
    with hook, _rules_reached(rules):
        run()
        case.sync()
    ops, needs, cpu = [], {}, {}
    for cls in [*hook.classes, *rules]:
        doc, need, cpu_calls = _function_doc(cls)
        ops.append(doc)
        needs[cls.__name__] = need
        cpu[cls.__name__] = cpu_calls
    files = sorted({c.__module__.replace(".", "/") + ".py" for c in [*hook.classes, *rules]})
    return {"evidence": "source", "ops": ops,
            "provenance": {"read": f"chainer {chainer.__version__} source: {', '.join(files)}",
                           "how": "ast of the installed modules: forward_gpu (update_core_gpu) and the self.* "
                                  "helpers it calls",
                           "reached": "the FunctionNodes the step ran on this CPU (a FunctionHook) and the "
                                      "optimizer's update rules"},
            "backend": {"key": "a Chainer device module (array module + each function's GPU methods)", "ops": needs},
            "info": {f"forward_cpu_calls_{pass_}": cpu}}
