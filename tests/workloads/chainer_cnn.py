"""A Chainer workload written from docs/workloads.md alone: a small CNN (a convolution,
ReLU, max pooling, a linear layer), softmax cross-entropy, MomentumSGD. Used by
tests/test_arm_workload.py for the per-op ARM table of a framework whose kernels are NumPy's."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(3, 8, ksize=3, pad=1)
            self.fc = L.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(F.max_pooling_2d(F.relu(self.conv(x)), 2))


def workload(device):
    model = Net()
    model.to_device(device)
    optimizer = chainer.optimizers.MomentumSGD(lr=0.01)
    optimizer.setup(model)
    rng = np.random.RandomState(0)
    images = device.send(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
    labels = device.send(np.array([1, 2, 3, 4], dtype=np.int32))

    def forward():
        return F.softmax_cross_entropy(model(images), labels)

    def backward(loss):
        model.cleargrads()
        loss.backward()
        optimizer.update()

    return forward, backward
