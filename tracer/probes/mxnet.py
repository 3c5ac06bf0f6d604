"""MXNet probe: mx.nd operators (functional) and gluon blocks (layer, not hybridized).

MXNet runs operators asynchronously: ``forward`` waits for its output and
``backward`` for all pending work, so the traced calls include the computation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

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


def _functional(primitive: str, x: nd.NDArray, ctx: mx.Context) -> Callable[[], nd.NDArray]:
    c = x.shape[1] if x.ndim > 1 else 1

    def param(a: np.ndarray) -> nd.NDArray:
        p = nd.array(a, ctx=ctx, dtype="float32")
        p.attach_grad()
        return p

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
        g, b = param(base.array((c,), 3) * 0.1 + 1), param(base.bias(c))
        mean, var = nd.zeros((c,), ctx=ctx), nd.ones((c,), ctx=ctx)
        return lambda: nd.BatchNorm(
            x, g, b, mean, var, eps=base.BN_EPS, momentum=base.BN_MOMENTUM, fix_gamma=False, use_global_stats=False
        )
    raise base.ProbeError(f"unknown primitive {primitive}")


def _layer(primitive: str, x: nd.NDArray, ctx: mx.Context) -> Callable[[], nd.NDArray]:
    c = x.shape[1] if x.ndim > 1 else 1
    nn = gluon.nn
    weights = {}
    if primitive == "dense":
        m = nn.Dense(base.DENSE_OUT, in_units=x.shape[1])
        weights = {"weight": base.dense_weight(x.shape[1]), "bias": base.bias(base.DENSE_OUT)}
    elif primitive == "conv2d":
        m = nn.Conv2D(base.CONV_OUT, base.CONV_K, strides=1, padding=1, in_channels=c)
        weights = {"weight": base.conv_weight(c), "bias": base.bias(base.CONV_OUT)}
    elif primitive == "batchnorm":
        m = nn.BatchNorm(momentum=base.BN_MOMENTUM, epsilon=base.BN_EPS, in_channels=c)
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
    for name, value in weights.items():
        getattr(m, name).set_data(nd.array(value, ctx=ctx, dtype="float32"))
    return lambda: m(x)


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    ctx = mx.gpu(0) if device == "gpu" else mx.cpu()
    x = nd.array(base.array(shape), ctx=ctx, dtype="float32")
    x.attach_grad()
    run = (_functional if api == "functional" else _layer)(primitive, x, ctx)

    def forward() -> nd.NDArray:
        with autograd.record():
            y = run()
        y.wait_to_read()
        return y

    grad = nd.ones(base.output_shape(primitive, shape), ctx=ctx, dtype="float32")

    def backward(y: nd.NDArray) -> None:
        y.backward(grad)
        nd.waitall()

    return base.Case(forward=forward, backward=backward, sync=nd.waitall)


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
