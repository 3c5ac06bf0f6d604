"""The library layer: what the vendor libraries say they ran in one step.

oneDNN, MKL and NVPL BLAS print one line per execution when asked (tracer.collect.vendor_log's
VERBOSE_ENV, set for the whole probe process). They print from C, to file
descriptor 1, with C stdio buffering: :class:`StdoutLog` points fd 1 at a file for
the probe process's life, and a step's lines are the bytes written between two
marks, with C's buffers flushed (``fflush(NULL)``) at each mark. What the libraries
say of themselves (version, the ISA oneDNN dispatches to) is collected on the way.
OpenBLAS prints nothing per call; it names the kernel family ("core") it chose for
this CPU when asked (``openblas_get_corename``), which :func:`openblas` records.

Stdlib only: runs inside the framework's environment.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any, Callable

from tracer.collect.vendor_log import VendorLog, parse
from tracer.contract import flush_c_stdio
from tracer.trace import Frame, Node

_OPENBLAS = re.compile(r"/lib(?:scipy_)?openblas[^/]*\.so[^/]*$")


#: The most of one step's fd 1 the library layer reads.
MAX_STEP_LOG = 64 << 20


class StdoutLog:
    """This process's fd 1 redirected to ``path``; :meth:`between` returns what the C
    libraries wrote while a callable ran. ``mute`` sends fd 1 to /dev/null (a long
    sampled loop would write megabytes of lines nobody reads)."""

    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._null = os.open(os.devnull, os.O_WRONLY)
        self._flush()
        os.dup2(self._fd, 1)
        self.log = VendorLog()
        self._read = 0  # bytes already parsed for library facts
        #: The probe's switch of its libraries' logs (``library_verbose(on)``), where it has
        #: one: the logs then run only in :meth:`between`'s step, not in every timed step
        #: (oneDNN's lines cost ResNet-18's step 1.1x to 1.3x, untraced or not).
        self.switch: Callable[[bool], Any] | None = None

    @staticmethod
    def _flush() -> None:
        flush_c_stdio()

    def _mark(self) -> int:
        self._flush()
        return os.lseek(self._fd, 0, os.SEEK_END)

    def _text(self, start: int, end: int) -> str:
        """What fd 1 received between two marks, at most MAX_STEP_LOG of it (a step's
        vendor lines are a few MB; a workload that prints without end is not read whole)."""
        with open(self.path, "rb") as fh:
            fh.seek(start)
            return fh.read(min(end - start, MAX_STEP_LOG)).decode("utf-8", "replace")

    def between(self, run: Callable[[], Any]) -> VendorLog:
        """The calls the libraries reported while ``run()`` ran (facts seen since the
        last mark are added to :attr:`log`'s info)."""
        start = self._mark()
        if start > self._read:  # the lines since the last step: library facts only
            parse(self._text(self._read, start), VendorLog(info=self.log.info))
        if self.switch is not None:
            self.switch(True)
        try:
            run()
        finally:
            if self.switch is not None:
                self.switch(False)
        end = self._mark()
        self._read = end
        return parse(self._text(start, end), VendorLog(info=self.log.info))

    def per_op(self, run: Callable[[], Any],
               hooks: Callable[[Callable[[str], None]], Any]) -> tuple[VendorLog, dict[str, dict[str, Any]]]:
        """:meth:`between`, with the calls told apart by op: ``hooks(after)`` (a probe's
        op_hooks) calls ``after(op)`` as each op returns, and the lines written since the
        last op are that op's. Returns the step's log and op -> {"count": times it ran,
        "calls": {"LIBRARY: call": times}}; an op that reported nothing has no calls (the framework's
        own kernel)."""
        ops: dict[str, dict[str, Any]] = {}
        mark = [self._mark()]  # where :meth:`between` starts the step: nothing is written in between

        def after(op: str) -> None:
            end = self._mark()
            calls = parse(self._text(mark[0], end), VendorLog(info=self.log.info)).calls
            mark[0] = end
            rec = ops.setdefault(op, {"count": 0, "calls": {}})
            rec["count"] += 1
            for call in calls:
                key = f"{call.library}: {call.name}"
                rec["calls"][key] = rec["calls"].get(key, 0) + 1

        def hooked() -> None:
            with hooks(after):
                run()

        return self.between(hooked), ops

    def mute(self) -> None:
        self._flush()
        os.dup2(self._null, 1)


def tree(log: VendorLog, label: str) -> Node:
    """The calls of one step under a root like the other layers': one node per call, in
    the order they ran, each a "library" frame of its library (``module`` and ``lib``)
    with the problem it solved as evidence (``file``, not part of its identity)."""
    children = [Node(Frame("library", c.library, c.name, c.detail, 0, c.library), 1, c.time_ns) for c in log.calls]
    return Node(Frame("root", "", label), 1, sum(c.time_ns for c in children), children=children)


def openblas() -> dict[str, str]:
    """The core OpenBLAS chose for this CPU and its build, if a loaded library is
    OpenBLAS (numpy's, MXNet's): it prints nothing per call, so this is what it says."""
    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({line.split()[-1] for line in fh if _OPENBLAS.search(line.strip())})
    except OSError:
        return {}
    for path in paths:
        try:
            # under proot the maps name host paths the guest cannot open; the loader
            # finds a library already loaded by its file name (its soname) alone
            lib = ctypes.CDLL(path if os.path.exists(path) else os.path.basename(path))
        except OSError:
            continue
        out = {"library": os.path.basename(path)}
        for key, names in (("core", ("openblas_get_corename", "openblas_get_corename64_",
                                     "scipy_openblas_get_corename", "scipy_openblas_get_corename64_")),
                           ("config", ("openblas_get_config", "openblas_get_config64_",
                                       "scipy_openblas_get_config", "scipy_openblas_get_config64_"))):
            for name in names:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = ctypes.c_char_p
                    value = fn()
                    if value:
                        out[key] = value.decode("utf-8", "replace").strip()
                    break
        if "core" in out:
            return out
    return {}
