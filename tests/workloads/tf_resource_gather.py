"""A functional TensorFlow step with an embedding lookup on a resource variable
(``ResourceGather``) and an update of it: the stand-in PluggableDevice registers no kernel
for resource ops, so the forward cannot be placed there and the probe fails naming the
op (never a list without it). Used by tests/test_tensorflow_standin.py."""
import tensorflow as tf

def workload(device):
    with tf.device(device):
        table = tf.Variable(tf.random.stateless_normal((10, 4), seed=(1, 2)))
        ids = tf.constant([1, 3, 5])
    def forward():
        with tf.device(device):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids))
            forward.grads = tape.gradient(loss, [table])
        return loss
    def backward(loss):
        with tf.device(device):
            table.assign_sub(tf.convert_to_tensor(forward.grads[0]) * 0.1)
    return forward, backward
