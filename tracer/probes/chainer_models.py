"""Chainer's training steps of the models (tracer.contract.MODELS): LeNet-5 with
chainer.functions on Parameters the probe makes (chainer's lowest usable level, the SGD
update written out on the arrays) and with chainer.links and chainer.optimizers; the
CIFAR-10 Rosetta CNN and a transformer encoder block with links, each link's own
initialisation. Chainer has no GELU and no attention layer: both are built here from
its functions, and the case's info says so.

Imported inside chainer's environment (tracer/probes/chainer.py's make_model_case)."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from tracer.probes import base

Net = Callable[[chainer.Variable], chainer.Variable]

_POOL = functools.partial(F.max_pooling_2d, ksize=2, stride=2, cover_all=False)  # floor, as torch


def _lenet_functional(dev: chainer.backend.Device) -> tuple[Net, list[chainer.Parameter], Callable[[], None]]:
    """chainer.functions on Parameters made here; the update is NumPy (CuPy) arithmetic
    on each parameter's array, as a Chainer user writes it without an optimizer."""
    C = base.LENET
    shapes = [(C["conv1"], 1, C["k"], C["k"]), (C["conv1"],), (C["conv2"], C["conv1"], C["k"], C["k"]),
              (C["conv2"],), (C["fc1"], C["conv2"] * 5 * 5), (C["fc1"],), (C["fc2"], C["fc1"]), (C["fc2"],),
              (base.CLASSES, C["fc2"]), (base.CLASSES,)]
    p = [chainer.Parameter(dev.send(base.model_weight(s, 10 + i))) for i, s in enumerate(shapes)]

    def net(x: chainer.Variable) -> chainer.Variable:
        x = _POOL(F.relu(F.convolution_2d(x, p[0], p[1], pad=2)))
        x = _POOL(F.relu(F.convolution_2d(x, p[2], p[3])))
        x = F.relu(F.linear(x, p[4], p[5]))  # F.linear flattens the trailing axes itself
        x = F.relu(F.linear(x, p[6], p[7]))
        return F.linear(x, p[8], p[9])

    def update() -> None:
        for t in p:
            t.array -= C["lr"] * t.grad
            t.cleargrad()

    return net, p, update


def _lenet_layer() -> chainer.Link:
    C = base.LENET
    return chainer.Sequential(
        L.Convolution2D(1, C["conv1"], C["k"], pad=2), F.relu, _POOL,
        L.Convolution2D(C["conv1"], C["conv2"], C["k"]), F.relu, _POOL,
        L.Linear(C["conv2"] * 5 * 5, C["fc1"]), F.relu, L.Linear(C["fc1"], C["fc2"]), F.relu,
        L.Linear(C["fc2"], base.CLASSES))


