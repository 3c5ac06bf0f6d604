"""A JAX step with what XLA:CPU takes in its stride and a stand-in must too: a typed PRNG
key (``jax.random.key``) split each step and passed to a jitted loss (dropout), and an
update that donates its parameters' buffer. Used by tests/test_jax_standin.py."""
import jax
import jax.numpy as jnp
from functools import partial

def workload(device):
    key = jax.random.key(0)
    w = jnp.ones((4, 3)) * 0.1
    x = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
    state = {"w": w, "key": key}

    @jax.jit
    def loss_fn(w, key):
        drop = jax.random.bernoulli(key, 0.9, x.shape)
        return jnp.sum(jnp.tanh((x * drop) @ w))

    @partial(jax.jit, donate_argnums=(0,))
    def update(w, g):
        return w - 0.1 * g

    def forward():
        state["key"], sub = jax.random.split(state["key"])
        loss, state["g"] = jax.value_and_grad(loss_fn)(state["w"], sub)
        return loss

    def backward(loss):
        state["w"] = update(state["w"], state.pop("g"))

    return forward, backward
