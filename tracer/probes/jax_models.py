"""JAX's training steps of the models (tracer.contract.MODELS).

LeNet-5 functional is JAX's lowest usable level: ``jax.lax.conv_general_dilated`` and
``jax.numpy`` on parameters made here, autodiff with ``jax.vjp``, the SGD update written
out. The layer level is the layer API JAX ships, ``jax.example_libraries.stax`` with
``jax.example_libraries.optimizers``: an example library (JAX's documentation sends
users to Flax and Optax, which are not part of JAX), with stax's own initialisation and
layout (NHWC). stax has no embedding, layer norm or attention: the transformer builds
them from ``jax.numpy`` and ``jax.nn`` as (init, apply) pairs in stax's own convention,
and its info says so.

Every pass is split as the primitives' are (tracer/probes/jax.py): ``forward`` is
``jax.vjp`` of the jitted loss (one compiled program: the network, its loss and the
residuals the pullback keeps), ``backward`` applies the pullback (the transposed
program) and then the jitted optimizer update (a second program). The case's ``private``
names those programs for the op layer: ``f`` and ``args`` (the loss and its current
arguments, differentiated with respect to the first ``wrt``), ``ones`` (the loss's
cotangent) and ``update`` (the update program and its arguments given the gradients).

Imported inside JAX's environment (tracer/probes/jax.py's make_model_case)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.example_libraries import optimizers, stax

from tracer.probes import base

_SEED = 0  # the PRNG key stax initialises the layer level from


@dataclass
class _Net:
    """One model written at one level: its loss ``loss(params, *data)``, the optimizer's
    state (``carry``), how to read the parameters from it and how the update makes the
    next one from the gradients, and what the framework chose (``defaults``)."""

    loss: Callable[..., jax.Array]
    carry: Any
    get_params: Callable[[Any], Any]
    update: Callable[[Any, Any], Any]  # (grads, carry) -> carry
    data: Callable[[Any], tuple[Any, ...]]  # carry -> the loss's arguments after the parameters
    defaults: dict[str, Any]
    built_from_primitives: dict[str, str]


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy, mean over the examples (or tokens), in float32 (as torch's
    probe does): JAX has no loss function, so it is written from jax.nn.log_softmax."""
    logp = jax.nn.log_softmax(logits.reshape(-1, logits.shape[-1]).astype(jnp.float32), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels.reshape(-1, 1), axis=1))


_LOSS_NOTE = "no loss function in jax or stax: softmax cross-entropy written from jax.nn.log_softmax"


def _cast(tree: Any, dtype: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), tree)


# ----------------------------------------------------------------------------- LeNet functional


def _lenet_functional(x: jax.Array, y: jax.Array, dtype: Any) -> _Net:
    """lax and jnp on parameters made here with torch's shapes (OIHW kernels, (out, in)
    dense weights) in NCHW, the update ``p - lr * g`` over the parameter list."""
    L = base.LENET
    shapes = [(L["conv1"], 1, L["k"], L["k"]), (L["conv1"],), (L["conv2"], L["conv1"], L["k"], L["k"]),
              (L["conv2"],), (L["fc1"], L["conv2"] * 5 * 5), (L["fc1"],), (L["fc2"], L["fc1"]), (L["fc2"],),
              (base.CLASSES, L["fc2"]), (base.CLASSES,)]
    params = [jnp.asarray(base.model_weight(s, 10 + i), dtype) for i, s in enumerate(shapes)]
    dims = ("NCHW", "OIHW", "NCHW")
    window = (1, 1, 2, 2)

    def conv(h: jax.Array, w: jax.Array, b: jax.Array, pad: int) -> jax.Array:
        h = lax.conv_general_dilated(h, w, (1, 1), ((pad, pad), (pad, pad)), dimension_numbers=dims)
        return h + b[None, :, None, None]

    def pool(h: jax.Array) -> jax.Array:
        return lax.reduce_window(h, -jnp.inf, lax.max, window, window, "VALID")

    def lenet_loss(p: list[jax.Array], images: jax.Array, labels: jax.Array) -> jax.Array:
        h = pool(jax.nn.relu(conv(images, p[0], p[1], 2)))
        h = pool(jax.nn.relu(conv(h, p[2], p[3], 0)))
        h = h.reshape(h.shape[0], -1)
        h = jax.nn.relu(h @ p[4].T + p[5])
        h = jax.nn.relu(h @ p[6].T + p[7])
        return _cross_entropy(h @ p[8].T + p[9], labels)

    def sgd_update(grads: list[jax.Array], p: list[jax.Array]) -> Any:
        return jax.tree_util.tree_map(lambda w, g: w - L["lr"] * g, p, grads)

    defaults = {"layout": "NCHW (given to lax.conv_general_dilated as dimension_numbers NCHW, OIHW, NCHW)",
                "initialisation": "made by the probe: uniform +-1/sqrt(fan_in), seeded",
                "optimizer": "SGD written out: jax.tree_util.tree_map(p - lr * g), jitted",
                "loss": _LOSS_NOTE}
    return _Net(jax.jit(lenet_loss), params, lambda c: c, jax.jit(sgd_update), lambda c: (x, y), defaults, {})


