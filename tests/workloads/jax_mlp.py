"""A JAX workload written from docs/workloads.md alone: a small MLP, its loss and gradients
in one jitted program, SGD in another. Used by tests/test_jax_standin.py."""
import jax
import jax.numpy as jnp


def workload(device):
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params = [jax.random.normal(k1, (12, 16)) * 0.1, jax.random.normal(k2, (16, 3)) * 0.1]
    x = jnp.linspace(-1.0, 1.0, 60).reshape(5, 12)
    y = jnp.array([0, 1, 2, 1, 0])

    def loss_fn(p):
        h = jax.nn.relu(x @ p[0])
        return -jnp.mean(jax.nn.log_softmax(h @ p[1])[jnp.arange(5), y])

    grad = jax.jit(jax.value_and_grad(loss_fn))
    update = jax.jit(lambda p, g: [a - 0.1 * b for a, b in zip(p, g)])
    state = {"p": params}

    def forward():
        loss, state["g"] = grad(state["p"])
        return loss

    def backward(loss):
        state["p"] = update(state["p"], state.pop("g"))

    return forward, backward
