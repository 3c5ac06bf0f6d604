"""Importing profiler files recorded by other people on real GPUs.

This project's machines have no GPU, but torch.profiler (Kineto chrome-trace JSON)
and jax.profiler (XPlane protobuf) files recorded elsewhere hold the GPU path: the
op the dispatcher chose (``aten::cudnn_convolution``, ``aten::miopen_convolution``)
and the kernels it launched. :func:`import_file` slices out each primitive dltrace
knows and returns one :class:`tracer.trace.Trace` per primitive, whose op layer has
the shape of the CPU probe's, so that ``dltrace diff`` aligns the two.

One module per job: :mod:`.source` reads bytes safely, :mod:`.kineto` turns a
Kineto document into checked events, :mod:`.hierarchy` nests them,
:mod:`.primitives` says which ops are which primitive, :mod:`.slicing` builds the
call trees, :mod:`.kernels` tags kernels with their library, :mod:`.meta` writes
what the trace says about itself, :mod:`.provenance` where the file came from;
:mod:`.torch_trace` puts them together for Kineto files, and :mod:`.xplane` reads
JAX profiles through :mod:`.xplane_dump`. dltrace's process imports no framework:
xplane_dump is run as a subprocess in dltrace's JAX environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracer.errors import DltraceError
from tracer.trace import Trace

FRAMEWORKS = ("torch", "jax", "mxnet", "tensorflow")
#: How an imported trace is named in its folder: ``<primitive>-imported.json``.
SUFFIX = "-imported.json"


class ImportFailed(DltraceError):
    """A file that cannot be imported: not a profiler file of the kind asked for,
    corrupt, or without any primitive dltrace knows. The message names the file."""


@dataclass
class Imported:
    """One trace made from a file, with what ``dltrace import`` prints about it."""

    trace: Trace
    primitive: str
    passes: list[str]
    gpu: str
    kernels: int  # distinct kernel names
    launches: int  # kernel launches, all instances and passes


def imported_path(folder: Path, primitive: str) -> Path:
    return folder / f"{primitive}{SUFFIX}"


def _is_sqlite(path: str | Path) -> bool:
    """nvprof's and Nsight's databases are SQLite files (their 16-byte header)."""
    from tracer.bounded import head

    return head(path, 16) == b"SQLite format 3\x00"


def _is_binary(path: str | Path) -> bool:
    """A protobuf (TensorFlow's tensorflow_stats), not JSON or gzip."""
    from tracer.bounded import head

    start = head(path, 64).lstrip()
    return bool(start) and start[:1] not in (b"{", b"[") and start[:2] != b"\x1f\x8b"


def import_file(path: str | Path, framework: str, command: str = "") -> list[Imported]:
    """The traces of every primitive in a profiler file: ``framework`` "torch" reads
    Kineto JSON (plain or gzip), "jax" an XPlane protobuf, "mxnet" MXNet's profiler
    JSON or an nvprof database of an MXNet run, "tensorflow" a TensorFlow timeline
    (chrome-trace JSON). One-line ImportFailed
    when the file cannot be read or holds no primitive."""
    if framework == "torch":
        from tracer.importers.torch_trace import import_kineto

        return import_kineto(Path(path), command)
    if framework == "jax":
        from tracer.importers.xplane import import_xplane

        return import_xplane(Path(path), command)
    if framework == "mxnet" and _is_sqlite(path):
        from tracer.importers.nvprof import import_nvprof

        return import_nvprof(Path(path), framework, command)
    if framework == "tensorflow" and _is_binary(path):
        from tracer.importers.tf_stats import import_tf_stats

        return import_tf_stats(Path(path), command)
    if framework in ("mxnet", "tensorflow"):
        from tracer.importers.op_timeline import import_op_timeline

        return import_op_timeline(Path(path), framework, command)
    raise ImportFailed(f"unknown framework '{framework}' for import (choose from: {', '.join(FRAMEWORKS)})")
