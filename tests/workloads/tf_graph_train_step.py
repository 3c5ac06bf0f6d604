"""A Keras model trained through its own ``train_step`` in a ``tf.function``, as
``model.fit`` runs it (the graph, not eager ops), with the labels looked up in a
vocabulary table first (``LookupTableFindV2``: the table is a host resource, so the graph
places the lookup on the host, beside it). Written from docs/workloads.md; used by
tests/test_tensorflow_standin.py."""

import tensorflow as tf


def workload(device):
    with tf.device(device):
        model = tf.keras.Sequential([tf.keras.Input((12,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(3)])
        # jit_compile=False: Keras would compile the step with XLA, which a new device has no JIT for
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
        x = tf.reshape(tf.linspace(-1.0, 1.0, 60), (5, 12))
    with tf.device("/CPU:0"):  # a vocabulary is a host resource (a new device has no hash-table kernels)
        words = tf.constant(["cat", "dog", "bird", "dog", "cat"])
        vocabulary = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(["cat", "dog", "bird"]), tf.constant([0, 1, 2], tf.int64)), default_value=-1)

    @tf.function
    def train_step():
        return model.train_step((x, vocabulary.lookup(words)))["loss"]

    return train_step
