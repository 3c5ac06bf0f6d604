"""A TensorFlow workload written from docs/workloads.md alone: a small Keras MLP trained
eagerly under a GradientTape with Adam. Used by tests/test_workloads.py."""

import tensorflow as tf


def workload(device):
    model = tf.keras.Sequential([tf.keras.Input((12,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    x = tf.reshape(tf.linspace(-1.0, 1.0, 60), (5, 12))
    y = tf.constant([0, 1, 2, 1, 0])
    state = {}

    def forward():
        state["tape"] = tf.GradientTape()
        with state["tape"]:
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
        return loss

    def backward(loss):
        grads = state.pop("tape").gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    return forward, backward