# ----------------------------------------------------------------------------- the stax levels


def _optimizer(opt: Any, params: Any) -> tuple[Any, Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """(carry, get_params, update) for an example_libraries optimizer: the carry is the
    step count and the optimizer's state, and the jitted update advances both."""
    opt_init, opt_update, get_params = opt

    def optimizer_update(grads: Any, carry: tuple[jax.Array, Any]) -> tuple[jax.Array, Any]:
        i, state = carry
        return i + 1, opt_update(i, grads, state)

    return (jnp.zeros((), jnp.int32), opt_init(params)), lambda c: get_params(c[1]), jax.jit(optimizer_update)


def _stax_defaults(inits: str) -> dict[str, Any]:
    return {"api": "jax.example_libraries.stax and .optimizers: the layer API JAX ships, an example library "
                   "(JAX points users to Flax and Optax, outside JAX)",
            "initialisation": f"stax's own, from jax.random.key({_SEED}) ({jax.config.jax_default_prng_impl}): "
                              + inits,
            "loss": _LOSS_NOTE}


_CONV_INIT = "Conv weights glorot_normal (HWIO), biases normal(1e-6)"
_DENSE_INIT = "Dense weights glorot_normal, biases normal(1e-2)"
_NHWC = "NHWC (stax.Conv's default dimension_numbers NHWC, HWIO, NHWC; MaxPool's spec None: NHWC); " \
        "the probe's NCHW batch transposed once when the case is made"


def _init(layers: tuple[Callable[..., Any], Callable[..., Any]], shape: tuple[int, ...], dtype: Any) -> tuple[
        Callable[..., Any], Any]:
    init_fun, apply_fun = layers
    _, params = init_fun(jax.random.key(_SEED), shape)
    return apply_fun, _cast(params, dtype)


def _lenet_layer(x: jax.Array, y: jax.Array, dtype: Any) -> _Net:
    L = base.LENET
    k = (L["k"], L["k"])
    layers = stax.serial(
        stax.Conv(L["conv1"], k, padding=((2, 2), (2, 2))), stax.Relu, stax.MaxPool((2, 2), (2, 2)),
        stax.Conv(L["conv2"], k), stax.Relu, stax.MaxPool((2, 2), (2, 2)), stax.Flatten,
        stax.Dense(L["fc1"]), stax.Relu, stax.Dense(L["fc2"]), stax.Relu, stax.Dense(base.CLASSES))
    apply_fun, params = _init(layers, x.shape, dtype)

    def lenet_loss(p: Any, images: jax.Array, labels: jax.Array) -> jax.Array:
        return _cross_entropy(apply_fun(p, images), labels)

    carry, get_params, update = _optimizer(optimizers.sgd(L["lr"]), params)
    defaults = {**_stax_defaults(f"{_CONV_INIT}; {_DENSE_INIT}"), "layout": _NHWC,
                "optimizer": "optimizers.sgd(step_size), its update jitted"}
    return _Net(jax.jit(lenet_loss), carry, get_params, update, lambda c: (x, y), defaults, {})


def _cifar(x: jax.Array, y: jax.Array, dtype: Any) -> _Net:
    C = base.CIFAR

    def block(cout: int) -> list[Any]:
        # stax.Dropout's rate is the probability to keep
        return [stax.Conv(cout, (C["k"], C["k"]), padding="SAME"), stax.Relu,
                stax.Conv(cout, (C["k"], C["k"]), padding="SAME"), stax.Relu, stax.MaxPool((2, 2), (2, 2)),
                stax.Dropout(1 - C["drop_conv"], mode="train")]

    layers = stax.serial(*block(C["conv1"]), *block(C["conv2"]), stax.Flatten, stax.Dense(C["fc"]), stax.Relu,
                         stax.Dropout(1 - C["drop_fc"], mode="train"), stax.Dense(base.CLASSES))
    apply_fun, params = _init(layers, x.shape, dtype)
    dropout_key = jax.random.key(_SEED + 1)

    def cifar_loss(p: Any, images: jax.Array, labels: jax.Array, step: jax.Array) -> jax.Array:
        # a fresh dropout mask each step, drawn inside the program from the step count
        return _cross_entropy(apply_fun(p, images, rng=jax.random.fold_in(dropout_key, step)), labels)

    carry, get_params, update = _optimizer(optimizers.momentum(C["lr"], C["momentum"]), params)
    defaults = {**_stax_defaults(f"{_CONV_INIT}; {_DENSE_INIT}"), "layout": _NHWC,
                "dropout": "stax.Dropout(rate=keep probability 1 - p, mode='train'): a Bernoulli mask from a "
                           "PRNG key, here jax.random.fold_in(key, step) inside the step's program; "
                           "stax.serial splits it per layer",
                "optimizer": f"optimizers.momentum(step_size={C['lr']}, mass={C['momentum']}): "
                             "v = mass * v + g, p -= lr * v, its update jitted"}
    return _Net(jax.jit(cifar_loss), carry, get_params, update, lambda c: (x, y, c[0]), defaults, {})


# ----------------------------------------------------------------------------- transformer


def _embedding(vocab: int, dim: int, seq: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Token embedding N(0, 1) (as torch's nn.Embedding) and learned positions, zeros."""
    def init_fun(rng: jax.Array, input_shape: tuple[int, ...]) -> tuple[tuple[int, ...], Any]:
        return (*input_shape, dim), (jax.random.normal(rng, (vocab, dim)), jnp.zeros((1, seq, dim)))

    def apply_fun(params: Any, tokens: jax.Array, **kwargs: Any) -> jax.Array:
        table, pos = params
        return jnp.take(table, tokens, axis=0) + pos

    return init_fun, apply_fun


def _layer_norm(dim: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """jax.nn.standardize over the features (two-pass variance, eps 1e-5 as torch's) with
    a learned scale (ones) and shift (zeros)."""
    def init_fun(rng: jax.Array, input_shape: tuple[int, ...]) -> tuple[tuple[int, ...], Any]:
        return input_shape, (jnp.ones((dim,)), jnp.zeros((dim,)))

    def apply_fun(params: Any, h: jax.Array, **kwargs: Any) -> jax.Array:
        scale, shift = params
        return jax.nn.standardize(h, axis=-1, epsilon=1e-5, algorithm="stable") * scale + shift

    return init_fun, apply_fun


def _attention(dim: int, heads: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Multi-head self-attention: one stax.Dense for the query, key and value
    projections, the heads split with reshape, jax.nn.dot_product_attention (JAX's
    scaled dot-product attention function, no mask), and stax.Dense out."""
    qkv_init, qkv_apply = stax.Dense(3 * dim)
    out_init, out_apply = stax.Dense(dim)

    def init_fun(rng: jax.Array, input_shape: tuple[int, ...]) -> tuple[tuple[int, ...], Any]:
        k1, k2 = jax.random.split(rng)
        _, qkv = qkv_init(k1, input_shape)
        _, out = out_init(k2, input_shape)
        return input_shape, (qkv, out)

    def apply_fun(params: Any, h: jax.Array, **kwargs: Any) -> jax.Array:
        qkv, out = params
        b, s, _ = h.shape
        q, k, v = jnp.split(qkv_apply(qkv, h).reshape(b, s, 3, heads, dim // heads), 3, axis=2)
        a = jax.nn.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0])  # (batch, seq, heads, head dim)
        return out_apply(out, a.reshape(b, s, dim))

    return init_fun, apply_fun


def _residual(*layers: Any) -> Any:
    return stax.serial(stax.FanOut(2), stax.parallel(stax.Identity, stax.serial(*layers)), stax.FanInSum)


def _transformer(x: jax.Array, y: jax.Array, dtype: Any) -> _Net:
    T = base.TRANSFORMER
    e = T["embed"]
    layers = stax.serial(
        _embedding(T["vocab"], e, x.shape[1]),
        _residual(_layer_norm(e), _attention(e, T["heads"])),
        _residual(_layer_norm(e), stax.Dense(T["mlp"]), stax.Gelu, stax.Dense(e)),
        _layer_norm(e), stax.Dense(T["vocab"]))
    apply_fun, params = _init(layers, x.shape, dtype)

    def transformer_loss(p: Any, tokens: jax.Array, targets: jax.Array) -> jax.Array:
        return _cross_entropy(apply_fun(p, tokens), targets)

    carry, get_params, update = _optimizer(optimizers.adam(T["lr"]), params)
    defaults = {**_stax_defaults(f"{_DENSE_INIT}; embedding N(0, 1), positions zeros, layer norm ones and zeros "
                                 "(made by the probe: stax has none of these layers)"),
                "layout": "batch, sequence, features (stax.Dense acts on the last axis)",
                "gelu": "stax.Gelu = jax.nn.gelu with its default approximate=True (the tanh form; "
                        "torch's default is the exact erf form)",
                "attention": "jax.nn.dot_product_attention, implementation None (XLA's on the CPU)",
                "optimizer": "optimizers.adam(step_size=%g), b1=0.9, b2=0.999, eps=1e-8, its update jitted"
                             % T["lr"]}
    built = {"embedding": "no embedding layer in stax: jnp.take of a (vocab, features) table plus learned "
                          "positions, as a stax (init, apply) pair",
             "layer norm": "no layer norm in stax (it has BatchNorm only): jax.nn.standardize over the features, "
                           "times a scale plus a shift",
             "multi-head attention": "no attention layer in stax: stax.Dense projections, heads split with "
                                     "jnp.reshape, jax.nn.dot_product_attention, stax.Dense out",
             "residual": "stax.FanOut(2), stax.parallel(stax.Identity, block), stax.FanInSum",
             "cross-entropy": _LOSS_NOTE}
    return _Net(jax.jit(transformer_loss), carry, get_params, update, lambda c: (x, y), defaults, built)


_BUILDERS: dict[tuple[str, str], Callable[[jax.Array, jax.Array, Any], _Net]] = {
    ("lenet", "functional"): _lenet_functional, ("lenet", "layer"): _lenet_layer,
    ("cifar", "layer"): _cifar, ("transformer", "layer"): _transformer}


def training_step(model: str, api: str, dev: Any, shape: tuple[int, ...]) -> base.Case:
    """The model's case: ``forward`` runs the network and its loss under ``jax.vjp``,
    ``backward`` the pullback and the optimizer's update."""
    base.check_model(model, api, shape)
    dtype = jnp.dtype(base.dtype())
    data, labels = base.model_data(model, shape)
    nhwc = model in ("cifar",) or (model == "lenet" and api == "layer")
    if model != "transformer":
        data = np.ascontiguousarray(data.transpose(0, 2, 3, 1)) if nhwc else data
    # JAX's 64-bit types are off by default: token ids and labels are int32
    x = jax.device_put(jnp.asarray(data, jnp.int32 if model == "transformer" else dtype), dev)
    y = jax.device_put(jnp.asarray(labels, jnp.int32), dev)
    with jax.default_device(dev):
        net = _BUILDERS[(model, api)](x, y, dtype)
    carry = [jax.device_put(net.carry, dev)]
    one = jax.device_put(jnp.ones((), jnp.float32), dev)
    jax.block_until_ready((x, y, carry[0]))
    last: list[Any] = [None]  # what sync waits for: the latest loss or optimizer state

    def args() -> tuple[Any, ...]:
        return (net.get_params(carry[0]), *net.data(carry[0]))

    def forward() -> tuple[jax.Array, Any]:
        params, *rest = args()
        loss, pullback = jax.vjp(lambda p: net.loss(p, *rest), params)
        last[0] = loss
        return loss, pullback

    def backward(state: tuple[jax.Array, Any]) -> Any:
        _, pullback = state
        (grads,) = pullback(one)
        carry[0] = net.update(grads, carry[0])
        last[0] = carry[0]
        jax.block_until_ready(carry[0])
        return carry[0]

    def sync() -> None:
        if last[0] is not None:
            jax.block_until_ready(last[0])

    defaults = {**net.defaults, "dtype": base.dtype(),
                "threads": f"XLA:CPU's own intra-op pool, sized by XLA ({os.cpu_count()} CPUs here)"
                if dev.platform == "cpu" else "",
                "kernels": "chosen by XLA when it compiles the step: the op layer's compiled HLO names each "
                           "(a library's where XLA hands it one: a custom call or a custom fusion)"}
    info = base.model_info(model, api, {k: v for k, v in defaults.items() if v}, net.built_from_primitives)
    info.update({"jit": not jax.config.jax_disable_jit, "dtype": base.dtype(),
                 "parameters": sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(args()[0]))})
    private = {"f": net.loss, "args": args, "wrt": 1, "ones": one, "device": dev,
               "update": lambda grads: (net.update, (grads, carry[0]))}
    return base.Case(forward=forward, backward=backward, sync=sync, info=info, private=private)
