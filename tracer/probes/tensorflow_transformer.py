"""TensorFlow's transformer primitives (tracer.contract.PRIMITIVES, family
"transformer"): layer norm, exact GELU, attention, embedding, cross-entropy, and one
Adam update, at the functional level (tf.nn and tf.raw_ops on tf.Variables) and the
layer level (keras 3), for tracer/probes/tensorflow.py.

Each builder returns ``(run, params, info)``: ``run()`` computes the primitive (under
the probe's tape), ``params`` are the leaves whose gradients the backward takes besides
the input, ``info`` goes into the trace's meta: what TensorFlow or keras chose by
default (``defaults``) and what it has no API for (``built_from_primitives``), so that
a report can say why the ops it shows are the ones it shows.

Imported inside TensorFlow's environment only.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tracer.probes import base

keras = tf.keras

#: (run, params, info)
Built = tuple[Callable[[], Any], list[Any], dict[str, Any]]


def _default(fn: Callable[..., Any], arg: str) -> Any:
    """A keyword's default, read from the signature the installed version has."""
    return inspect.signature(fn).parameters[arg].default


def _var(a: np.ndarray, dtype: tf.DType) -> tf.Variable:
    """A parameter: the seeded float32 data, rounded by TensorFlow's own cast."""
    return tf.Variable(tf.cast(a, dtype))


# ----------------------------------------------------------------------------- functional


def functional(primitive: str, x: tf.Tensor, shape: tuple[int, ...], dt: tf.DType) -> Built:
    """The tf.nn / tf.linalg ops on ``x`` (token ids for the embedding), parameters in ``dt``."""
    if primitive == "layernorm":
        f = shape[-1]
        g, b = _var(base.ln_scale(f), dt), _var(base.bias(f), dt)

        def layernorm() -> tf.Tensor:
            mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)  # biased variance
            return tf.nn.batch_normalization(x, mean, variance, b, g, base.LN_EPS)

        return layernorm, [g, b], {"built_from_primitives": {
            "layernorm": "no layer-norm op in tf.nn: tf.nn.moments over the last axis and "
                         "tf.nn.batch_normalization (what keras' LayerNormalization computes too)"}}
    if primitive == "gelu":
        return (lambda: tf.nn.gelu(x, approximate=False)), [], {
            "defaults": {"tf.nn.gelu approximate": _default(tf.nn.gelu, "approximate")}}
    if primitive == "attention":
        k, v = (_var(a, dt) for a in base.attention_kv(shape))
        scale = 1.0 / math.sqrt(shape[-1])

        def attention() -> tf.Tensor:
            scores = tf.linalg.matmul(x, k, transpose_b=True) * scale
            return tf.linalg.matmul(tf.nn.softmax(scores, axis=-1), v)

        return attention, [k, v], {"built_from_primitives": {
            "attention": "no scaled-dot-product attention op in TensorFlow: built from tf.linalg.matmul "
                         "(BatchMatMulV2), a scale and tf.nn.softmax"}}
    if primitive == "embedding":
        table = _var(base.embed_table(), dt)
        return (lambda: tf.nn.embedding_lookup(table, x)), [table], {"defaults": {
            "table gradient": "tf.IndexedSlices (the looked-up rows' gradients and their ids), never a dense "
                              "table: tf.convert_to_tensor of it would add an UnsortedSegmentSum"}}
    if primitive == "crossentropy":
        labels = tf.constant(base.class_labels(shape[0], shape[1]))
        return (lambda: tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x))), \
            [], {}
    raise base.ProbeError(f"unknown primitive {primitive}")


def adam_functional(p: tf.Variable, shape: tuple[int, ...]) -> tuple[Callable[[], Any], dict[str, Any]]:
    """One ResourceApplyAdam per call: the fused kernel a PluggableDevice registers for
    Adam (keras' Adam never calls it). TensorFlow's kernel adds its epsilon to sqrt(v)
    before the bias correction (Kingma and Ba's epsilon-hat); it is given
    eps * sqrt(1 - beta2^t) each step, which makes it torch's update exactly."""
    A, dt = base.ADAM, p.dtype
    m, v = tf.Variable(tf.zeros(shape, dt)), tf.Variable(tf.zeros(shape, dt))
    grad = tf.cast(base.adam_grad(shape), dt)
    step = [0]

    def update() -> tf.Variable:
        step[0] += 1
        t = step[0]
        b1t, b2t = A["beta1"] ** t, A["beta2"] ** t
        s = [tf.constant(c, dt) for c in (b1t, b2t, A["lr"], A["beta1"], A["beta2"], A["eps"] * math.sqrt(1 - b2t))]
        tf.raw_ops.ResourceApplyAdam(var=p.handle, m=m.handle, v=v.handle, beta1_power=s[0], beta2_power=s[1],
                                     lr=s[2], beta1=s[3], beta2=s[4], epsilon=s[5], grad=grad)
        return p

    return update, {"optimizer": {
        "call": "tf.raw_ops.ResourceApplyAdam on tf.Variables (the parameter and its m, v state)",
        "epsilon": "TensorFlow's kernel adds epsilon to sqrt(v) before the bias correction: given "
                   "eps * sqrt(1 - beta2^t) each step, it computes torch.optim.Adam's update",
        "state": {"m": "zeros", "v": "zeros", "step": "counted by the probe; beta powers passed as scalars"}}}


