"""Flax's own MNIST CNN (the NNX tutorial's model: two convolutions with average pooling,
two dense layers; random weights, 28x28 images, 10 classes) trained with optax's AdamW:
the stack most JAX code is written in. The step as JAX trains it: the model split into
its graph and its parameters (``nnx.split``), the forward ``jax.vjp`` of the jitted loss,
the backward its pullback and the jitted optax update. A workload for dltrace
(docs/workloads.md): ``dltrace probe jax --workload examples/jax/flax_cnn.py``.

flax and optax are the environment's ``flax`` extra (frameworks.yaml). Synthetic data,
made here: nothing is downloaded."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class CNN(nnx.Module):
    """flax's docs_nnx/mnist_tutorial CNN."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.avg_pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
        self.linear2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x):
        x = self.avg_pool(nnx.relu(self.conv1(x)))
        x = self.avg_pool(nnx.relu(self.conv2(x)))
        x = x.reshape(x.shape[0], -1)
        x = nnx.relu(self.linear1(x))
        return self.linear2(x)


@nnx.jit
def create_model() -> CNN:
    """The model built in one compiled program, as Flax's guides build theirs: built
    eagerly, each initializer's ops compile one by one (20 programs; 3.6 s each on an
    emulated ARM CPU, where this setup took 84 s)."""
    return CNN(rngs=nnx.Rngs(0))


def workload(device):
    graphdef, params = nnx.split(create_model())
    tx = optax.adamw(1e-3)
    state = {"params": jax.device_put(params, device)}
    state["opt"] = jax.device_put(jax.jit(tx.init)(state["params"]), device)
    # NumPy's arrays, put on the device: made with jax.random they cost two more compilations
    images = jax.device_put(np.random.default_rng(0).standard_normal((2, 28, 28, 1), dtype=np.float32), device)
    labels = jax.device_put(np.array([3, 7], dtype=np.int32), device)

    @jax.jit
    def loss_of(params):
        logits = nnx.merge(graphdef, params)(images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    @jax.jit
    def update(params, opt, grads):
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt

    def forward():
        loss, state["pullback"] = jax.vjp(loss_of, state["params"])
        return loss

    def backward(loss):
        (grads,) = state.pop("pullback")(jnp.ones_like(loss))
        state["params"], state["opt"] = update(state["params"], state["opt"], grads)

    return forward, backward
