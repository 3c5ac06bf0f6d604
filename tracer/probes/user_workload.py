"""A porting team's own workload, loaded and made a case inside the framework's
environment (tracer.contract.UserWorkload; docs/workloads.md).

The file is the user's code, run with the user's rights, as a test file is: it is
imported by path under a module name of its own, its function is called once with the
framework's device object (the probe module knows it: tracer.contract.WorkloadProbe),
and what it returns must be the step's two passes, ``(forward, backward)`` or
``(forward, backward, parameters)``, or one callable for the whole step. Anything that
goes wrong in the user's code is one line naming the user's file and line
(:class:`WorkloadFailed`); its traceback keeps the user's frames only, never dltrace's.

Imported inside framework environments: the standard library and tracer.contract only
(tracer.probes.cases makes the case).
"""

from __future__ import annotations

import importlib.util
import itertools
import io
import os
import sys
import traceback
from types import ModuleType, TracebackType
from typing import Any, Callable

from tracer.contract import USER_API, UserWorkload

#: The folder of the tracer package: frames under it are dltrace's, never shown as the user's.
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: What the one-line error keeps of a message the user's code raised.
_MESSAGE_CHARS = 300
#: The most parameters a workload's third value is read to (torchvision's ResNet-50 has 161 tensors).
MAX_PARAMETERS = 100_000


class WorkloadFailed(Exception):
    """The user's workload could not be loaded or run: ``one_line`` names the user's file
    and line and what went wrong; ``user_traceback`` the user's own frames."""

    def __init__(self, one_line: str, user_traceback: str = "") -> None:
        super().__init__(one_line)
        self.one_line = one_line
        self.user_traceback = user_traceback


#: What a workload may write to each of its standard streams, from Python, before the
#: rest is dropped (counted): a print in a loop must not fill the disk the traces go to.
OUTPUT_BOUND = 1 << 20


class _Bounded(io.TextIOBase):
    """A text stream that passes the first OUTPUT_BOUND characters on and counts the rest."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.passed, self.dropped = inner, 0, 0

    def write(self, text: str) -> int:
        room = max(OUTPUT_BOUND - self.passed, 0)
        if room:
            self.inner.write(text[:room])
            self.passed += min(len(text), room)
        self.dropped += max(len(text) - room, 0)
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return int(self.inner.fileno())

    def isatty(self) -> bool:
        return False


def bound_output() -> None:
    """Bound what Python code writes to standard output and error from here on (the
    user's workload runs in this process)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Bounded):
            setattr(sys, name, _Bounded(stream))


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _user_frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(tb) if not os.path.abspath(f.filename).startswith(_OWN)]


def _where(w: UserWorkload, tb: TracebackType | None) -> str:
    """``FILE:LINE`` of the deepest frame in the user's file (else the file alone)."""
    mine = [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) == w.file]
    if mine:
        return f"{w.file}:{mine[-1].lineno}"
    return w.file


def failed(w: UserWorkload, what: str, exc: BaseException) -> WorkloadFailed:
    """The one-line failure of ``exc``, raised by the user's code while ``what``."""
    frames = _user_frames(exc.__traceback__)
    shown = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(exc), exc))
    return WorkloadFailed(f"{_where(w, exc.__traceback__)}: {what}: {_first_line(exc)}", shown)


