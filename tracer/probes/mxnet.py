"""MXNet probe: mx.nd operators (functional) and gluon blocks (layer, not hybridized).

MXNet runs operators asynchronously: ``forward`` waits for its output and
``backward`` for all pending work, so the traced calls include the computation.
Inputs and parameters are in ``base.dtype()``, cast by MXNet's own ``astype``:
bfloat16 is MXNet's AMP type (oneDNN's bf16 kernels on the CPU). An operator MXNet
has no kernel for in that type fails as one line (the case's gap), not a traceback.
Adam's step has no backward: its forward is the update (the fused adam_update
operator, or gluon.Trainer's 'adam').
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Callable

import mxnet as mx
from mxnet import autograd, gluon, nd

from tracer.probes import base, mxnet_models

if TYPE_CHECKING:  # the annotations only
    import numpy as np


def gpu_available() -> bool:
    try:
        count: int = mx.context.num_gpus()  # mxnet is Any to mypy (not installed where it runs)
        return count > 0
    except Exception:  # noqa: BLE001 - no CUDA build / driver means no GPU
        return False


def _dtype() -> Any:
    """MXNet's element type for base.dtype(): bfloat16 is AMP's (a NumPy record type
    MXNet maps to its bf16 enum; the string is not understood)."""
    name = base.dtype()
    if name == "bfloat16":
        from mxnet.contrib.amp.amp import bfloat16

        return bfloat16
    return name


def _array(a: np.ndarray, ctx: mx.Context, dtype: Any = None) -> nd.NDArray:
    """``a`` (float32 data from base) on ``ctx``, rounded to ``dtype`` by MXNet's own cast."""
    return nd.array(a, ctx=ctx, dtype="float32").astype(dtype or _dtype(), copy=False)


def _leaf(a: np.ndarray, ctx: mx.Context, dtype: Any = None) -> nd.NDArray:
    p = _array(a, ctx, dtype)
    p.attach_grad()
    return p


def _attention(F: Any, q: Any, k: Any, v: Any) -> Any:
    """softmax(q k^T / sqrt(D)) v over B x H x L x D: batch_dot takes 3-d batches, so the
    batch and head axes are merged (reshape code -3) and split again (-4)."""
    b, h, _, d = q.shape
    q3, k3, v3 = (F.reshape(t, (-3, -2)) for t in (q, k, v))
    weights = F.softmax(F.batch_dot(q3, k3, transpose_b=True) * (1.0 / math.sqrt(d)), axis=-1)
    return F.reshape(F.batch_dot(weights, v3), (-4, b, h, -2))


#: What the probe builds from MXNet's operators where MXNet 1.9 has none for it
#: (the case's info["built_from_primitives"]).
BUILT = {
    "attention": {
        "functional": "no attention operator in mx.nd 1.9 (only the projected interleaved_matmul_* of "
                      "contrib): built from nd.batch_dot (transpose_b), a scale and nd.softmax, the batch and "
                      "head axes merged by nd.reshape",
        "layer": "no attention block in gluon 1.9: the same batch_dot/softmax function in an nn.HybridLambda",
    },
}


