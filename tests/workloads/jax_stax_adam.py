"""A JAX CNN as jax.example_libraries writes one, from docs/workloads.md alone: stax's
layers, ``optimizers.adam`` (its update takes the step counter, a Python int, and the
optimizer state, a pytree), the forward as ``jax.vjp`` of the jitted loss, the backward
the pullback and the jitted update. Used by tests/test_jax_standin.py."""
import jax
import jax.numpy as jnp
from jax.example_libraries import optimizers, stax


def workload(device):
    init, apply = stax.serial(stax.Conv(4, (3, 3), padding="SAME"), stax.Relu, stax.Flatten, stax.Dense(3),
                              stax.LogSoftmax)
    _, params = init(jax.random.PRNGKey(0), (2, 6, 6, 1))
    opt_init, opt_update, get_params = optimizers.adam(1e-2)
    x = jnp.linspace(-1.0, 1.0, 72).reshape(2, 6, 6, 1)
    y = jax.nn.one_hot(jnp.array([0, 2]), 3)
    state = {"opt": opt_init(params), "step": 0}

    @jax.jit
    def loss_fn(p):
        return -jnp.mean(jnp.sum(apply(p, x) * y, axis=1))

    @jax.jit
    def update(i, g, opt):
        return opt_update(i, g, opt)

    def forward():
        loss, state["pullback"] = jax.vjp(loss_fn, get_params(state["opt"]))
        return loss

    def backward(loss):
        (g,) = state.pop("pullback")(jnp.ones_like(loss))
        state["opt"] = update(state["step"], g, state["opt"])
        state["step"] += 1

    return forward, backward
