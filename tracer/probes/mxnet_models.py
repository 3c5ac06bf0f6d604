"""MXNet's training steps of the models (tracer.contract.MODELS): LeNet-5 with mx.nd
operators under mx.autograd.record on NDArrays the probe makes (MXNet's lowest usable
level, the SGD update written out as NDArray arithmetic) and with gluon.nn blocks and a
gluon.Trainer; the CIFAR-10 Rosetta CNN and a transformer encoder block with gluon,
each block's own initialisation as ``initialize()`` applies it. Gluon 1.9 has no
attention layer: it is built here from nd.batch_dot and nd.softmax, and the case's info
says so. Blocks are not hybridized (the imperative path, as the primitives' layer level).

Imported inside mxnet's environment (tracer/probes/mxnet.py's make_model_case)."""

from __future__ import annotations

import math
import os
from typing import Any, Callable

import mxnet as mx
from mxnet import autograd, gluon, nd

from tracer.probes import base

nn = gluon.nn
Net = Callable[[nd.NDArray], nd.NDArray]


def _lenet_functional(ctx: mx.Context) -> tuple[Net, list[nd.NDArray], Callable[[], None]]:
    """mx.nd operators on NDArrays made here (attach_grad: their gradients are written,
    not accumulated, by each backward); the update is NDArray arithmetic."""
    C = base.LENET
    shapes = [(C["conv1"], 1, C["k"], C["k"]), (C["conv1"],), (C["conv2"], C["conv1"], C["k"], C["k"]),
              (C["conv2"],), (C["fc1"], C["conv2"] * 5 * 5), (C["fc1"],), (C["fc2"], C["fc1"]), (C["fc2"],),
              (base.CLASSES, C["fc2"]), (base.CLASSES,)]
    p = [nd.array(base.model_weight(s, 10 + i), ctx=ctx, dtype="float32") for i, s in enumerate(shapes)]
    for t in p:
        t.attach_grad()
    k = (C["k"], C["k"])

    def pool(x: nd.NDArray) -> nd.NDArray:
        return nd.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max")

    def net(x: nd.NDArray) -> nd.NDArray:
        x = pool(nd.Activation(nd.Convolution(x, p[0], p[1], kernel=k, pad=(2, 2), num_filter=C["conv1"]),
                               act_type="relu"))
        x = pool(nd.Activation(nd.Convolution(x, p[2], p[3], kernel=k, num_filter=C["conv2"]), act_type="relu"))
        x = nd.Activation(nd.FullyConnected(x, p[4], p[5], num_hidden=C["fc1"]), act_type="relu")  # flattens
        x = nd.Activation(nd.FullyConnected(x, p[6], p[7], num_hidden=C["fc2"]), act_type="relu")
        return nd.FullyConnected(x, p[8], p[9], num_hidden=base.CLASSES)

    def update() -> None:
        for t in p:
            t -= C["lr"] * t.grad

    return net, p, update


def _lenet_layer() -> gluon.Block:
    C = base.LENET
    net = nn.Sequential()
    net.add(nn.Conv2D(C["conv1"], C["k"], padding=2, activation="relu", in_channels=1), nn.MaxPool2D(2, 2),
            nn.Conv2D(C["conv2"], C["k"], activation="relu", in_channels=C["conv1"]), nn.MaxPool2D(2, 2),
            nn.Dense(C["fc1"], activation="relu", in_units=C["conv2"] * 5 * 5),  # Dense flattens its input
            nn.Dense(C["fc2"], activation="relu", in_units=C["fc1"]), nn.Dense(base.CLASSES, in_units=C["fc2"]))
    return net


def _cifar() -> gluon.Block:
    C = base.CIFAR
    k, same = C["k"], C["k"] // 2
    net = nn.Sequential()
    for cin, cout in ((3, C["conv1"]), (C["conv1"], C["conv2"])):
        net.add(nn.Conv2D(cout, k, padding=same, activation="relu", in_channels=cin),
                nn.Conv2D(cout, k, padding=same, activation="relu", in_channels=cout),
                nn.MaxPool2D(2, 2), nn.Dropout(C["drop_conv"]))
    net.add(nn.Dense(C["fc"], activation="relu", in_units=C["conv2"] * 8 * 8), nn.Dropout(C["drop_fc"]),
            nn.Dense(base.CLASSES, in_units=C["fc"]))
    return net