def _functional(primitive: str, x: nd.NDArray, ctx: mx.Context, leaves: list[nd.NDArray]) -> Callable[[], nd.NDArray]:
    """The primitive's mx.nd call; its parameters are appended to ``leaves``."""
    c = x.shape[1] if x.ndim > 1 else 1
    dtype = _dtype()

    def param(a: np.ndarray, of: Any = dtype) -> nd.NDArray:
        leaves.append(_leaf(a, ctx, of))
        return leaves[-1]

    if primitive == "dense":
        w, b = param(base.dense_weight(x.shape[1])), param(base.bias(base.DENSE_OUT))
        return lambda: nd.FullyConnected(x, w, b, num_hidden=base.DENSE_OUT)
    if primitive == "conv2d":
        w, b = param(base.conv_weight(c)), param(base.bias(base.CONV_OUT))
        k = base.CONV_K
        return lambda: nd.Convolution(
            x, w, b, kernel=(k, k), stride=(1, 1), pad=(1, 1), num_filter=base.CONV_OUT
        )
    if primitive == "relu":
        return lambda: nd.relu(x)
    if primitive == "sigmoid":
        return lambda: nd.sigmoid(x)
    if primitive == "tanh":
        return lambda: nd.tanh(x)
    if primitive == "softmax":
        return lambda: nd.softmax(x, axis=-1)
    if primitive in ("maxpool2d", "avgpool2d"):
        kind = "max" if primitive == "maxpool2d" else "avg"
        k = base.POOL_K
        return lambda: nd.Pooling(x, kernel=(k, k), stride=(k, k), pool_type=kind)
    if primitive == "batchnorm":
        # BatchNorm takes its scale, shift and statistics in float32 whatever the data's type
        g, b = param(base.array((c,), 3) * 0.1 + 1, "float32"), param(base.bias(c), "float32")
        mean, var = nd.zeros((c,), ctx=ctx), nd.ones((c,), ctx=ctx)
        return lambda: nd.BatchNorm(
            x, g, b, mean, var, eps=base.BN_EPS, momentum=base.BN_MOMENTUM, fix_gamma=False, use_global_stats=False
        )
    if primitive == "layernorm":
        g, b = param(base.ln_scale(x.shape[-1])), param(base.bias(x.shape[-1]))
        return lambda: nd.LayerNorm(x, g, b, axis=-1, eps=base.LN_EPS)
    if primitive == "gelu":
        return lambda: nd.LeakyReLU(x, act_type="gelu")  # the erf form (leaky_relu-inl.h's gelu)
    if primitive == "attention":
        k, v = (param(a) for a in base.attention_kv(x.shape))
        return lambda: _attention(nd, x, k, v)
    if primitive == "embedding":  # x: the integer ids
        w = param(base.embed_table())
        return lambda: nd.Embedding(x, w, input_dim=base.EMBED_VOCAB, output_dim=base.EMBED_DIM, dtype=dtype)
    if primitive == "crossentropy":
        # softmax_cross_entropy takes its labels in the data's type and sums over the batch
        n = x.shape[0]
        t = nd.array(base.class_labels(n, x.shape[1]), ctx=ctx, dtype="int64").astype(x.dtype)
        return lambda: nd.softmax_cross_entropy(x, t) / n
    raise base.ProbeError(f"unknown primitive {primitive}")


def _layer(primitive: str, x: nd.NDArray, ctx: mx.Context, leaves: list[nd.NDArray]) -> Callable[[], nd.NDArray]:
    """The primitive's gluon block; its parameters' arrays are appended to ``leaves``."""
    c = x.shape[1] if x.ndim > 1 else 1
    nn = gluon.nn
    dtype = _dtype()
    weights = {}
    if primitive == "dense":
        m = nn.Dense(base.DENSE_OUT, in_units=x.shape[1])
        weights = {"weight": base.dense_weight(x.shape[1]), "bias": base.bias(base.DENSE_OUT)}
    elif primitive == "conv2d":
        m = nn.Conv2D(base.CONV_OUT, base.CONV_K, strides=1, padding=1, in_channels=c)
        weights = {"weight": base.conv_weight(c), "bias": base.bias(base.CONV_OUT)}
    elif primitive == "batchnorm":
        m = nn.BatchNorm(momentum=base.BN_MOMENTUM, epsilon=base.BN_EPS, in_channels=c)
    elif primitive == "layernorm":
        f = x.shape[-1]
        m = nn.LayerNorm(axis=-1, epsilon=base.LN_EPS, in_channels=f)
        weights = {"gamma": base.ln_scale(f), "beta": base.bias(f)}
    elif primitive == "gelu":
        m = nn.GELU()
    elif primitive == "attention":
        m = nn.HybridLambda(_attention)
        k, v = (_leaf(a, ctx, dtype) for a in base.attention_kv(x.shape))
        m.initialize(ctx=ctx)
        leaves += [k, v]
        return lambda: m(x, k, v)
    elif primitive == "embedding":
        m = nn.Embedding(base.EMBED_VOCAB, base.EMBED_DIM)
        weights = {"weight": base.embed_table()}
    elif primitive == "crossentropy":
        loss = gluon.loss.SoftmaxCrossEntropyLoss()  # log_softmax and pick: integer labels
        t = nd.array(base.class_labels(x.shape[0], x.shape[1]), ctx=ctx, dtype="int64")
        return lambda: loss(x, t).mean()
    elif primitive in ("relu", "sigmoid", "tanh"):
        m = nn.Activation(primitive)
    elif primitive == "softmax":
        m = nn.HybridLambda("softmax")  # gluon 1.x has no Softmax block; axis -1 by default
    elif primitive == "maxpool2d":
        m = nn.MaxPool2D(pool_size=base.POOL_K, strides=base.POOL_K)
    elif primitive == "avgpool2d":
        m = nn.AvgPool2D(pool_size=base.POOL_K, strides=base.POOL_K)
    else:
        raise base.ProbeError(f"unknown primitive {primitive}")
    m.initialize(ctx=ctx)
    if primitive != "batchnorm":  # BatchNorm keeps its parameters in float32 (gluon's own cast does for float16)
        m.cast(dtype)
    for name, value in weights.items():
        getattr(m, name).set_data(_array(value, ctx, dtype))
    leaves += [p.data(ctx) for p in m.collect_params().values() if p.grad_req != "null"]
    return lambda: m(x)


