"""TensorFlow's training steps of the models (tracer.contract.MODELS): LeNet-5 with
tf.nn ops on tf.Variables and tf.GradientTape alone (the lowest level a TF user writes,
the SGD update by hand) and with keras layers and a keras optimizer; the CIFAR-10
Rosetta CNN and a transformer encoder block with keras, its own layers and initialisation.

Every step runs eagerly, under a fresh, non-persistent tf.GradientTape, as the
primitives do (tracer/probes/tensorflow.py): ``keras.Model.fit`` would compile the step
into a tf.function graph, which is another path. Images are NHWC (channels_last),
the layout TensorFlow's own CPU kernels take.

Imported inside TensorFlow's environment (tracer/probes/tensorflow.py's make_model_case).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tracer.probes import base

keras = tf.keras

#: What the layout is and why: TF's default data_format; with oneDNN off, its Eigen CPU
#: kernels refuse NCHW ("The Conv2D op currently only supports the NHWC tensor format").
_LAYOUT = "NHWC (channels_last: TensorFlow's default data_format; its Eigen CPU Conv2D and MaxPool take NHWC only)"


def _lenet_functional() -> tuple[Callable[[tf.Tensor], tf.Tensor], list[tf.Variable], Callable[[list[Any]], None]]:
    """tf.nn ops on tf.Variables made here from the same numbers as every probe's
    functional LeNet (torch's shapes: (out, in, kh, kw) and (out, in)), the SGD update
    written out. The first dense layer's rows are reordered from torch's (C, H, W)
    flattening to NHWC's (H, W, C), so that the network computes the same function."""
    L = base.LENET
    c1, c2, k, f1, f2 = L["conv1"], L["conv2"], L["k"], L["fc1"], L["fc2"]
    shapes = [(c1, 1, k, k), (c1,), (c2, c1, k, k), (c2,), (f1, c2 * 5 * 5), (f1,), (f2, f1), (f2,),
              (base.CLASSES, f2), (base.CLASSES,)]
    w = [base.model_weight(s, 10 + i) for i, s in enumerate(shapes)]
    w[0], w[2] = w[0].transpose(2, 3, 1, 0), w[2].transpose(2, 3, 1, 0)  # OIHW -> HWIO
    w[4] = w[4].reshape(f1, c2, 5, 5).transpose(0, 2, 3, 1).reshape(f1, -1)  # (C, H, W) rows -> (H, W, C)
    w[4], w[6], w[8] = w[4].T, w[6].T, w[8].T  # (out, in) -> (in, out)
    p = [tf.Variable(np.ascontiguousarray(a)) for a in w]

    def net(x: tf.Tensor) -> tf.Tensor:
        x = tf.nn.max_pool2d(tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, p[0], 1, [[0, 0], [2, 2], [2, 2], [0, 0]]),
                                                       p[1])), 2, 2, "VALID")
        x = tf.nn.max_pool2d(tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, p[2], 1, "VALID"), p[3])), 2, 2, "VALID")
        x = tf.reshape(x, (tf.shape(x)[0], -1))
        x = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, p[4]), p[5]))
        x = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, p[6]), p[7]))
        return tf.nn.bias_add(tf.matmul(x, p[8]), p[9])

    def update(grads: list[Any]) -> None:
        for v, g in zip(p, grads):
            v.assign_sub(L["lr"] * g)

    return net, p, update


def _lenet_layer() -> Any:
    L, Ly = base.LENET, keras.layers
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        Ly.Conv2D(L["conv1"], L["k"], padding="same", activation="relu"), Ly.MaxPooling2D(2),
        Ly.Conv2D(L["conv2"], L["k"], activation="relu"), Ly.MaxPooling2D(2), Ly.Flatten(),
        Ly.Dense(L["fc1"], activation="relu"), Ly.Dense(L["fc2"], activation="relu"), Ly.Dense(base.CLASSES)])


def _cifar() -> Any:
    C, Ly = base.CIFAR, keras.layers

    def block(cout: int) -> list[Any]:
        return [Ly.Conv2D(cout, C["k"], padding="same", activation="relu"),
                Ly.Conv2D(cout, C["k"], padding="same", activation="relu"), Ly.MaxPooling2D(2),
                Ly.Dropout(C["drop_conv"])]

    return keras.Sequential([keras.Input((32, 32, 3)), *block(C["conv1"]), *block(C["conv2"]), Ly.Flatten(),
                             Ly.Dense(C["fc"], activation="relu"), Ly.Dropout(C["drop_fc"]), Ly.Dense(base.CLASSES)])


class _TokenAndPosition(tf.keras.layers.Layer):  # type: ignore[misc]  # tensorflow is Any to mypy
    """Token embeddings plus learned position embeddings: keras has no position-embedding
    layer (keras_hub has), so a second keras Embedding over the positions 0..seq-1 is
    added, as keras.io's transformer example does."""

    def __init__(self, seq: int, vocab: int, embed: int) -> None:
        super().__init__()
        self.seq = seq
        self.tokens = keras.layers.Embedding(vocab, embed)
        self.positions = keras.layers.Embedding(seq, embed)

    def call(self, ids: Any) -> Any:
        return self.tokens(ids) + self.positions(keras.ops.arange(self.seq))


