"""An nvprof database (format nvprof; MXNet's reference run) to traces: its kernels.

nvprof (CUDA's profiler before Nsight) writes a SQLite database: every kernel a
GPU ran (``CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`` or ``..._KERNEL``), its name in
``StringTable``, the GPU in ``CUPTI_ACTIVITY_KIND_DEVICE``. The standard library's
sqlite3 reads it, read-only. It holds no operator records, so a kernel is a
primitive's only where its own name says so (cuDNN's ``activation_fw_4d`` with
``relu_func`` is relu forward, ``wgrad``/``dgrad`` engines a convolution's
backward); cuBLAS gemms that any op may call are counted in the provenance, not
given to a primitive. What the framework's entry says of such files
(``profile_vocab.nvprof.note``: MXNet's run is not the one of its profiler JSON
files) is added to each trace's provenance note.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path

from tracer.contract import PASSES
from tracer.importers import Imported, ImportFailed
from tracer.importers import meta as m
from tracer.importers.kernels import kernel_lib, module_of
from tracer.importers.provenance import provenance
from tracer.importers.source import MAX_OBJECTS, clip, read_source, short_name
from tracer.registry_entries import OpRule, ProfileVocab
from tracer.trace import Frame, Node, Run, Trace

#: primitive -> pass -> what a kernel's (mangled) name holds when it is that primitive's.
KERNELS = {
    "conv2d": {"forward": re.compile(r"implicit_convolve_sgemm|cudnn_convolve_sgemm|winogradForward|im2col4d"),
               "backward": re.compile(r"dgrad|wgrad|winogradWgrad")},
    "relu": {"forward": re.compile(r"activation_fw_4d_kernel.*relu_func"),
             "backward": re.compile(r"activation_bw_4d_kernel.*relu_func")},
    "maxpool2d": {"forward": re.compile(r"pooling_fw_4d_kernel.*maxpooling_func"),
                  "backward": re.compile(r"pooling_bw_kernel_max")},
}
_TABLES = ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL")
#: The latest end a kernel may have, in nanoseconds (2**62: a sum of a few stays in 64 bits).
MAX_NS = 2**62


def _open(path: Path, data: bytes) -> sqlite3.Connection:
    """The database in ``data`` (the very bytes whose hash the provenance records),
    in memory: no path or URI is handed to SQLite, so a name holding ``#``, ``?`` or
    ``%2f`` can neither open another file nor create one, and nothing is ever written."""
    try:
        db = sqlite3.connect(":memory:")
        db.deserialize(data)
        db.execute("pragma query_only = on")
        return db
    except (sqlite3.Error, OverflowError, MemoryError) as exc:
        raise ImportFailed(f"{path}: not a readable nvprof database ({clip(str(exc), 120)})") from None


def _kernels(path: Path, db: sqlite3.Connection) -> tuple[Counter[str], dict[str, int], str]:
    """(kernel name -> launches, name -> total ns, the GPU's name). The kernels are
    counted first, bounded as a JSON profile's objects are, and every kernel's times
    must be integers with its end not before its start: else an ImportFailed naming it."""
    try:
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
        if "StringTable" not in tables or not tables & set(_TABLES):
            raise ImportFailed(f"{path}: an SQLite database, but not nvprof's (no StringTable or kernel table)")
        kernel_tables = [t for t in _TABLES if t in tables]
        rows = sum(db.execute(f"select count(*) from {t}").fetchone()[0] for t in kernel_tables)
        if rows > MAX_OBJECTS:
            raise ImportFailed(f"{path}: holds {rows:,} kernel records, more than the {MAX_OBJECTS:,} an import "
                               "reads; profile fewer iterations")
        for table in kernel_tables:
            bad = db.execute(f"select k.rowid, s.value, k.start, k.end from {table} k left join StringTable s "
                             "on s._id_ = k.name where typeof(k.start) != 'integer' or typeof(k.end) != 'integer' "
                             f"or k.start < 0 or k.end < k.start or k.end > {MAX_NS} limit 1").fetchone()
            if bad is not None:
                rowid, name, start, end = bad
                why = (f"ends at {end} before it starts at {start}" if isinstance(start, int) and isinstance(end, int)
                       and end < start else f"start {clip(repr(start), 30)} and end {clip(repr(end), 30)} are not "
                       "times in nanoseconds")
                raise ImportFailed(f"{path}: {table} row {rowid} ({clip(str(name), 60)}): {why}; not imported")
        launches: Counter[str] = Counter()
        times: dict[str, int] = {}
        for table in kernel_tables:
            for name, n, ns in db.execute(f"select s.value, count(*), sum(k.end - k.start) from {table} k "
                                          "join StringTable s on s._id_ = k.name group by s.value"):
                if isinstance(name, str):
                    launches[name] += int(n)
                    times[name] = times.get(name, 0) + int(ns or 0)
        gpu = ""
        if "CUPTI_ACTIVITY_KIND_DEVICE" in tables:
            row = db.execute("select s.value from CUPTI_ACTIVITY_KIND_DEVICE d join StringTable s on s._id_ = d.name "
                             "limit 1").fetchone()
            gpu = clip(row[0], 100) if row and isinstance(row[0], str) else ""
        return launches, times, gpu or "unknown"
    except sqlite3.Error as exc:
        raise ImportFailed(f"{path}: corrupt nvprof database ({clip(str(exc), 120)})") from None
    finally:
        db.close()


def import_nvprof(path: Path, framework: str, rules: tuple[OpRule, ...] = (), vocab: ProfileVocab = ProfileVocab(),
                  command: str = "") -> list[Imported]:
    """``rules`` go unused: nvprof records kernels, not operators (see KERNELS)."""
    src = read_source(path)  # the checks every import gets (a regular file, bounded), and the hash
    name, digest = src.name, src.sha256
    db = _open(path, src.data)
    del src  # SQLite holds its own copy: the file's bytes are not kept twice
    launches, times, gpu = _kernels(path, db)
    if not launches:
        raise ImportFailed(f"{path}: an nvprof database with no kernel launches")
    origin = provenance(name, digest, "nvprof SQLite database")
    claimed = {k for k in launches for passes in KERNELS.values() for rx in passes.values() if rx.search(k)}
    origin.update({"kernels": len(launches), "launches": sum(launches.values()),
                   "kernels_of_no_primitive": len(launches) - len(claimed),
                   "note": "kernels only: nvprof recorded no operators, so a kernel is given to a primitive only "
                           "where its name says which (cuBLAS gemms are not)"
                           + (f"; {vocab.note}" if vocab.note else "")})
    out = []
    for primitive, passes in KERNELS.items():
        trees = {}
        for pass_, rx in passes.items():
            kids = [Node(Frame("op", module_of("NVIDIA"), k, "", 0, kernel_lib(k, "NVIDIA")), n, times.get(k, 0))
                    for k, n in sorted(launches.items()) if rx.search(k)]
            if kids:
                trees[pass_] = Node(Frame("root", "", f"{primitive}.{pass_}"), 1, sum(c.time_ns for c in kids),
                                    children=kids)
        if not trees:
            continue
        order = [p for p in PASSES if p in trees]
        meta = m.build_meta(framework=framework, version=vocab.version, primitive=primitive,
                            variant=short_name(name, vocab.suffixes),
                            passes=order, shape=[], dtype=None,
                            machine_info={"arch": "unknown", "cpu": "", "gpu": gpu, "vendor": "NVIDIA"},
                            software={}, provenance=origin, command=command)
        runs = [Run(p, "warm", {"op": trees[p]}, {"source": "nvprof kernels"}) for p in order]
        n = {k for t in trees.values() for k in (c.frame.name for c in t.children)}
        out.append(Imported(Trace(meta, runs), primitive, order, gpu, len(n), sum(launches[k] for k in n)))
    if not out:
        raise ImportFailed(f"{path}: none of its {len(launches)} kernels names one of dltrace's primitives")
    return out
