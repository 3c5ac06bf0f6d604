"""A JAX workload whose forward program calls back into Python (``jax.pure_callback``): a
host callback no PJRT backend's compiler sees, so the stand-in cannot run that program.
Its backward (the update) runs. Used by tests/test_jax_standin.py: a list that lost
its forward pass must say so, never pass for the whole."""
import jax
import jax.numpy as jnp
import numpy as np


def workload(device):
    w = jnp.ones((4, 3)) * 0.1
    x = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)

    def host_scale(a):
        return np.asarray(a) * 2.0

    def loss_fn(w):
        h = jax.pure_callback(host_scale, jax.ShapeDtypeStruct((2, 4), jnp.float32), x)
        return jnp.sum(jnp.tanh(h @ w))

    grad = jax.jit(jax.value_and_grad(loss_fn))
    update = jax.jit(lambda w, g: w - 0.1 * g)
    state = {"w": w}

    def forward():
        loss, state["g"] = grad(state["w"])
        return loss

    def backward(loss):
        state["w"] = update(state["w"], state.pop("g"))

    return forward, backward
