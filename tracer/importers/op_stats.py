"""An op-stats file (XProf's TfStatsDatabase protobuf, what TensorBoard's profile
plugin calls ``tensorflow_stats``) to traces: which op types a training ran on its
device.

The file is aggregates only: per op (``Conv2D``, ``FusedBatchNormV3``...) whether
it ran on the host or the device, how often and for how long; no order, no
calling context, no kernel names. So each primitive's trace holds the op types the
device ran, with their occurrences, and says it is an aggregate. The reading is
done by the reader module the framework's entry names (``profile_vocab``: XProf's
published protobuf classes in dltrace's TensorFlow environment, a subprocess:
dltrace's process imports no framework); what the records are called and the
version its traces say come from the entry too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracer.contract import PASSES
from tracer.importers import Imported, ImportFailed
from tracer.importers import meta as m
from tracer.importers.checks import bad_time
from tracer.importers.provenance import provenance
from tracer.importers.env_reader import read_in_env
from tracer.importers.source import clip, read_source, short_name
from tracer.registry_entries import OpRule, ProfileVocab
from tracer.trace import Frame, Node, Run, Trace

TIMEOUT_S = 120
#: The most occurrences one record may claim (a 64-bit counter's).
MAX_COUNT = 2**63 - 1


def _dump(path: Path, framework: str, vocab: ProfileVocab) -> dict[str, Any]:
    what = f"the {_records(vocab)} reader ({vocab.reader})"
    dump = read_in_env(path, framework, vocab.reader, what, TIMEOUT_S)
    if not isinstance(dump, dict):
        raise ImportFailed(f"{path}: {what} wrote no records")
    return dump


def _records(vocab: ProfileVocab) -> str:
    """What the file's records are called: the framework's name for them, else the
    protobuf message's."""
    return vocab.records or "TfStatsDatabase"


def _check(path: Path, records: list[dict[str, Any]], vocab: ProfileVocab) -> None:
    """Each record's occurrences a count and its self time a finite, non-negative time,
    else an ImportFailed naming the record: a trace of it would hold what no command reads."""
    for i, r in enumerate(records):
        n, us = r.get("occurrences") or 0, r.get("total_self_time_in_us") or 0
        wrong = ("" if n.__class__ is int and 0 <= n <= MAX_COUNT
                 else f"occurrences {clip(repr(n), 30)}, not a count")
        if not wrong:
            why = bad_time(us) or ("" if us >= 0 else f"is {us:g}, negative")
            wrong = f"total_self_time_in_us {why}" if why else ""
        if wrong:
            raise ImportFailed(f"{path}: {_records(vocab)} record {i} ({clip(str(r.get('op_type')), 40)}): "
                               f"{wrong}; not imported")


def _tree(records: list[dict[str, Any]], primitive: str, pass_: str, types: tuple[str, ...], device: str,
          framework: str) -> Node | None:
    kids = []
    for op in types:
        found = [r for r in records if r.get("op_type") == op and r.get("host_or_device") == "Device"]
        if found:
            n = sum(int(r.get("occurrences") or 0) for r in found)
            ns = int(sum(float(r.get("total_self_time_in_us") or 0) for r in found) * 1e3)
            kids.append(Node(Frame("op", framework, f"{op} [{device}]"), n, ns))
    if not kids:
        return None
    return Node(Frame("root", "", f"{primitive}.{pass_}"), 1, sum(k.time_ns for k in kids), children=kids)


def import_op_stats(path: Path, framework: str, rules: tuple[OpRule, ...], vocab: ProfileVocab = ProfileVocab(),
                    command: str = "") -> list[Imported]:
    src = read_source(path)
    if src.compressed or src.data.lstrip()[:1] in (b"{", b"["):
        raise ImportFailed(f"{path}: not a {_records(vocab)} protobuf "
                           f"(it is {'gzip' if src.compressed else 'JSON'})")
    dump = _dump(path, framework, vocab)
    records = [r for r in dump.get("records", []) if isinstance(r, dict)]
    _check(path, records, vocab)
    producer = f"{vocab.producer} " if vocab.producer else ""
    origin = provenance(src.name, src.sha256, f"{producer}{_records(vocab)} (protobuf, aggregates)")
    origin.update({"records": len(records), "device_type": clip(str(dump.get("device_type", "")), 40),
                   "note": "aggregates per op type: which ops ran on the device and how often; no order, no "
                           "kernel names; a training step's forward and backward MatMuls are not told apart"})
    device = clip(str(dump.get("device_type") or "device"), 20)
    out = []
    for rule in rules:
        primitive = rule.primitive
        both = (("forward", rule.forward), ("backward", rule.backward))
        trees = {p: t for p, types in both if types
                 and (t := _tree(records, primitive, p, types, device, framework)) is not None}
        if primitive == "dense":  # one aggregate for both passes: shown once, as what the device ran
            trees.pop("backward", None)
        if not trees:
            continue
        passes = [p for p in PASSES if p in trees]
        meta = m.build_meta(framework=framework, version=vocab.version, primitive=primitive,
                            variant=short_name(src.name, vocab.suffixes), passes=passes, shape=[], dtype=None,
                            machine_info={"arch": "unknown", "cpu": "",
                                          "gpu": dump.get("device_type")
                                          or "unknown (a GPU profile, per its provenance)",
                                          "vendor": "unknown"},
                            software={}, provenance=origin, command=command)
        runs = [Run(p, "warm", {"op": trees[p]}, {"source": f"{_records(vocab)} aggregates"}) for p in passes]
        launches = sum(c.count for t in trees.values() for c in t.children)
        out.append(Imported(Trace(meta, runs), primitive, passes, str(meta["machine"]["gpu"]), 0, launches))
    if not out:
        raise ImportFailed(f"{path}: none of dltrace's primitives among its device op types")
    return out
