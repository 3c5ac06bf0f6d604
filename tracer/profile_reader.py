"""The contract every profile reader keeps (one per format of ``contract.PROFILE_FORMATS``,
registered in ``tracer.importers.READERS``): what it is handed and what it returns.

The readers are named by module and function in ``READERS``, so that reading one format
never imports the others' modules; without a declared type, a reader whose signature
drifted would only fail when a file of its format is imported. The Protocol makes the
contract checkable twice: by mypy, through the typed table below (read by mypy only),
and at run time by :func:`mismatches` (``tests/test_profile_readers.py``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tracer.registry_entries import OpRule, ProfileVocab

if TYPE_CHECKING:
    from tracer.importers import Imported


class ProfileReader(Protocol):
    """Reads the file at ``path``, recorded with ``framework``, as one format: ``rules`` are
    the framework's ``profile_ops`` for the format (which recorded ops are which primitive),
    ``vocab`` its ``profile_vocab`` (what its files call things), ``command`` what the trace
    records as its command. Returns one :class:`tracer.importers.Imported` per primitive
    found; a file it cannot read is an ``ImportFailed`` naming the file."""

    def __call__(self, path: Path, framework: str, rules: tuple[OpRule, ...], vocab: ProfileVocab = ...,
                 command: str = ...) -> list[Imported]: ...


def mismatches(reader: Callable[..., Any]) -> list[str]:
    """How ``reader``'s signature differs from :class:`ProfileReader` (names, order, kinds,
    which have defaults): empty when it keeps the contract."""
    want = list(inspect.signature(ProfileReader.__call__).parameters.values())[1:]  # without self
    got = list(inspect.signature(reader).parameters.values())
    problems = []
    if [p.name for p in got] != [p.name for p in want]:
        problems.append(f"parameters {[p.name for p in got]}, the contract has {[p.name for p in want]}")
    for w, g in zip(want, got):
        if g.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, w.kind):
            problems.append(f"{g.name} is {g.kind.description}")
        if w.default is not inspect.Parameter.empty and g.default is inspect.Parameter.empty:
            problems.append(f"{g.name} has no default")
    return problems


if TYPE_CHECKING:  # mypy checks each reader against the Protocol; nothing runs this
    from tracer.importers.kineto_trace import import_kineto
    from tracer.importers.nvprof import import_nvprof
    from tracer.importers.op_stats import import_op_stats
    from tracer.importers.op_timeline import import_op_timeline
    from tracer.importers.xplane import import_xplane

    TYPED: dict[str, ProfileReader] = {
        "kineto": import_kineto,
        "xplane": import_xplane,
        "nvprof": import_nvprof,
        "op-stats": import_op_stats,
        "op-timeline": import_op_timeline,
    }