# ----------------------------------------------------------------------------- layer


def layer(primitive: str, x: tf.Tensor, shape: tuple[int, ...], dtype: tf.DType) -> Built:
    """keras 3's layer (or loss) for the primitive, built, computing in ``dtype``."""
    L, dt = keras.layers, dtype.name
    if primitive == "layernorm":
        ln = L.LayerNormalization(axis=-1, epsilon=base.LN_EPS, dtype=dt)
        ln.build(tuple(x.shape))
        ln.set_weights([base.ln_scale(shape[-1]), base.bias(shape[-1])])
        return (lambda: ln(x, training=True)), list(ln.trainable_variables), {"defaults": {
            "LayerNormalization epsilon": _default(L.LayerNormalization, "epsilon"),
            "computes in": "float32 (keras.ops.layer_normalization casts a reduced-precision input up)"
                           if dt != "float32" else "float32"}}
    if primitive == "gelu":
        act = L.Activation("gelu", dtype=dt)
        return (lambda: act(x, training=True)), [], {"defaults": {
            "keras.activations.gelu approximate": _default(keras.activations.gelu, "approximate")}}
    if primitive == "attention":
        # keras Variables (keras ops take no raw tf.Variable), as a layer's own parameters are
        k, v = (keras.Variable(a, dtype=dt) for a in base.attention_kv(shape))
        att = L.Attention(use_scale=True, score_mode="dot", dtype=dt)
        att.build([tuple(x.shape), tuple(v.shape), tuple(k.shape)])
        att.scale.assign(1.0 / math.sqrt(shape[-1]))  # its learned scalar, set to 1/sqrt(D), not a gradient leaf
        return (lambda: att([x, v, k], training=True)), [k, v], {"built_from_primitives": {
            "attention": "keras.layers.Attention (Luong dot-product attention, no projections) with use_scale: "
                         "its learned scalar scale set to 1/sqrt(D), so it computes softmax(q k^T / sqrt(D)) v "
                         "(keras.layers.MultiHeadAttention adds query/key/value/output projections)"},
            "defaults": {"Attention use_scale": _default(L.Attention, "use_scale"),
                         "Attention score_mode": _default(L.Attention, "score_mode")}}
    if primitive == "embedding":
        emb = L.Embedding(base.EMBED_VOCAB, base.EMBED_DIM, dtype=dt)
        emb.build(tuple(x.shape))
        emb.set_weights([base.embed_table()])
        return (lambda: emb(x, training=True)), list(emb.trainable_variables), {"defaults": {
            "table gradient": "tf.IndexedSlices (keras.ops.take is tf.gather)"}}
    if primitive == "crossentropy":
        labels = tf.constant(base.class_labels(shape[0], shape[1]))
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype=dt)
        return (lambda: loss(labels, x)), [], {"defaults": {
            "reduction": loss.reduction,
            "loss dtype": "set to the input's: a keras loss casts its inputs to its own dtype (floatx, float32)"}}
    raise base.ProbeError(f"unknown primitive {primitive}")


def adam_layer(p: tf.Variable, shape: tuple[int, ...]) -> tuple[Callable[[], Any], dict[str, Any]]:
    """keras.optimizers.Adam's apply_gradients with the contract's numbers; keras'
    default epsilon (1e-7) is recorded and replaced by the contract's 1e-8."""
    A = base.ADAM
    opt = keras.optimizers.Adam(learning_rate=A["lr"], beta_1=A["beta1"], beta_2=A["beta2"], epsilon=A["eps"])
    grad = tf.cast(base.adam_grad(shape), p.dtype)

    def update() -> tf.Variable:
        opt.apply_gradients([(grad, p)])
        return p

    return update, {"optimizer": {
        "call": "keras.optimizers.Adam.apply_gradients (its update written in keras ops)",
        "epsilon": "keras adds epsilon to sqrt(v) before the bias correction (epsilon-hat): with the same "
                   "1e-8 it differs from torch.optim.Adam where sqrt(v) is about epsilon"},
        "defaults": {"keras.optimizers.Adam epsilon": _default(keras.optimizers.Adam, "epsilon")}}
