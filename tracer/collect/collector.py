"""The one place that chooses the Python-level collector, as coverage.py chooses
its CTracer or PyTracer: the C core (tracer/collect/ctracer.py) where it can be
built and loaded in this interpreter, else the pure-Python PythonTracer. Both
record the same tree; the chosen tracer's ``collector`` (kept in the trace's meta)
says which ran and, for the fallback, why.

``DLTRACE_COLLECTOR`` in the probe's environment: ``c`` (the C core or an error),
``python`` (the pure-Python tracer), unset or ``auto`` (C where it can be had).
"""

from __future__ import annotations

import os
from typing import Iterable

from tracer.collect import cbuild
from tracer.collect.pytrace import PythonTracer
from tracer.contract import COLLECTORS

ENV = "DLTRACE_COLLECTOR"


class CollectorError(Exception):
    """The collector asked for (``DLTRACE_COLLECTOR=c``) cannot run here, or the
    variable names none."""


def python_tracer(roots: Iterable[str], root_name: str = "probe") -> PythonTracer:
    """The tracer a probe records its Python layer with; ``.collector`` says which
    (``{"python": "c"}`` or ``{"python": "python", "why": ...}``)."""
    wanted = os.environ.get(ENV, "").strip().lower() or "auto"
    if wanted not in (*COLLECTORS, "auto"):
        raise CollectorError(f"{ENV}={wanted!r}: choose one of {', '.join(COLLECTORS)} or auto")
    if wanted == "python":
        return _fallback(roots, root_name, f"{ENV}=python")
    try:
        module = cbuild.load()
    except cbuild.Unavailable as exc:
        if wanted == "c":
            raise CollectorError(f"{ENV}=c, but the C collector cannot run: {exc}") from None
        return _fallback(roots, root_name, str(exc))
    from tracer.collect.ctracer import CTracer

    return CTracer(module, roots, root_name)


def _fallback(roots: Iterable[str], root_name: str, why: str) -> PythonTracer:
    tracer = PythonTracer(roots, root_name)
    tracer.collector = {"python": "python", "why": why}
    return tracer
