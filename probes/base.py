"""What every probe shares: the case interface, seeded inputs and primitive sizes.

Imported inside framework environments: numpy and the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: Sizes of the primitives' parameters (the input shape comes from the command line).
CONV_OUT, CONV_K = 4, 3  # output channels, kernel size (stride 1, padding 1)
DENSE_OUT = 8
POOL_K = 2  # pooling window and stride
ACTIVATIONS = ("relu", "sigmoid", "tanh", "softmax")


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


class ProbeError(Exception):
    """The probe cannot run this case (e.g. an API level the framework lacks)."""


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


def output_shape(primitive: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape (logical NCHW), known without running the primitive, so that
    the backward seed can be made in make_case and the traced cold run really is
    the first call (no lazy initialisation or compilation happens before it)."""
    if primitive == "dense":
        return (shape[0], DENSE_OUT)
    if primitive == "conv2d":  # padding k//2, stride 1
        return (shape[0], CONV_OUT, shape[2], shape[3])
    if primitive in ("maxpool2d", "avgpool2d"):  # window = stride, no padding
        return (shape[0], shape[1], shape[2] // POOL_K, shape[3] // POOL_K)
    return tuple(shape)


def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    n, c, h, w = shape
    return (n, h, w, c)


def check_shape(primitive: str, shape: tuple[int, ...]) -> None:
    want = 2 if primitive == "dense" else 4 if primitive in ("conv2d", "maxpool2d", "avgpool2d", "batchnorm") else None
    if want is not None and len(shape) != want:
        layout = "NxF" if want == 2 else "NxCxHxW"
        raise ProbeError(f"{primitive} needs a {want}-d shape ({layout}), got {'x'.join(map(str, shape))}")