class _Encoder(gluon.Block):  # type: ignore[misc]  # mxnet is Any to mypy: an untyped base
    """Token and learned position embeddings, a pre-norm encoder block (multi-head
    self-attention from nd.batch_dot and nd.softmax, gluon's GELU MLP, residuals, no
    dropout as in torch's case), a final layer norm and the projection to the vocabulary."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        T = base.TRANSFORMER
        e = T["embed"]
        with self.name_scope():
            self.embed = nn.Embedding(T["vocab"], e)
            self.pos = self.params.get("pos", shape=(1, seq, e), init=mx.init.Zero())
            self.norm1 = nn.LayerNorm(in_channels=e)
            self.qkv = nn.Dense(3 * e, flatten=False, in_units=e)
            self.proj = nn.Dense(e, flatten=False, in_units=e)
            self.norm2 = nn.LayerNorm(in_channels=e)
            self.fc1 = nn.Dense(T["mlp"], flatten=False, in_units=e)
            self.gelu = nn.GELU()
            self.fc2 = nn.Dense(e, flatten=False, in_units=T["mlp"])
            self.norm = nn.LayerNorm(in_channels=e)
            self.head = nn.Dense(T["vocab"], flatten=False, in_units=e)

    def attention(self, x: nd.NDArray) -> nd.NDArray:
        batch, seq, e = x.shape
        heads = base.TRANSFORMER["heads"]
        d = e // heads
        qkv = nd.transpose(nd.reshape(self.qkv(x), (batch, seq, 3, heads, d)), axes=(2, 0, 3, 1, 4))
        q, k, v = nd.split(nd.reshape(qkv, (3, batch * heads, seq, d)), num_outputs=3, axis=0, squeeze_axis=True)
        weights = nd.softmax(nd.batch_dot(q, k, transpose_b=True) * (1.0 / math.sqrt(d)), axis=-1)
        out = nd.transpose(nd.reshape(nd.batch_dot(weights, v), (batch, heads, seq, d)), axes=(0, 2, 1, 3))
        return self.proj(nd.reshape(out, (batch, seq, e)))

    def forward(self, tokens: nd.NDArray) -> nd.NDArray:
        x = nd.broadcast_add(self.embed(tokens), self.pos.data(tokens.context))
        x = x + self.attention(self.norm1(x))
        x = x + self.fc2(self.gelu(self.fc1(self.norm2(x))))
        logits: nd.NDArray = self.head(self.norm(x))
        return logits


def _omp_threads() -> int | None:
    """omp_get_max_threads() as the calling thread sees it after MXNet's import."""
    try:
        return int(mx.base._LIB.omp_get_max_threads())
    except (AttributeError, OSError):
        return None


def _defaults(ctx: mx.Context, probe_facts: dict[str, Any]) -> dict[str, Any]:
    env = {k: os.environ[k] for k in ("MXNET_CPU_WORKER_NTHREADS", "MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS",
                                      "MXNET_ENGINE_TYPE", "MXNET_MKLDNN_ENABLED") if k in os.environ}
    return {"layout": "NCHW (gluon Conv2D's layout default; nd.Convolution's too)",
            "threads": {"omp_get_max_threads_after_import": _omp_threads(), "cpus": os.cpu_count(),
                        "engine": "threaded engine, MXNET_CPU_WORKER_NTHREADS workers (default 1); an "
                                  "operator's OpenMP threads: MXNET_OMP_MAX_THREADS, else OMP_NUM_THREADS, else "
                                  "half the CPUs OpenMP sees on x86 (engine/openmp.cc, which sets it at import)",
                        "env": env},
            "onednn": f"MKL-DNN (oneDNN) built={probe_facts.get('mkldnn_built')}, "
                      f"MXNET_MKLDNN_ENABLED={os.environ.get('MXNET_MKLDNN_ENABLED', 'unset (on)')}",
            "device": str(ctx), "train_mode": "mx.autograd.record() (train_mode=True)",
            "hybridize": "not called: the imperative path", "backward_bulk": probe_facts.get("backward_bulk")}


