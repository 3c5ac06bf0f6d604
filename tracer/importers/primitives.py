"""Which recorded ops are an instance of which dltrace primitive: the rules each
framework declares per profile format (frameworks.yaml ``profile_ops``), and how
the Kineto reader uses them.

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

from typing import Any

from tracer.registry_entries import OpRule
from tracer.trace import op_namespace

EVALUATE = "autograd::engine::evaluate_function: "


def namespaces(rules: tuple[OpRule, ...]) -> frozenset[str]:
    """The op namespaces the rules' forward names are in (``aten`` of ``aten::conv2d``)."""
    return frozenset(op_namespace(name) for rule in rules for name in rule.forward) - {""}


def input_rank(args: dict[str, Any]) -> int | None:
    """The rank of an op's first input when the file recorded shapes (record_shapes)."""
    dims = args.get("Input Dims")
    if dims.__class__ is list and dims and dims[0].__class__ is list \
            and all(d.__class__ is int for d in dims[0]):
        return len(dims[0])
    return None
