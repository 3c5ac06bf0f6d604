"""A functional TensorFlow step that looks keys up in a hash table made on the device
(``HashTableV2``: a resource that is no variable, a handle into the device's own
state): the stand-in's generic kernel cannot re-run it on the CPU, so it registers
none; the forward cannot be placed there and the probe fails naming the op (never a
list without it). Used by tests/test_tensorflow_standin.py."""
import tensorflow as tf


def workload(device):
    with tf.device(device):
        x = tf.reshape(tf.range(12.0), (3, 4))
        keys = tf.constant([3, 1, 2], tf.int64)

    def forward():
        with tf.device(device):
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant([1, 2, 3], tf.int64), tf.constant([0, 1, 2], tf.int64)),
                default_value=-1)
            return tf.gather(x, table.lookup(keys))

    def backward(out):
        with tf.device(device):
            return tf.reduce_sum(out)

    return forward, backward