def load(w: UserWorkload) -> Callable[..., Any]:
    """The workload's function, its file imported by path (as pytest imports a test
    file): a missing file or function, or a file that fails to import, is one line."""
    if not os.path.isfile(w.file):
        raise WorkloadFailed(f"{w.file}: no such workload file" if not os.path.exists(w.file)
                             else f"{w.file}: not a regular file")
    module_name = f"dltrace_workload_{w.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, w.file)
    if spec is None or spec.loader is None:
        raise WorkloadFailed(f"{w.file}: cannot be imported as a Python file")
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # the workload's own folder first, so that it imports its neighbours as a script would
    folder = os.path.dirname(w.file)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise WorkloadFailed(f"{exc.filename or w.file}:{exc.lineno}: the workload file does not parse: "
                             f"{exc.msg}") from None
    except BaseException as exc:  # noqa: BLE001 - SystemExit and all: the user's code, one line
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise failed(w, "importing the workload file", exc) from None
    fn = getattr(module, w.function, None)
    if fn is None:
        defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                         and getattr(v, "__module__", None) == module_name)
        raise WorkloadFailed(f"{w.file}: no function {w.function!r} "
                             f"(it defines: {', '.join(defined) or 'none'})")
    if not callable(fn):
        raise WorkloadFailed(f"{w.file}: {w.function!r} is a {type(fn).__name__}, not a function")
    return fn  # type: ignore[no-any-return]


def _guarded(w: UserWorkload, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose failures (an exception, sys.exit) are one line naming the user's line."""
    def run(*args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the user's code: SystemExit included
            if isinstance(exc, (KeyboardInterrupt, WorkloadFailed)):
                raise
            raise failed(w, what, exc) from None

    return run


def _where_defined(w: UserWorkload, fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else w.file


def steps(w: UserWorkload, fn: Callable[..., Any], device: Any) -> tuple[Callable[[], Any], Callable[[Any], Any] | None,
                                                                        list[Any] | None]:
    """Call the user's function with ``device``; its step as (forward, backward or None
    for a single step callable, parameters or None), each pass guarded."""
    made = _guarded(w, f"calling {w.function}(device)", fn)(device)
    where = _where_defined(w, fn)
    if callable(made) and not isinstance(made, (tuple, list)):
        return _guarded(w, "running the step", made), None, None
    if not isinstance(made, (tuple, list)) or len(made) not in (2, 3):
        got = f"a {type(made).__name__}" + (f" of {len(made)}" if isinstance(made, (tuple, list)) else "")
        raise WorkloadFailed(f"{where}: {w.function}(device) returned {got}; it must return (forward, backward), "
                             "(forward, backward, parameters) or one step callable")
    forward, backward = made[0], made[1]
    for label, f in (("forward", forward), ("backward", backward)):
        if not callable(f):
            raise WorkloadFailed(f"{where}: {w.function}(device) returned a {type(f).__name__} as {label}, "
                                 "not a callable")
    params: list[Any] | None = None
    if len(made) == 3:
        try:
            params = list(itertools.islice(made[2], MAX_PARAMETERS + 1))
        except TypeError:
            raise WorkloadFailed(f"{where}: the parameters {w.function}(device) returned are a "
                                 f"{type(made[2]).__name__}, not an iterable of tensors") from None
        if len(params) > MAX_PARAMETERS:  # an endless iterator would run to the memory bound
            raise WorkloadFailed(f"{where}: the parameters {w.function}(device) returned are more than "
                                 f"{MAX_PARAMETERS:,} (an endless iterator?): return a list of tensors")
    return _guarded(w, "running forward()", forward), _guarded(w, "running backward(loss)", backward), params


def info(w: UserWorkload, single_step: bool, framework_facts: dict[str, Any]) -> dict[str, Any]:
    """What a workload's trace says of itself (its meta ``model``, as a built-in model's
    does, with ``workload``: where it came from)."""
    passes = ({"forward": "the whole training step (one callable: not split)"} if single_step else
              {"forward": "the workload's forward(): the network and its loss",
               "backward": "the workload's backward(loss): the gradients and the optimizer's update"})
    return {"model": {"name": w.name, "title": w.name, "api": USER_API, "layers": [], "loss": "the workload's own",
                      "optimizer": "the workload's own", "passes": passes, "defaults": framework_facts,
                      "built_from_primitives": {},
                      "workload": {"file": os.path.basename(w.file), "function": w.function,
                                   "single_step": single_step}}}