def _cifar() -> chainer.Link:
    C = base.CIFAR

    def block(cin: int, cout: int) -> list[Any]:
        return [L.Convolution2D(cin, cout, C["k"], pad=C["k"] // 2), F.relu,
                L.Convolution2D(cout, cout, C["k"], pad=C["k"] // 2), F.relu, _POOL,
                functools.partial(F.dropout, ratio=C["drop_conv"])]

    return chainer.Sequential(
        *block(3, C["conv1"]), *block(C["conv1"], C["conv2"]),
        L.Linear(C["conv2"] * 8 * 8, C["fc"]), F.relu, functools.partial(F.dropout, ratio=C["drop_fc"]),
        L.Linear(C["fc"], base.CLASSES))


def gelu(x: chainer.Variable) -> chainer.Variable:
    """GELU (the exact form, erf), which chainer 7 lacks, from F.erf."""
    return 0.5 * x * (1.0 + F.erf(x * (1.0 / math.sqrt(2.0))))


class _Encoder(chainer.Chain):  # type: ignore[misc]  # chainer is Any to mypy: an untyped base
    """Token and learned position embeddings, a pre-norm encoder block (multi-head
    self-attention from F.matmul and F.softmax, a GELU MLP, residuals, no dropout as in
    torch's case), a final layer norm and the projection to the vocabulary. Token rows
    are (batch x sequence, features): L.LayerNormalization and L.Linear take 2-d input."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        T = base.TRANSFORMER
        e = T["embed"]
        with self.init_scope():
            self.embed = L.EmbedID(T["vocab"], e)
            self.pos = chainer.Parameter(np.zeros((1, seq, e), dtype=np.float32))
            self.norm1 = L.LayerNormalization(e)
            self.qkv = L.Linear(e, 3 * e)
            self.proj = L.Linear(e, e)
            self.norm2 = L.LayerNormalization(e)
            self.fc1 = L.Linear(e, T["mlp"])
            self.fc2 = L.Linear(T["mlp"], e)
            self.norm = L.LayerNormalization(e)
            self.head = L.Linear(e, T["vocab"])

    def attention(self, x: chainer.Variable, batch: int, seq: int) -> chainer.Variable:
        e, heads = base.TRANSFORMER["embed"], base.TRANSFORMER["heads"]
        d = e // heads
        qkv = F.reshape(self.qkv(x), (batch, seq, 3, heads, d))
        qkv = F.reshape(F.transpose(qkv, (2, 0, 3, 1, 4)), (3, batch * heads, seq, d))
        q, k, v = F.separate(qkv, axis=0)
        weights = F.softmax(F.matmul(q, k, transb=True) * (1.0 / math.sqrt(d)), axis=2)
        out = F.transpose(F.reshape(F.matmul(weights, v), (batch, heads, seq, d)), (0, 2, 1, 3))
        return self.proj(F.reshape(out, (batch * seq, e)))

    def forward(self, tokens: Any) -> chainer.Variable:
        batch, seq = tokens.shape
        e = base.TRANSFORMER["embed"]
        x = F.reshape(self.embed(tokens) + F.broadcast_to(self.pos, (batch, seq, e)), (batch * seq, e))
        x = x + self.attention(self.norm1(x), batch, seq)
        x = x + self.fc2(gelu(self.fc1(self.norm2(x))))
        return self.head(self.norm(x))


def _openblas_threads() -> int | None:
    """The threads NumPy's OpenBLAS runs with (chainer's CPU convolutions and matmuls are
    its GEMMs): asked of the library itself, None where it cannot be found."""
    import ctypes
    import glob
    import os

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "libopenblas*.so*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for symbol in ("openblas_get_num_threads64_", "openblas_get_num_threads"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                return int(fn())
    return None


def _defaults(dev: chainer.backend.Device) -> dict[str, Any]:
    return {"layout": "NCHW (chainer's only layout)",
            "threads": {"numpy_openblas": _openblas_threads(), "chainer": "one Python thread; the BLAS's own"},
            "onednn": f"iDeep (oneDNN for NumPy arrays) use_ideep={chainer.config.use_ideep!r}, installed="
                      f"{chainer.backends.intel64.is_ideep_available()}",
            "convolution": "im2col + NumPy tensordot (OpenBLAS GEMM) on the CPU; cuDNN on a GPU "
                           f"(use_cudnn={chainer.config.use_cudnn!r})",
            "device": str(dev), "train_mode": "chainer.using_config('train', True)"}


def training_step(model: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """The model's case: ``forward`` runs the network and its loss, ``backward`` the
    gradients (parameters' grads cleared first: chainer accumulates them) and the
    optimizer's update."""
    base.check_model(model, api, shape)
    if base.dtype() != "float32":
        raise base.ProbeError(f"chainer's models run in float32 only, not {base.dtype()}")
    dev = chainer.get_device(device)
    data, labels = base.model_data(model, shape)
    x = dev.send(data.astype(np.int32) if model == "transformer" else data)
    y = dev.send(labels.reshape(-1).astype(np.int32))  # softmax_cross_entropy takes int32 labels
    defaults = _defaults(dev)
    built: dict[str, str] = {}
    if model == "lenet" and api == "functional":
        net, params, update = _lenet_functional(dev)
        defaults["initialisation"] = "made by the probe: uniform +-1/sqrt(fan_in), seeded"
        defaults["optimizer"] = "SGD written out: p.array -= lr * p.grad, then p.cleargrad()"
        clear: Callable[[], None] = base._noop  # the update clears each grad
    else:
        np.random.seed(0)  # chainer's initializers draw from NumPy's global generator
        link = {"lenet": _lenet_layer, "cifar": _cifar}.get(model, lambda: _Encoder(shape[1]))()
        link.to_device(dev)
        net, params = link, list(link.params())
        optimizer: chainer.Optimizer
        if model == "transformer":
            optimizer = chainer.optimizers.Adam(alpha=base.TRANSFORMER["lr"])
            built = {"gelu": "no GELU in chainer 7 (chainer.functions nor links): built as "
                             "0.5 * x * (1 + F.erf(x / sqrt(2)))",
                     "attention": "no attention layer in chainer 7: multi-head self-attention built from "
                                  "L.Linear (q, k, v and output projections), F.reshape/F.transpose/F.separate, "
                                  "F.matmul (batched, transb), a scale, F.softmax"}
            defaults["initialisation"] = "chainer's own: LeCunNormal(scale=1) weights, zero biases " \
                                         "(L.Linear); Normal(1.0) embeddings (L.EmbedID); LayerNormalization " \
                                         "gamma 1, beta 0; positions zeros (made here)"
        else:
            cfg = base.CIFAR if model == "cifar" else base.LENET
            optimizer = (chainer.optimizers.MomentumSGD(lr=cfg["lr"], momentum=cfg["momentum"]) if model == "cifar"
                         else chainer.optimizers.SGD(lr=cfg["lr"]))
            defaults["initialisation"] = "chainer's own: LeCunNormal(scale=1) weights, zero biases " \
                                         "(L.Convolution2D, L.Linear)"
        optimizer.setup(link)
        defaults["optimizer"] = f"chainer.optimizers.{type(optimizer).__name__} " \
                                f"({', '.join(f'{k}={v}' for k, v in sorted(optimizer.hyperparam.get_dict().items()))})"
        clear = link.cleargrads

        def update() -> None:
            optimizer.update()  # looked up at each call: record_ops times GradientMethod.update

    def forward() -> chainer.Variable:
        with chainer.using_config("train", True):
            logits = net(x)
            loss: chainer.Variable = F.softmax_cross_entropy(logits, y)
        return loss

    def backward(loss: chainer.Variable) -> None:
        clear()
        loss.backward()
        update()

    sync = dev.device.synchronize if isinstance(dev, chainer.backend.GpuDevice) else base._noop
    info = base.model_info(model, api, defaults, built)
    info["parameters"] = sum(int(p.size) for p in params)
    return base.Case(forward=forward, backward=backward, sync=sync, info=info)
