"""What every probe shares: the case interface, seeded inputs, primitive sizes, and
the op-level record a probe's ``record_ops`` hook returns.

Imported inside framework environments: numpy, the standard library and
tracer.trace and tracer.contract (stdlib only) only.

The op-level hook (optional, one per probe module: tracer.contract.OpRecorder)::

    def record_ops(case: Case, pass_: str, run: Callable[[], object]) -> OpRecord

runs ``run()`` (exactly the step the Python layer traces: ``case.forward()``, or
``case.backward(state)`` on a fresh state) once under the framework's own
instrumentation and returns the ops it saw, nested (:func:`nest`). The harness
hangs them under the run's root in ``Run.layers["op"]``. The hook lives in the
probe because only the probe knows its framework's profiler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tracer import contract

# the primitives' parameters, defined once in the contract (mx.nd.BatchNorm's own epsilon
# default is 1e-3: every probe passes BN_EPS, so all frameworks compute the same numbers)
from tracer.contract import (ADAM, BN_EPS, BN_MOMENTUM, CIFAR, CLASSES, CONV_K, CONV_OUT, DENSE_OUT, EMBED_DIM,
                             EMBED_VOCAB, LENET, LN_EPS, MODELS, POOL_K, TRANSFORMER, output_shape)
from tracer.trace import Frame, Node

#: The probes' API: what a probe reads as ``base.X``. The contract's constants and
#: output_shape are listed so that they are exported explicitly (mypy --strict does not
#: re-export an imported name otherwise).
__all__ = [
    "BN_EPS", "BN_MOMENTUM", "CONV_K", "CONV_OUT", "DENSE_OUT", "POOL_K", "output_shape",
    "ADAM", "EMBED_DIM", "EMBED_VOCAB", "LN_EPS", "ln_scale", "attention_kv", "token_ids", "class_labels",
    "embed_table", "adam_grad",
    "CIFAR", "CLASSES", "LENET", "MODELS", "TRANSFORMER", "model_data", "model_info", "model_weight", "check_model",
    "Case", "ProbeError", "array", "conv_weight", "dense_weight", "bias", "nhwc", "check_shape", "dtype",
    "OpEvent", "OpRecord", "op_node", "merge_siblings", "nest", "within",
]

if TYPE_CHECKING:  # the annotations only: the tool's own environment has no numpy
    import numpy as np


def _noop() -> None:
    return None


@dataclass
class Case:
    """One primitive at one API level, ready to run.

    ``forward()`` runs the primitive as in training (recording for autograd) and
    returns whatever ``backward`` needs; ``backward(state)`` computes the gradients
    of the output (seeded with ones) with respect to the input and parameters.
    ``sync()`` waits for asynchronous devices, so timings mean something.
    """

    forward: Callable[[], Any]
    backward: Callable[[Any], Any]
    sync: Callable[[], None] = _noop
    info: dict[str, Any] = field(default_factory=dict)
    #: Objects the probe's own hooks need (the jitted function, its arguments...);
    #: never written to the trace.
    private: dict[str, Any] = field(default_factory=dict)


def within(case: Case, context: Callable[[], Any], sync: Callable[[Any], Any] | None = None) -> Case:
    """``case`` with each pass run inside ``context()`` (a framework's default-device
    scope: what a user's workload was built under must also be where its steps run),
    and ``sync(result)`` applied to each pass's result (an asynchronous framework's
    wait), so that a pass's time is its work's."""
    forward, backward = case.forward, case.backward

    def fwd() -> Any:
        with context():
            y = forward()
        return sync(y) if sync is not None else y

    def bwd(state: Any) -> Any:
        with context():
            r = backward(state)
        return sync(r) if sync is not None else r

    case.forward, case.backward = fwd, bwd
    return case


class ProbeError(Exception):
    """The probe cannot run this case (e.g. an API level the framework lacks)."""


def dtype() -> str:
    """The element type a probe computes in: float32, or the reduced precision a
    variant asks for (``DLTRACE_DTYPE``: bfloat16, float16), so that the report shows
    which kernels a reduced-precision path reaches. The data are the same float32 values,
    rounded by the framework's own cast."""
    import os

    name = os.environ.get(contract.DTYPE_ENV, "float32")
    if name not in contract.DTYPES:
        raise ProbeError(f"{contract.DTYPE_ENV}={name!r} is not one of {', '.join(contract.DTYPES)}")
    return name


def array(shape: tuple[int, ...], seed: int = 0) -> "np.ndarray":
    """Deterministic float32 data in [-1, 1)."""
    import numpy as np  # every framework environment has numpy; the tool's own does not need it

    return np.random.RandomState(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)


def conv_weight(channels: int) -> "np.ndarray":
    return array((CONV_OUT, channels, CONV_K, CONV_K), seed=1) * 0.5


def dense_weight(features: int) -> "np.ndarray":
    """(out, in), as torch, chainer and mxnet store it."""
    return array((DENSE_OUT, features), seed=1) * 0.5


def bias(n: int) -> "np.ndarray":
    return array((n,), seed=2) * 0.1


def ln_scale(features: int) -> "np.ndarray":
    """Layer norm's scale (its shift is :func:`bias`)."""
    return array((features,), seed=3) * 0.1 + 1


def attention_kv(shape: tuple[int, ...]) -> tuple["np.ndarray", "np.ndarray"]:
    """Attention's keys and values (parameters with gradients; the input is the queries)."""
    return array(shape, seed=1) * 0.5, array(shape, seed=2) * 0.5


def token_ids(shape: tuple[int, ...]) -> "np.ndarray":
    """The embedding's input: int64 ids in [0, EMBED_VOCAB)."""
    import numpy as np

    return np.random.RandomState(4).randint(0, EMBED_VOCAB, size=shape).astype(np.int64)


