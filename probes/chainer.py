"""Chainer probe: chainer.functions (functional) and chainer.links (layer).

Primitives without a link (activations, pooling) run at the layer level as the same
functions called from a ``chainer.Sequential``, so that level goes through the
link machinery. Chainer accumulates gradients into leaf variables, so ``backward``
clears them first (as a training step's ``cleargrads`` would).
"""

from __future__ import annotations

import functools

import chainer
import chainer.functions as F
import chainer.links as L

from probes import base


def gpu_available() -> bool:
    try:
        return bool(chainer.backends.cuda.available)
    except Exception:  # noqa: BLE001 - a broken CUDA set-up means no GPU
        return False


def _pool(primitive: str):
    if primitive == "maxpool2d":
        # cover_all=False: floor the output size, as torch and mxnet do.
        return functools.partial(F.max_pooling_2d, ksize=base.POOL_K, stride=base.POOL_K, cover_all=False)
    return functools.partial(F.average_pooling_2d, ksize=base.POOL_K, stride=base.POOL_K)


def _functional(primitive: str, x: chainer.Variable, dev):
    c = x.shape[1] if x.ndim > 1 else 1
    param = lambda a: chainer.Variable(dev.send(a))  # noqa: E731
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
        mean, var = dev.send(xp.zeros(c, dtype=xp.float32)), dev.send(xp.ones(c, dtype=xp.float32))
        return (
            lambda: F.batch_normalization(x, g, b, eps=base.BN_EPS, running_mean=mean, running_var=var, decay=base.BN_MOMENTUM)
        ), [g, b]
    raise base.ProbeError(f"unknown primitive {primitive}")


def _layer(primitive: str, x: chainer.Variable, dev):
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
    elif primitive in ("relu", "sigmoid", "tanh"):
        m = chainer.Sequential(getattr(F, primitive))
    elif primitive == "softmax":
        m = chainer.Sequential(functools.partial(F.softmax, axis=x.ndim - 1))
    elif primitive in ("maxpool2d", "avgpool2d"):
        m = chainer.Sequential(_pool(primitive))
    else:
        raise base.ProbeError(f"unknown primitive {primitive}")
    m.to_device(dev)
    return (lambda: m(x)), list(m.params())


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    dev = chainer.get_device(device)
    x = chainer.Variable(dev.send(base.array(shape)))
    run, params = (_functional if api == "functional" else _layer)(primitive, x, dev)
    leaves = [x, *params]
    grad = dev.send(dev.xp.ones(base.output_shape(primitive, shape), dtype=dev.xp.float32))

    def backward(y: chainer.Variable) -> None:
        for v in leaves:
            v.cleargrad()
        y.grad = grad
        y.backward()

    sync = dev.device.synchronize if isinstance(dev, chainer.backend.GpuDevice) else base._noop
    return base.Case(forward=run, backward=backward, sync=sync)


class _OpHook(chainer.FunctionHook):
    """Records each FunctionNode's forward and backward, with wall-clock intervals."""

    name = "dltrace_ops"

    def __init__(self) -> None:
        import time

        self._now = time.perf_counter_ns
        self.events: list[base.OpEvent] = []
        self._open: list[tuple[str, str, int]] = []

    def _pre(self, function, what: str) -> None:
        self._open.append((f"{function.label}.{what}", type(function).__module__, self._now()))

    def _post(self, function, what: str) -> None:
        name, module, t0 = self._open.pop()
        self.events.append(base.OpEvent(name, t0, self._now(), module))

    def forward_preprocess(self, function, in_data):
        self._pre(function, "forward")

    def forward_postprocess(self, function, in_data):
        self._post(function, "forward")

    def backward_preprocess(self, function, in_data, out_grad):
        self._pre(function, "backward")

    def backward_postprocess(self, function, in_data, out_grad):
        self._post(function, "backward")


def record_ops(case: base.Case, pass_: str, run) -> base.OpRecord:
    """Chainer's FunctionNodes as they run (a FunctionHook's forward/backward
    pre/post-process), nested by time: Convolution2DFunction.forward, and in
    backward Convolution2DGradW.forward... (a backward runs new FunctionNodes)."""
    hook = _OpHook()
    with hook:
        run()
        case.sync()
    info = {"use_ideep": chainer.config.use_ideep}
    return base.OpRecord(base.nest(hook.events), "chainer.FunctionHook", info)