def _encoder(seq: int) -> Any:
    """Pre-norm encoder block (as torch's TransformerEncoderLayer(norm_first=True)): keras'
    MultiHeadAttention and LayerNormalization, a GELU MLP, residuals, no dropout (a
    deterministic step), a final layer norm and the projection to the vocabulary."""
    T, Ly = base.TRANSFORMER, keras.layers
    ids = keras.Input((seq,), dtype="int32")
    h = _TokenAndPosition(seq, T["vocab"], T["embed"])(ids)
    a = Ly.LayerNormalization(epsilon=1e-5)(h)
    h = h + Ly.MultiHeadAttention(T["heads"], T["embed"] // T["heads"])(a, a)
    m = Ly.LayerNormalization(epsilon=1e-5)(h)
    h = h + Ly.Dense(T["embed"])(Ly.Dense(T["mlp"], activation="gelu")(m))
    return keras.Model(ids, Ly.Dense(T["vocab"])(Ly.LayerNormalization(epsilon=1e-5)(h)))


def _initialisers(model: Any) -> dict[str, str]:
    """The initialisers keras gave each kind of layer, read from the layers themselves:
    {"Dense.kernel": "GlorotUniform", ...}."""
    out: dict[str, str] = {}
    for layer in model._flatten_layers(include_self=False):  # keras' own walk over nested layers
        for attr, value in vars(layer).items():
            if attr.endswith("_initializer") and value is not None:
                what = attr.strip("_")[: -len("_initializer")]
                cfg = {k: v for k, v in value.get_config().items() if v is not None}
                out[f"{type(layer).__name__}.{what}"] = f"{type(value).__name__}({cfg})" if cfg else \
                    type(value).__name__
    return dict(sorted(out.items()))


def _optimizer(model: str) -> Any:
    if model == "transformer":
        return keras.optimizers.Adam(base.TRANSFORMER["lr"])
    cfg = base.CIFAR if model == "cifar" else base.LENET
    return keras.optimizers.SGD(cfg["lr"], momentum=cfg.get("momentum", 0.0))


def _threads() -> dict[str, Any]:
    """tf.config.threading's pools (0: TensorFlow sizes the pool itself, one thread per core)."""
    return {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(), "cpus": os.cpu_count()}


def training_step(model: str, api: str, device: str, shape: tuple[int, ...],
                  onednn: bool | None = None) -> base.Case:
    """The model's case: ``forward`` runs the network and its loss under a fresh tape and
    returns (tape, loss); ``backward`` takes the gradients and applies the update.
    ``onednn``: whether TensorFlow's oneDNN ops are on in this process (the probe reads it)."""
    base.check_model(model, api, shape)
    if base.dtype() != "float32":
        raise base.ProbeError(f"tensorflow's model cases compute in float32 only, not {base.dtype()}")
    keras.utils.set_random_seed(0)  # keras' own initialisation and dropout masks, the same every run
    data, labels = base.model_data(model, shape)
    defaults: dict[str, Any] = {
        "layout": "token ids (batch, seq)" if model == "transformer" else _LAYOUT,
        "threads": _threads(),
        "onednn": {"enabled": onednn, "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset")},
        "execution": "eager, one non-persistent tf.GradientTape per step (keras' fit would trace the step "
                     "into a tf.function)"}
    with tf.device(device):
        x = tf.constant(data.astype(np.int32) if model == "transformer" else
                        np.ascontiguousarray(data.transpose(0, 2, 3, 1)))
        y = tf.constant(labels)
        built: dict[str, str] = {}
        if model == "lenet" and api == "functional":
            net, params, update = _lenet_functional()
            defaults["initialisation"] = "made by the probe: uniform +-1/sqrt(fan_in), seeded (torch's numbers)"
            defaults["optimizer"] = "SGD written out: v.assign_sub(lr * g)"
            defaults["loss"] = "tf.nn.sparse_softmax_cross_entropy_with_logits, tf.reduce_mean"

            def loss_of(logits: tf.Tensor) -> tf.Tensor:
                return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        else:
            network = {"lenet": _lenet_layer, "cifar": _cifar}.get(model, lambda: _encoder(shape[1]))()
            params = list(network.trainable_variables)
            optimizer = _optimizer(model)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            net = lambda inputs: network(inputs, training=True)  # noqa: E731 - dropout active
            defaults["initialisation"] = _initialisers(network)
            defaults["optimizer"] = {"class": f"keras.optimizers.{type(optimizer).__name__}", "applied":
                                     "apply_gradients", **{k: v for k, v in optimizer.get_config().items()
                                                           if v is not None and k != "name"}}
            defaults["loss"] = f"keras.losses.SparseCategoricalCrossentropy(from_logits=True), " \
                               f"reduction {loss_fn.reduction}"
            defaults["keras"] = keras.__version__
            if model == "transformer":
                built["position embedding"] = "no position-embedding layer in keras (keras_hub has one): a " \
                                              "second keras Embedding over the positions, added to the tokens'"

            def loss_of(logits: tf.Tensor) -> tf.Tensor:
                return loss_fn(y, logits)

            def update(grads: list[Any]) -> None:
                optimizer.apply_gradients(zip(grads, params))

    def forward() -> tuple[tf.GradientTape, tf.Tensor]:
        with tf.device(device):
            with tf.GradientTape() as tape:
                loss = loss_of(net(x))
        return tape, loss

    def backward(state: tuple[tf.GradientTape, tf.Tensor]) -> list[Any]:
        tape, loss = state
        with tf.device(device):
            grads = tape.gradient(loss, params)
            update(grads)
        return grads  # type: ignore[no-any-return]

    info = base.model_info(model, api, defaults, built)
    info["parameters"] = int(sum(np.prod(v.shape) for v in params))
    return base.Case(forward=forward, backward=backward, info=info, private={"parameters": params})
