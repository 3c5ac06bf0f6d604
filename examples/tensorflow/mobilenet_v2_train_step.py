"""Keras's MobileNetV2 (keras.applications, ``weights=None``: random weights, 10
classes, 64x64 images) trained as ``model.fit`` trains it: the model's own
``train_step`` in a ``tf.function``, run as a graph, SGD with momentum. A workload for
dltrace (docs/workloads.md): ``dltrace probe tensorflow --workload
examples/tensorflow/mobilenet_v2_train_step.py``; its eager twin is mobilenet_v2.py.

A graph, not eager ops: TensorFlow places the whole step when it first runs it, and an
op with no kernel on the device goes to the host, silently; dltrace's stand-in records
each such op (none here). ``jit_compile=False``: Keras would hand the step to XLA, which
a new device has no JIT for. One step is the whole of it (forward, backward and the
update in one graph): one pass. Synthetic data, made here: nothing is downloaded."""

import tensorflow as tf


def workload(device: str):
    model = tf.keras.applications.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35, weights=None, classes=10)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=False), jit_compile=False)
    images = tf.random.normal((2, 64, 64, 3), seed=0)
    labels = tf.constant([3, 7])
    train_step = tf.function(model.train_step)  # what model.fit runs each step (make_train_function)

    def step():
        return train_step((images, labels))["loss"]

    return step