def class_labels(n: int, classes: int) -> "np.ndarray":
    """Cross-entropy's targets: n int64 labels in [0, classes)."""
    import numpy as np

    return np.random.RandomState(5).randint(0, classes, size=(n,)).astype(np.int64)


def embed_table() -> "np.ndarray":
    return array((EMBED_VOCAB, EMBED_DIM), seed=1)


def adam_grad(shape: tuple[int, ...]) -> "np.ndarray":
    """The fixed gradient each Adam update applies (the input is the parameter)."""
    return array(shape, seed=6) * 0.1


def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    n, c, h, w = shape
    return (n, h, w, c)


def check_shape(primitive: str, shape: tuple[int, ...]) -> None:
    why = contract.check_shape(primitive, shape)
    if why:
        raise ProbeError(why)


# ----------------------------------------------------------------------------- models


def check_model(model: str, api: str, shape: tuple[int, ...]) -> None:
    """A model case's request, checked before the framework builds anything."""
    m = MODELS.get(model)
    if m is None:
        raise ProbeError(f"unknown model {model}")
    if api not in m.apis:
        raise ProbeError(f"{model} is written at the {' and '.join(m.apis)} level only, not {api}")
    why = contract.check_shape(model, shape)
    if why:
        raise ProbeError(why)


def model_data(model: str, shape: tuple[int, ...]) -> tuple["np.ndarray", "np.ndarray"]:
    """A synthetic batch, made here (nothing is downloaded), the same in every framework:
    (images in [-1, 1) as float32 NCHW, int64 class labels), or for the transformer
    (int64 token ids, int64 next-token targets: the ids shifted by one)."""
    import numpy as np

    if model == "transformer":
        tokens = np.random.RandomState(4).randint(0, TRANSFORMER["vocab"], size=shape).astype(np.int64)
        return tokens, np.roll(tokens, -1, axis=1)
    labels = np.random.RandomState(5).randint(0, CLASSES, size=(shape[0],)).astype(np.int64)
    return array(shape), labels


def model_weight(shape: tuple[int, ...], seed: int) -> "np.ndarray":
    """A parameter for a model written at the functional level, where the probe makes
    its parameters itself: uniform in +-1/sqrt(fan_in), seeded (the layer level keeps
    each framework's own initialisation, which its page records)."""
    fan_in = 1
    for d in shape[1:]:
        fan_in *= d
    return array(shape, seed) / float(max(fan_in, 1)) ** 0.5


def model_info(model: str, api: str, defaults: dict[str, Any],
               built_from_primitives: dict[str, str] | None = None) -> dict[str, Any]:
    """What a model case's trace says of itself (its meta ``model``): the network, the
    passes' meaning, the framework's defaults as it applied them, and any layer the
    framework has no API for, built here from its primitives (the page says so)."""
    m = MODELS[model]
    return {"model": {"name": model, "title": m.title, "api": api, "layers": list(m.layers), "loss": m.loss,
                      "optimizer": m.optimizer,
                      "passes": {"forward": "the network and its loss",
                                 "backward": "the gradients and the optimizer's update"},
                      "defaults": defaults, "built_from_primitives": built_from_primitives or {}}}


# ----------------------------------------------------------------------------- op level


@dataclass
class OpEvent:
    """One record of a framework's profiler: an op (or kernel) and when it ran.
    ``start``/``end`` are in the profiler's unit, ``scale_ns`` in :func:`nest`
    converts; ``children`` are fixed sub-records (e.g. the GPU kernels an op launched)."""

    name: str
    start: float
    end: float
    module: str = ""
    lib: str = ""
    thread: Any = 0
    children: list[Node] = field(default_factory=list)


@dataclass
class OpRecord:
    """What ``record_ops`` returns: the top-level op nodes, which instrumentation
    saw them (``source``, e.g. "torch.profiler"), and facts worth keeping (``info``)."""

    ops: list[Node]
    source: str
    info: dict[str, Any] = field(default_factory=dict)


def op_node(name: str, module: str, lib: str = "", count: int = 1, time_ns: int = 0,
            children: Iterable[Node] = ()) -> Node:
    return Node(Frame("op", module, name, lib=lib), count, time_ns, children=list(children))


def merge_siblings(nodes: list[Node]) -> list[Node]:
    """Siblings that are the same op merge (counts and times add, children merge):
    a step that calls aten::empty three times shows it once, ×3."""
    out: dict[Frame, Node] = {}
    for n in nodes:
        have = out.get(n.frame)
        if have is None:
            out[n.frame] = Node(n.frame, n.count, n.time_ns, children=list(n.children))
        else:
            have.count += n.count
            have.time_ns += n.time_ns
            have.children.extend(n.children)
    merged = list(out.values())
    for n in merged:
        n.children = merge_siblings(n.children)
    return merged


def nest(events: Iterable[OpEvent], scale_ns: float = 1.0) -> list[Node]:
    """A profiler's flat records -> the op hierarchy: an event inside another's time
    interval (same thread) is its child (aten::conv2d > aten::convolution >
    aten::_convolution > aten::mkldnn_convolution)."""
    roots: list[Node] = []
    by_thread: dict[Any, list[tuple[float, Node]]] = {}
    for ev in sorted(events, key=lambda e: (e.start, -e.end)):
        node = op_node(ev.name, ev.module, ev.lib, 1, int(round((ev.end - ev.start) * scale_ns)), ev.children)
        stack = by_thread.setdefault(ev.thread, [])
        while stack and ev.start >= stack[-1][0]:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((ev.end, node))
    return merge_siblings(roots)