def _adam(api: str, ctx: mx.Context, shape: tuple[int, ...]) -> tuple[Callable[[], nd.NDArray], str]:
    """One Adam step per call from a fixed gradient: the fused adam_update operator
    (functional) or gluon.Trainer's 'adam' (layer). adam_update has no bias correction:
    the step size is scaled by sqrt(1 - beta2^t) / (1 - beta1^t), as mx.optimizer.Adam
    does, so that the step is torch's (but for where eps is added)."""
    A, dtype = base.ADAM, _dtype()
    w, g = _array(base.array(shape), ctx, dtype), _array(base.adam_grad(shape), ctx, dtype)
    if api == "functional":
        mean, var = nd.zeros(shape, ctx=ctx, dtype=dtype), nd.zeros(shape, ctx=ctx, dtype=dtype)
        t = [0]

        def step() -> nd.NDArray:
            t[0] += 1
            lr = A["lr"] * math.sqrt(1 - A["beta2"] ** t[0]) / (1 - A["beta1"] ** t[0])
            nd.adam_update(w, g, mean, var, lr=lr, beta1=A["beta1"], beta2=A["beta2"], epsilon=A["eps"], out=w)
            w.wait_to_read()
            return w
        return step, ("mx.nd.adam_update (the fused operator), its lr scaled by sqrt(1-beta2^t)/(1-beta1^t) here "
                      "as mx.optimizer.Adam does: the operator has no bias correction")
    p = gluon.Parameter("p", shape=shape)
    p.initialize(ctx=ctx)  # its initializer draws float32 (MXNet has no bfloat16 random sampler)
    p.cast(dtype)
    p.set_data(w)
    p.grad()[:] = g  # the fixed gradient, left in place (Adam only reads it)
    trainer = gluon.Trainer([p], "adam", {"learning_rate": A["lr"], "beta1": A["beta1"], "beta2": A["beta2"],
                                          "epsilon": A["eps"]})

    def update() -> nd.NDArray:
        p.data()._fresh_grad = True  # as a backward marks it: step refuses a stale gradient
        trainer.step(1)
        p.data().wait_to_read()
        return p.data()
    return update, "gluon.Trainer(params, 'adam').step: mx.optimizer.Adam.update, which calls adam_update"


def _no_backward(state: Any) -> None:
    raise base.ProbeError("an optimizer step has no backward pass: its forward is the update")


