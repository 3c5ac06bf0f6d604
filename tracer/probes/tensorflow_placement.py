"""Where TensorFlow's graphs put each op: the device, or the host.

A ``tf.function`` (a Keras ``train_step`` as ``model.fit`` runs it) is placed as a
whole when it is first run: an op the step does not pin to a device goes where a
kernel of it is, the new device when it has one and the host (the CPU) when not, and
nothing says so. That is the op a port would lose to the host unseen. The placement is
read from TensorFlow's own record of it: with run metadata on, each function it
instantiates leaves its partition graphs, each node with the device it was given, and
the function as written. TensorFlow rewrites a graph after placing it (grappler: a
``RealDiv`` by a constant becomes a ``Mul``, a CPU ``MatMul`` and its ``BiasAdd`` one
``_MklNativeFusedMatMul``), so each placed node is named as the op it was.
An eager op shows here too, the first time it runs (TensorFlow runs it as a one-op
function); with soft placement off an eager op with no kernel on the device fails
instead, naming it, so an eager op on the host is one the step pinned there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: A partition graph node's device that is the host's.
_HOST = re.compile(r"/device:CPU:\d+$")


def start() -> None:
    """Keep each function's placement from now on (once per process)."""
    from tensorflow.python.eager import context

    context.context().enable_run_metadata()


#: A graph's plumbing, which no device registers: its arguments, results and transfers.
PLUMBING = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "_Send", "_Recv", "_HostSend", "_HostRecv",
                      "NoOp"})
#: What TensorFlow's CPU rewrites prefix an op with (``_MklNativeFusedMatMul``: MatMul).
_REWRITES = ("Mkl", "Native", "Fused")


def public_op(op: str) -> str:
    """The op a host rewrite stands for (``_MklMatMul``, ``_FusedMatMul``: ``MatMul``):
    grappler fuses and renames the ops the placer put on the CPU, after placing them, and
    the port lost the op it was, not TensorFlow's CPU fusion of it. An op it cannot name
    is kept as it is."""
    from tensorflow.python.framework import op_def_registry

    name = op.lstrip("_")
    while name and op_def_registry.get(name) is None:
        prefix = next((p for p in _REWRITES if name.startswith(p)), None)
        if prefix is None:
            return op
        name = name[len(prefix):]
    return name or op


@dataclass
class Placed:
    """What the graphs instantiated since the last look placed: the ops on the host, as
    the graph had them (each once, in graph order); and the ops placed on the device that
    TensorFlow's rewrites then turned into others (``RealDiv`` into ``Mul`` by a
    reciprocal), each with its element types (TF_DataType numbers): the kernel the
    placement needed is the op as the graph had it, not the one that ran."""

    host: list[str] = field(default_factory=list)
    rewritten: dict[str, set[str]] = field(default_factory=dict)


def _as_written(node: Any, before: dict[str, Any]) -> list[str]:
    """The op(s) a placed node was before TensorFlow's rewrites: its own op in the
    function as written where the node keeps its name there, else the op a CPU rewrite
    stands for (:func:`public_op`) and the ops it fused (``fused_ops``)."""
    written = before.get(node.name)
    if written is not None and not written.op.startswith("_"):
        return [written.op]
    fused = [f.decode() for f in node.attr["fused_ops"].list.s] if "fused_ops" in node.attr else []
    return list(dict.fromkeys([public_op(node.op), *fused]))


def read() -> Placed:
    """The placements of the graphs instantiated since the last call (see :class:`Placed`).
    The graph's plumbing (``_Arg``, ``_Send``...) is left out, as is a constant on the
    host (a folded computation: nothing runs there each step but a copy)."""
    from tensorflow.python.eager import context

    ctx = context.context()
    out = Placed()
    if not ctx.executing_eagerly():
        return out
    metadata = ctx.export_run_metadata()  # and TensorFlow forgets it: the next call has the next graphs
    if metadata is None:
        return out
    host: dict[str, None] = {}
    for function in metadata.function_graphs:
        before = {n.name: n for n in function.pre_optimization_graph.node}
        for graph in function.partition_graphs:
            for node in graph.node:
                if node.op in PLUMBING or node.op == "Const":
                    continue
                if _HOST.search(node.device):
                    host.update(dict.fromkeys(_as_written(node, before)))
                    continue
                written = before.get(node.name)
                if written is not None and written.op != node.op and not written.op.startswith("_"):
                    types = out.rewritten.setdefault(written.op, set())
                    if "T" in written.attr and written.attr["T"].type:
                        types.add(str(written.attr["T"].type))
    out.host = list(host)
    return out
