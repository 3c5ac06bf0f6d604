"""Chainer's ResNet-50 (chainer.links.ResNet50Layers, with no pretrained weights:
``pretrained_model=None``), one training step: its fc6 scores through softmax
cross-entropy, MomentumSGD. A workload for dltrace (docs/workloads.md):
``dltrace probe chainer --workload examples/chainer/resnet50.py``.

Synthetic data, made here: nothing is downloaded."""

import chainer
import chainer.functions as F
import numpy as np


def workload(device):
    model = chainer.links.ResNet50Layers(pretrained_model=None)
    model.to_device(device)
    optimizer = chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9)
    optimizer.setup(model)
    rng = np.random.RandomState(0)
    images = device.send(rng.standard_normal((2, 3, 64, 64)).astype(np.float32))
    labels = device.send(np.array([3, 7], dtype=np.int32))

    def forward():
        scores = model.forward(images, layers=["fc6"])["fc6"]
        return F.softmax_cross_entropy(scores, labels)

    def backward(loss):
        model.cleargrads()
        loss.backward()
        optimizer.update()

    return forward, backward
