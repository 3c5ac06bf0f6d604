"""A probe that misbehaves on purpose, so the tests can check how dltrace reports
a crashing (segfault), hanging, or failing probe."""

import ctypes
import time

from probes import base


def gpu_available() -> bool:
    return False


def make_case(primitive, api, device, shape):
    if primitive == "conv2d":  # segfault
        ctypes.string_at(0)
    if primitive == "relu":  # hang
        time.sleep(3600)
    if primitive == "tanh":  # an ordinary exception in one case
        raise RuntimeError("tanh is broken in this framework")
    return base.Case(forward=lambda: sum(range(10)), backward=lambda state: None)
