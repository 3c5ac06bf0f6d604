"""Keras's MobileNetV2 (keras.applications, ``weights=None``: random weights, 10 classes,
64x64 images) on JAX: Keras 3 with its JAX backend, trained as JAX trains, with a
stateless step: the forward is ``jax.vjp`` of the jitted loss (``model.stateless_call``),
the backward applies its pullback and the optimizer's jitted ``stateless_apply``. A
workload for dltrace (docs/workloads.md):
``dltrace probe jax --workload examples/jax/mobilenet_v2.py``.

keras is the environment's ``keras`` extra (frameworks.yaml). Synthetic data, made
here: nothing is downloaded."""

import os

# before keras is imported: Keras 3 picks its backend once
os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402


def workload(device):
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35, weights=None, classes=10)
    optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    images = jax.device_put(jax.random.normal(jax.random.key(0), (2, 64, 64, 3)), device)
    labels = jax.device_put(jnp.array([3, 7]), device)
    state = {"trainable": [v.value for v in model.trainable_variables],
             "other": [v.value for v in model.non_trainable_variables],
             "optimizer": [v.value for v in optimizer.variables]}
    # committed to the device from the start, as the step's own outputs are: uncommitted
    # arrays made the second and third steps compile the programs again (15 s of a run)
    state = jax.device_put(state, device)

    def loss_of(trainable, other):
        scores, other = model.stateless_call(trainable, other, images, training=True)
        return loss_fn(labels, scores), other

    loss_program = jax.jit(loss_of)

    @jax.jit
    def update(trainable, opt_vars, grads):
        return optimizer.stateless_apply(opt_vars, grads, trainable)

    def forward():
        # the loss, and the pullback that computes its gradients (JAX's split of a step)
        loss, state["pullback"], state["other"] = jax.vjp(lambda t: loss_program(t, state["other"]),
                                                          state["trainable"], has_aux=True)
        return loss

    def backward(loss):
        (grads,) = state.pop("pullback")(jnp.ones_like(loss))
        state["trainable"], state["optimizer"] = update(state["trainable"], state["optimizer"], grads)

    return forward, backward
