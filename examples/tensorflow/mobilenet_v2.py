"""Keras's MobileNetV2 (keras.applications, with ``weights=None``: random weights, 10
classes, 64x64 images), one training step eagerly under a GradientTape: sparse
categorical cross-entropy, SGD with momentum. A workload for dltrace
(docs/workloads.md): ``dltrace probe tensorflow --workload examples/tensorflow/mobilenet_v2.py``.

Eager, not a tf.function: each op then runs on the device asked for, one by one, as
the stand-in and the op layer see it. Synthetic data, made here: nothing is downloaded."""

import tensorflow as tf


def workload(device: str):
    model = tf.keras.applications.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35, weights=None, classes=10)
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=False)
    images = tf.random.normal((2, 64, 64, 3), seed=0)
    labels = tf.constant([3, 7])
    tape = None

    def forward():
        nonlocal tape
        tape = tf.GradientTape()
        with tape:
            loss = loss_fn(labels, model(images, training=True))
        return loss

    def backward(loss):
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    return forward, backward, model.trainable_variables
