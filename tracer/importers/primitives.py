"""Which recorded ops are an instance of which dltrace primitive.

A whole-model trace (AlexNet, ResNet, ViT) calls each primitive many times, among
ops that are none of them. An instance is found by the op the framework's API
enters first (``F.conv2d`` enters ``aten::conv2d``; ``nn.Linear`` enters
``aten::linear``), the outermost op of the primitive's names on a host thread, so
that its subtree is what the CPU probe records for the same call. Each rule says
why it is shaped as it is:

* ``inside_other``: ops that make the same inner op another primitive: conv1d,
  conv3d and transposed convolutions all reach ``aten::convolution``;
  ``aten::instance_norm`` calls ``aten::batch_norm``;
* ``top_only``: names that are the primitive only when called directly, with no op
  around them (``aten::addmm`` is also how other ops multiply matrices);
* ``ranks``: input ranks the primitive has, checked when the file records input
  shapes (``aten::batch_norm`` also serves BatchNorm1d and BatchNorm3d);
* ``backward``: the autograd nodes of the primitive, used only when a file has no
  ``fwdbwd`` flows to link a forward op to its node (torch before 1.11 wrote none).

Ops the autograd engine runs (inside ``autograd::engine::evaluate_function: ...``)
are backward, never forward instances, even when they are forward ops: activation
checkpointing recomputes the forward inside the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

EVALUATE = "autograd::engine::evaluate_function: "


@dataclass(frozen=True)
class Rule:
    primitive: str
    forward: frozenset[str]
    backward: frozenset[str]
    top_only: frozenset[str] = frozenset()
    inside_other: frozenset[str] = frozenset()
    ranks: frozenset[int] = frozenset()


def _r(primitive: str, forward: set[str], backward: set[str], **kw) -> Rule:
    return Rule(primitive, frozenset(forward), frozenset(backward), **{k: frozenset(v) for k, v in kw.items()})


#: One rule per primitive of tracer.contract.PRIMITIVES, in its order.
RULES: tuple[Rule, ...] = (
    _r("dense", {"aten::linear"}, {"AddmmBackward0", "AddmmBackward", "LinearBackward0"},
       top_only={"aten::addmm", "aten::matmul"}),
    _r("conv2d", {"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution",
                  "aten::miopen_convolution"},
       {"ConvolutionBackward0", "CudnnConvolutionBackward0", "CudnnConvolutionBackward", "MiopenConvolutionBackward0",
        "MiopenConvolutionBackward", "ThnnConv2DBackward0", "ThnnConv2DBackward", "MkldnnConvolutionBackward0",
        "MkldnnConvolutionBackward"},
       inside_other={"aten::conv1d", "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
                     "aten::conv_transpose3d", "aten::conv_tbc"},
       ranks={3, 4}),
    _r("relu", {"aten::relu", "aten::relu_"}, {"ReluBackward0", "ReluBackward1", "ReluBackward"}),
    _r("sigmoid", {"aten::sigmoid", "aten::sigmoid_"}, {"SigmoidBackward0", "SigmoidBackward"}),
    _r("tanh", {"aten::tanh", "aten::tanh_"}, {"TanhBackward0", "TanhBackward"}),
    _r("softmax", {"aten::softmax", "aten::_softmax"}, {"SoftmaxBackward0", "SoftmaxBackward"}),
    _r("maxpool2d", {"aten::max_pool2d", "aten::max_pool2d_with_indices"},
       {"MaxPool2DWithIndicesBackward0", "MaxPool2DWithIndicesBackward"}, ranks={3, 4}),
    _r("avgpool2d", {"aten::avg_pool2d"}, {"AvgPool2DBackward0", "AvgPool2DBackward"}, ranks={3, 4}),
    _r("batchnorm", {"aten::batch_norm"},
       {"CudnnBatchNormBackward0", "CudnnBatchNormBackward", "NativeBatchNormBackward0", "NativeBatchNormBackward",
        "MiopenBatchNormBackward0", "MiopenBatchNormBackward"},
       inside_other={"aten::instance_norm", "aten::group_norm"}, ranks={4}),
)

#: JAX primitives (the last part of an XPlane kernel's JAX op name) that are a dltrace
#: primitive whatever their arguments. conv_general_dilated is conv2d only with two
#: spatial dimensions, which an XPlane does not record (see tracer.importers.xplane).
JAX_OPS = {"conv_general_dilated": "conv2d", "dot_general": "dense", "tanh": "tanh", "logistic": "sigmoid"}


def input_rank(args: dict) -> int | None:
    """The rank of an op's first input when the file recorded shapes (record_shapes)."""
    dims = args.get("Input Dims")
    if dims.__class__ is list and dims and dims[0].__class__ is list \
            and all(d.__class__ is int for d in dims[0]):
        return len(dims[0])
    return None
