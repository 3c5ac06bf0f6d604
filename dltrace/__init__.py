"""dltrace as a library, under the tool's own name: ``import dltrace``.

The source is the ``tracer`` package (the project's layout names that folder, and
the probes import it, by that name, inside each framework's environment); this
package is the public face of it, each name loaded when first used so that
``import dltrace`` costs nothing::

    import dltrace
    index = dltrace.report(["reports/survey/traces"], "reports/again")
    model = dltrace.model(["reports/survey/traces"], dltrace.knowledge())
    result = dltrace.diff(dltrace.load("a.json"), dltrace.load("b.json"), k=dltrace.knowledge())
"""

from __future__ import annotations

import importlib
from typing import Any

from tracer import __version__

#: name -> (module, attribute): the library's calls, one place each
_PUBLIC = {
    "report": ("tracer.pipeline", "report"),
    "survey": ("tracer.pipeline", "survey"),
    "model": ("tracer.pipeline", "model"),
    "read": ("tracer.pipeline", "read"),
    "SurveyPlan": ("tracer.pipeline", "SurveyPlan"),
    "Progress": ("tracer.pipeline", "Progress"),
    "SurveyModel": ("tracer.analysis.survey_model", "SurveyModel"),
    "build": ("tracer.analysis.survey_model", "build"),
    "knowledge": ("tracer.knowledge", "knowledge"),
    "load": ("tracer.trace", "load"),
    "save": ("tracer.trace", "save"),
    "Trace": ("tracer.trace", "Trace"),
    "Gap": ("tracer.gap", "Gap"),
    "diff": ("tracer.processing.diff", "diff_traces"),
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'dltrace' has no attribute {name!r}")
    module, attr = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
