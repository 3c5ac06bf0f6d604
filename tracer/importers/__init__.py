"""Importing profiler files recorded by other people on real GPUs.

This project's machines have no GPU, but profiler files recorded elsewhere (the
formats each framework declares in frameworks.yaml ``profiles``) hold the GPU path: the
op the dispatcher chose (``aten::cudnn_convolution``, ``aten::miopen_convolution``)
and the kernels it launched. :func:`import_file` slices out each primitive dltrace
knows and returns one :class:`tracer.trace.Trace` per primitive, whose op layer has
the shape of the CPU probe's, so that ``dltrace diff`` aligns the two.

One reader per file format (:data:`READERS`), each handed what the framework's entry
says of its files in that format: which ops are which primitive (``profile_ops``) and
what the files call things (``profile_vocab``), so that no reader names a framework.
One module per job: :mod:`.source` reads bytes safely, :mod:`.kineto` turns a
Kineto document into checked events, :mod:`.hierarchy` nests them,
:mod:`.primitives` says which ops are which primitive, :mod:`.slicing` builds the
call trees, :mod:`.kernels` tags kernels with their library, :mod:`.meta` writes
what the trace says about itself, :mod:`.provenance` where the file came from;
:mod:`.kineto_trace` puts them together for Kineto files. A format only a framework
can read (XPlane, op-stats protobufs) is read by the module its entry names
(``profile_vocab.FORMAT.reader``, in tracer/probes/), run by :mod:`.env_reader` in
that framework's environment as a subprocess: dltrace's process imports no framework.
"""

from __future__ import annotations

from tracer.importers.checks import unreadable_tree
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracer.errors import DltraceError, UsageError
from tracer.registry_entries import Framework, OpRule, ProfileVocab
from tracer.trace import Trace

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


def _is_sqlite(path: Path) -> bool:
    """nvprof's and Nsight's databases are SQLite files (their 16-byte header)."""
    from tracer.bounded import head

    return head(path, 16) == b"SQLite format 3\x00"


def _is_binary(path: Path) -> bool:
    """A protobuf (an op-stats file), not JSON or gzip."""
    from tracer.bounded import head

    start = head(path, 64).lstrip()
    return bool(start) and start[:1] not in (b"{", b"[") and start[:2] != b"\x1f\x8b"


def _any(path: Path) -> bool:
    return True


@dataclass(frozen=True)
class Reader:
    """One profiler format's reader (``module.function(path, framework, rules, vocab, command)``,
    ``rules`` and ``vocab`` the framework's ``profile_ops`` and ``profile_vocab`` for the format)
    and whether a file may be of that format, from its first bytes: a framework's
    formats (frameworks.yaml ``profiles``) are tried in order, the last one taking
    whatever is left so that its reader says what is wrong with the file."""

    module: str
    function: str
    may_be: Callable[[Path], bool] = _any


#: contract.PROFILE_FORMATS -> its reader
READERS: dict[str, Reader] = {
    "kineto": Reader("tracer.importers.kineto_trace", "import_kineto"),
    "xplane": Reader("tracer.importers.xplane", "import_xplane"),
    "nvprof": Reader("tracer.importers.nvprof", "import_nvprof", _is_sqlite),
    "op-stats": Reader("tracer.importers.op_stats", "import_op_stats", _is_binary),
    "op-timeline": Reader("tracer.importers.op_timeline", "import_op_timeline"),
}


def importable(framework: str) -> Framework:
    """``framework``'s registry entry, read once for a file's import: its ``profiles``
    (the formats its files are read as) and ``profile_ops``. UsageError naming the
    frameworks that have formats where it has none."""
    from tracer import registry

    known = registry.load()
    if framework not in known or not known[framework].profiles:
        readers = ", ".join(name for name, fw in known.items() if fw.profiles)
        raise UsageError(f"{framework} has no profiler format to import (frameworks.yaml 'profiles'); "
                         f"frameworks that have: {readers}")
    return known[framework]


def import_file(path: str | Path, framework: str, command: str = "") -> list[Imported]:
    """The traces of every primitive in a profiler file recorded with ``framework``,
    read as the first of its ``profiles`` formats the file may be. One-line
    ImportFailed when the file cannot be read or holds no primitive; UsageError
    when the framework reads no profiler files."""
    fw = importable(framework)
    path = Path(path)
    name = next((f for f in fw.profiles[:-1] if READERS[f].may_be(path)), fw.profiles[-1])
    reader = READERS[name]
    read: Callable[[Path, str, tuple[OpRule, ...], ProfileVocab, str], list[Imported]] = \
        getattr(importlib.import_module(reader.module), reader.function)
    results = read(path, framework, fw.profile_ops.get(name, ()), fw.profile_vocab.get(name, ProfileVocab()), command)

    for r in results:  # never a trace that every later command would refuse
        wrong = unreadable_tree(r.trace)
        if wrong:
            raise ImportFailed(f"{path}: its {r.primitive} would be a trace no command reads ({wrong}); not imported")
    return results


def file_suffixes(fw: Framework) -> tuple[str, ...]:
    """The name endings ``fw`` gives its profile files (``profile_vocab``), which
    :func:`tracer.importers.source.short_name` drops."""
    return tuple(s for vocab in fw.profile_vocab.values() for s in vocab.suffixes)


def frameworks_reading(fmt: str) -> list[str]:
    """The frameworks whose files are read as ``fmt``, for a message that says which
    ``--framework`` a file of that format needs."""
    from tracer import registry

    return [name for name, fw in registry.load().items() if fmt in fw.profiles]
