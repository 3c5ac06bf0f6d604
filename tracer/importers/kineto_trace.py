"""A Kineto file (the chrome-trace JSON a framework's profiler writes through
Kineto) to traces.

Reads the file (:mod:`.source`, :mod:`.kineto`), nests its ops and links kernels
and backward nodes (:mod:`.hierarchy`), slices each primitive out
(:mod:`.slicing`) and wraps each slice in a Trace with its meta (:mod:`.meta`,
:mod:`.provenance`). A file with none of dltrace's primitives is an ImportFailed
naming the ops it does hold, so the user sees what was in it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tracer.contract import PASSES, PRIMITIVES
from tracer.importers import Imported, ImportFailed
from tracer.importers import meta as m
from tracer.importers.hierarchy import build
from tracer.importers.kernels import vendor_of
from tracer.importers.kineto import parse
from tracer.importers.provenance import provenance
from tracer.importers.slicing import Slice, build_slices
from tracer.importers.source import clip, read_source, short_name
from tracer.registry_entries import OpRule, ProfileVocab
from tracer.trace import Run, Trace


def import_kineto(path: Path, framework: str, rules: tuple[OpRule, ...], vocab: ProfileVocab = ProfileVocab(),
                  command: str = "") -> list[Imported]:
    src = read_source(path)
    profile = parse(src)
    hier = build(profile)
    gpu = m.gpu_name(profile.header, (ev.device for ev in profile.device))
    vendor = vendor_of([gpu], (launch.name for launch in profile.launches), profile.header)
    slices = build_slices(profile, hier, vendor, framework, rules, vocab.producer or "Kineto")
    if not slices:
        frequent = Counter(op.name for op in profile.ops).most_common(5)
        seen = ", ".join(f"{clip(name, 50)} ×{n}" for name, n in frequent)
        raise ImportFailed(f"{path}: none of dltrace's primitives ({', '.join(PRIMITIVES)}) in its "
                           f"{len(profile.ops)} host ops (most frequent: {seen})")
    origin = provenance(src.name, src.sha256, "Kineto chrome-trace JSON" + (" (gzip)" if src.compressed else ""))
    origin.update({"events": profile.events, "events_skipped_malformed": profile.skipped, "schema": profile.schema,
                   "gpu_activities_attached": hier.attached, "gpu_activities_unattached": hier.unattached})
    if profile.first_skipped is not None:  # which record was wrong (a NaN or overflowing time, a missing name...)
        origin["first_malformed_event"] = profile.first_skipped
    common: dict[str, Any] = {
        "version": m.framework_version(profile.header, vocab.env_header),
        "variant": short_name(src.name, vocab.suffixes),
        "machine_info": m.machine(profile.header, gpu, vendor, vocab.env_header),
        "software": m.gpu_software(profile.header, vocab.env_header),
        "provenance": origin,
        "command": command,
    }
    return [_imported(s, gpu, framework, common) for s in slices]


def _imported(s: Slice, gpu: str, framework: str, common: dict[str, Any]) -> Imported:
    shape, dtype = m.shape_and_dtype(s.first.args) if s.first is not None else ([], None)
    passes = [p for p in PASSES if p in s.trees]
    meta = m.build_meta(framework=framework, primitive=s.primitive, passes=passes, shape=shape, dtype=dtype, **common)
    runs = [Run(p, "warm", {"op": s.trees[p]}, s.stats[p]) for p in passes]
    return Imported(Trace(meta, runs), s.primitive, passes, gpu, len(s.kernels), sum(s.kernels.values()))