def _gluon_init(model: str) -> str:
    """What ``initialize()`` gave the blocks: its own default initializer (read from its
    signature) for the weights, each block's own for the rest."""
    import inspect

    init = inspect.signature(gluon.Block.initialize).parameters["init"].default
    what = f"gluon's own: initialize()'s default {type(init).__name__}({init._kwargs}) for the weights, " \
           "zero biases (Conv2D, Dense bias_initializer='zeros')"
    if model == "transformer":
        what += "; the same for Embedding (weight_initializer=None); LayerNorm gamma ones, beta zeros; " \
                "positions zeros (made here)"
    return what


def training_step(model: str, api: str, device: str, shape: tuple[int, ...],
                  probe_facts: dict[str, Any] | None = None) -> base.Case:
    """The model's case: ``forward`` runs the network and its loss under
    autograd.record and waits for the loss; ``backward`` the gradients and the
    optimizer's update, and waits for all of it (MXNet runs operators asynchronously)."""
    base.check_model(model, api, shape)
    if base.dtype() != "float32":
        raise base.ProbeError(f"mxnet's models run in float32 only, not {base.dtype()}")
    ctx = mx.gpu(0) if device == "gpu" else mx.cpu()
    mx.random.seed(0)  # gluon's initializers and Dropout draw from MXNet's generator
    data, labels = base.model_data(model, shape)
    x = nd.array(data, ctx=ctx, dtype="int32" if model == "transformer" else "float32")
    y = nd.array(labels.reshape(-1), ctx=ctx, dtype="float32")  # gluon's losses and nd.pick take float labels
    defaults = _defaults(ctx, probe_facts or {})
    built: dict[str, str] = {}
    if model == "lenet" and api == "functional":
        net, params, update = _lenet_functional(ctx)
        defaults["initialisation"] = "made by the probe: uniform +-1/sqrt(fan_in), seeded"
        defaults["optimizer"] = "SGD written out: p -= lr * p.grad (NDArray arithmetic, outside autograd.record)"

        def loss_of(logits: nd.NDArray) -> nd.NDArray:
            return -nd.mean(nd.pick(nd.log_softmax(logits, axis=-1), y, axis=-1))
    else:
        block = {"lenet": _lenet_layer, "cifar": _cifar}.get(model, lambda: _Encoder(shape[1]))()
        block.initialize(ctx=ctx)
        net, params = block, [p.data(ctx) for p in block.collect_params().values()]
        if model == "transformer":
            trainer = gluon.Trainer(block.collect_params(), "adam", {"learning_rate": base.TRANSFORMER["lr"]})
            gelu_op = "nd.LeakyReLU(act_type='gelu')"
            built = {"attention": "no attention layer in gluon 1.9 (nd.contrib.interleaved_matmul_selfatt_* are "
                                  "GluonNLP's fused halves, not a layer): multi-head self-attention built from "
                                  "nn.Dense (q, k, v and output projections), nd.reshape/nd.transpose/nd.split, "
                                  "nd.batch_dot (transpose_b), a scale, nd.softmax"}
            defaults["gelu"] = f"gluon.nn.GELU: {gelu_op} (the erf form)"
        else:
            cfg = base.CIFAR if model == "cifar" else base.LENET
            opts = {"learning_rate": cfg["lr"], **({"momentum": cfg["momentum"]} if model == "cifar" else {})}
            trainer = gluon.Trainer(block.collect_params(), "sgd", opts)
        defaults["initialisation"] = _gluon_init(model)
        o = trainer._optimizer
        hyper = ", ".join(f"{k}={getattr(o, k)}" for k in ("momentum", "beta1", "beta2", "epsilon", "wd")
                          if hasattr(o, k))
        defaults["optimizer"] = f"gluon.Trainer({type(o).__name__.lower()}: lr={o.learning_rate}, {hyper}; " \
                                "step(n) rescales the summed gradient by 1/n)"
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        count = int(y.shape[0])

        def loss_of(logits: nd.NDArray) -> nd.NDArray:
            out: nd.NDArray = loss_fn(nd.reshape(logits, (-1, logits.shape[-1])), y)
            return out

        def update() -> None:
            trainer.step(count)

    def forward() -> nd.NDArray:
        with autograd.record():
            loss = loss_of(net(x))
        loss.wait_to_read()
        return loss

    def backward(loss: nd.NDArray) -> None:
        loss.backward()
        update()
        nd.waitall()

    info = base.model_info(model, api, defaults, built)
    info["parameters"] = sum(int(p.size) for p in params)
    return base.Case(forward=forward, backward=backward, sync=nd.waitall, info=info)