def _one_line(primitive: str, step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` with an MXNetError (a multi-line C++ report: an operator without a kernel
    for this type, a type check) as one ProbeError line: the case's gap."""
    @functools.wraps(step)
    def run(*args: Any) -> Any:
        try:
            return step(*args)
        except mx.base.MXNetError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            why = next((ln for ln in lines if ln.startswith("MXNetError:")), lines[0] if lines else "")
            why = why.removeprefix("MXNetError:").strip()
            if why.endswith("type enum 12"):
                why += " (MXNet's bfloat16: the operator has no kernel for it)"
            raise base.ProbeError(f"mxnet {mx.__version__} cannot run {primitive} in {base.dtype()} here: "
                                  f"{why[:300]}") from exc
    return run


def _info(primitive: str, api: str) -> dict[str, Any]:
    """What a case records of MXNet's choices (meta: dtype, defaults, built_from_primitives)."""
    info: dict[str, Any] = {"dtype": base.dtype()}
    defaults: dict[str, Any] = {}
    if primitive in BUILT:
        info["built_from_primitives"] = {primitive: BUILT[primitive][api]}
    if primitive == "batchnorm" and base.dtype() != "float32":
        defaults["parameters"] = "float32: MXNet's BatchNorm takes its scale, shift and statistics in float32"
    if primitive == "gelu":
        defaults["gelu"] = ("LeakyReLU(act_type='gelu') (nn.GELU calls it): the exact erf form in MXNet 1.9, "
                            "no tanh approximation offered")
    if primitive == "layernorm":
        defaults["eps"] = "nd.LayerNorm and nn.LayerNorm default 1e-5 (LN_EPS), axis -1"
    if primitive == "embedding":
        defaults["ids"] = "int64 (nd.Embedding takes any index type; MXNet's own examples use float32 ids)"
    if primitive == "crossentropy":
        defaults["loss"] = ("nd.softmax_cross_entropy sums over the batch and takes labels in the data's type: "
                            "divided by N here, the labels cast; gluon's SoftmaxCrossEntropyLoss is "
                            "log_softmax + pick per sample (integer labels), averaged here; MXNet's NDArray has "
                            "no 0-d shape: the scalar is shape (1,)")
    if primitive == "adam":
        defaults["adam"] = ("mx.optimizer.Adam's defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8 (torch's); eps is "
                            "added to sqrt(v) before the bias correction folded into lr, so the update differs "
                            "from torch's by eps (1 - sqrt(1-beta2^t)) in the denominator")
    if defaults:
        info["defaults"] = defaults
    return info


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    made: base.Case = _one_line(primitive, _make_case)(primitive, api, device, shape)
    return made


def _make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    ctx = mx.gpu(0) if device == "gpu" else mx.cpu()
    dtype = _dtype()
    info = _info(primitive, api)
    if primitive == "adam":
        step, how = _adam(api, ctx, shape)
        info["update"] = how
        return base.Case(forward=_one_line(primitive, step), backward=_no_backward, sync=nd.waitall, info=info)
    if primitive == "embedding":  # integer ids: no gradient
        x = nd.array(base.token_ids(shape), ctx=ctx, dtype="int64")
        leaves: list[nd.NDArray] = []
    else:
        x = _leaf(base.array(shape), ctx, dtype)
        leaves = [x]
    run = (_functional if api == "functional" else _layer)(primitive, x, ctx, leaves)

    def forward() -> nd.NDArray:
        with autograd.record():
            y = run()
        y.wait_to_read()
        return y

    # MXNet's NDArray has no 0-d shape: a scalar (the mean loss) is shape (1,)
    grad = nd.ones(base.output_shape(primitive, shape) or (1,), ctx=ctx, dtype=dtype)

    def backward(y: nd.NDArray) -> None:
        y.backward(grad)
        nd.waitall()

    return base.Case(forward=_one_line(primitive, forward), backward=_one_line(primitive, backward),
                     sync=nd.waitall, info=info, private={"leaves": leaves})


def workload_case(build: Callable[[Any], base.Case], device: str) -> base.Case:
    """A user's own workload (tracer.contract.WorkloadProbe): ``build`` gets the
    ``Context`` (mx.cpu(), mx.gpu(0)) and runs, as its passes do, with it as the default
    context; the seeds are set first, and ``sync`` waits for MXNet's engine."""
    ctx = mx.gpu(0) if device == "gpu" else mx.cpu()
    mx.random.seed(0)
    with ctx:
        case = build(ctx)
    case.sync = nd.waitall
    case.info.update({"mkldnn_built": mkldnn_built(), "backward_bulk": backward_bulk()})
    return base.within(case, lambda: ctx)


def make_model_case(model: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """A model's training step (tracer.contract.ModelProbe): mx.nd or gluon, the loss,
    the gradients and the optimizer's update (tracer/probes/mxnet_models.py)."""
    facts = {"mkldnn_built": mkldnn_built(), "backward_bulk": backward_bulk()}  # what the probe reads of MXNet
    return mxnet_models.training_step(model, api, device, shape, facts)


_PROFILE: dict[str, str] = {}  # MXNet's profiler can be configured once per process


def record_ops(case: base.Case, pass_: str, run: Callable[[], object]) -> base.OpRecord:
    """The operator profiler's records for one step (``Convolution``,
    ``_backward_Convolution``...), nested by time. MXNet names the operator, not
    whether its MKL-DNN (FComputeEx) or its mshadow (FCompute) kernel ran: that
    is in ``info`` (the build's and the process's MKL-DNN switch) and in the native layer.
    By default MXNet bulks a backward's operators (MXNET_EXEC_BULK_EXEC_TRAIN, read once
    per process): the profiler then records each segment as one ``ImperativeBulk``, and
    ``info["backward_bulk"]`` says so."""
    import json
    import os
    import tempfile
    import time

    if "file" not in _PROFILE:
        _PROFILE["file"] = os.path.join(tempfile.mkdtemp(prefix="dltrace-mxprof-"), "profile.json")
        mx.profiler.set_config(profile_imperative=True, profile_symbolic=True, profile_memory=False,
                               profile_api=False, aggregate_stats=False, filename=_PROFILE["file"])
    nd.waitall()
    t0 = time.time() * 1e6
    mx.profiler.set_state("run")
    try:
        run()
        nd.waitall()
    finally:
        mx.profiler.set_state("stop")
    t1 = time.time() * 1e6
    mx.profiler.dump(finished=False)  # keeps the profiler usable, leaves the JSON unterminated
    with open(_PROFILE["file"]) as fh:
        text = fh.read()
    try:
        trace = json.loads(text).get("traceEvents", [])
    except ValueError:
        trace = json.loads(text.rstrip().rstrip(",") + "\n]}").get("traceEvents", [])
    opened: dict[tuple[str, int], float] = {}  # (name, tid) -> when its B record opened
    events = []
    for ev in trace:
        ph, name, ts = ev.get("ph"), ev.get("name"), ev.get("ts")
        if ev.get("cat") != "operator" or ts is None or not t0 <= ts <= t1:
            continue
        key = (name, ev.get("tid"))
        if ph == "B":
            opened[key] = ts
        elif ph == "E" and key in opened:
            events.append(base.OpEvent(name, opened.pop(key), ts, "mxnet", "", ev.get("tid")))
        elif ph == "X":
            events.append(base.OpEvent(name, ts, ts + ev.get("dur", 0), "mxnet", "", ev.get("tid")))
    info = {"mkldnn_built": mkldnn_built(), "MXNET_MKLDNN_ENABLED": os.environ.get("MXNET_MKLDNN_ENABLED", ""),
            "MXNET_ENGINE_TYPE": os.environ.get("MXNET_ENGINE_TYPE", ""), "backward_bulk": backward_bulk()}
    return base.OpRecord(base.nest(events, scale_ns=1000.0), "mx.profiler (operator records)", info)


def backward_bulk() -> str:
    """Whether a backward's operators run bulked, which hides them from the profiler."""
    import os

    if os.environ.get("MXNET_EXEC_BULK_EXEC_TRAIN", "1") == "0":
        return "off (MXNET_EXEC_BULK_EXEC_TRAIN=0): each backward operator is recorded"
    if os.environ.get("MXNET_ENGINE_TYPE") == "NaiveEngine":
        return "off (MXNET_ENGINE_TYPE=NaiveEngine does not bulk): each backward operator is recorded"
    size = os.environ.get("MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN", "15")
    return (f"on (MXNET_EXEC_BULK_EXEC_TRAIN unset or 1, the default): segments of up to {size} backward "
            "operators run as one engine op, recorded as ImperativeBulk; MXNET_EXEC_BULK_EXEC_TRAIN=0 "
            "in the probe's environment names each")


def mkldnn_built() -> bool | None:
    try:
        return bool(mx.runtime.Features().is_enabled("MKLDNN"))
    except Exception:  # noqa: BLE001 - older builds have no feature list
        return None
