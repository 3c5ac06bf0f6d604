"""A functional TensorFlow step with an embedding lookup and Adam, written from
docs/workloads.md: the table and the dense layer are resource variables, the lookup is
``ResourceGather``, and TensorFlow's own Adam (tf.compat.v1.train.AdamOptimizer: Keras 3's
is written in Python ops) updates the dense weight through ``ResourceApplyAdam`` and the
table's rows through ``ResourceScatterAdd``. The stand-in runs each on its variables.
Used by tests/test_tensorflow_standin.py."""

import tensorflow as tf


def workload(device):
    with tf.device(device):
        table = tf.Variable(tf.random.stateless_normal((12, 4), seed=(1, 2)), name="table")
        weight = tf.Variable(tf.random.stateless_normal((4, 3), seed=(3, 4)), name="weight")
        ids = tf.constant([1, 3, 5, 3])
        labels = tf.constant([0, 2, 1, 0])
    optimizer = tf.compat.v1.train.AdamOptimizer(1e-2)
    state = {}

    def forward():
        with tf.device(device):
            state["tape"] = tf.GradientTape()
            with state["tape"]:
                logits = tf.matmul(tf.nn.embedding_lookup(table, ids), weight)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        return loss

    def backward(loss):
        with tf.device(device):
            grads = state.pop("tape").gradient(loss, [table, weight])
            optimizer.apply_gradients(zip(grads, [table, weight]))
        return grads

    return forward, backward, [table, weight]
