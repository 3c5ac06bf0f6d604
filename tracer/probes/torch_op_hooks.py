"""A call back as each ATen op returns, for the library layer's per-op account
(tracer.contract.OpHooks): which oneDNN or BLAS call each op of a model made, on each
CPU, is what a port to a new ARM CPU reads.

A dispatch mode sits below autograd, so it sees the ops the CPU backend runs (the
forward's ``aten::convolution`` and the backward's ``aten::convolution_backward``),
each once: an op's own inner calls run with the mode off. Views are left out: they
compute nothing a library or kernel could be asked about. Runs in torch's environment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class _After(TorchDispatchMode):  # type: ignore[misc]  # torch is Any to mypy: an untyped base
    def __init__(self, after: Callable[[str], None]):
        super().__init__()
        self._after = after

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        # a view computes nothing (its output shares the input's storage); profiler ops are
        # dltrace's own step markers
        if func.namespace != "profiler" and not func.is_view:
            self._after(func.name())
        return out


@contextlib.contextmanager
def op_hooks(after: Callable[[str], None]) -> Iterator[None]:
    """``after(op)`` as each op returns (``aten::convolution``, its overload dropped: the
    unit the op layer names)."""
    with _After(lambda name: after(name.split(".")[0])):
        yield
