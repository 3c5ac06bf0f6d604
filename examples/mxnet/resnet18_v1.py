"""Gluon's model-zoo ResNet-18 v1 (mxnet.gluon.model_zoo.vision, built from code: random
weights, 10 classes), one training step under autograd: softmax cross-entropy, SGD
with momentum through a gluon Trainer. A workload for dltrace (docs/workloads.md):
``dltrace probe mxnet --workload examples/mxnet/resnet18_v1.py``.

Synthetic data, made here: nothing is downloaded."""

import mxnet as mx
from mxnet import autograd, gluon, nd
from mxnet.gluon.model_zoo import vision


def workload(ctx):
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images = nd.random.normal(shape=(2, 3, 64, 64), ctx=ctx)
    labels = nd.array([3, 7], ctx=ctx)

    def forward():
        with autograd.record():
            loss = loss_fn(net(images), labels)
        return loss

    def backward(loss):
        loss.backward()
        trainer.step(batch_size=images.shape[0])

    return forward, backward
