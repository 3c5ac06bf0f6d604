"""``dltrace import --framework tensorflow FILE.tensorflow_stats.pb``: which op types
a TensorFlow 2 training ran on its device, from the TensorBoard profile plugin's
aggregate ``tensorflow_stats``.

The file is aggregates only: per op (``Conv2D``, ``FusedBatchNormV3``...) whether
it ran on the host or the device, how often and for how long; no order, no
calling context, no kernel names. So each primitive's trace holds the op types the
device ran, with their occurrences, and says it is an aggregate. The reading is
done by XProf's published protobuf classes in dltrace's TensorFlow environment
(:mod:`.tf_stats_dump`, a subprocess: dltrace's process imports no framework).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracer.contract import PASSES
from tracer.importers import Imported, ImportFailed
from tracer.importers import meta as m
from tracer.importers.provenance import provenance
from tracer.importers.env_reader import read_in_env
from tracer.importers.source import clip, read_source, short_name
from tracer.registry import OpRule
from tracer.trace import Frame, Node, Run, Trace

READER = Path(__file__).with_name("tf_stats_dump.py")
TIMEOUT_S = 120


def _dump(path: Path, framework: str) -> dict[str, Any]:
    dump = read_in_env(path, framework, READER, "the tensorflow_stats reader (XProf's protobuf classes)", TIMEOUT_S)
    if not isinstance(dump, dict):
        raise ImportFailed(f"{path}: the tensorflow_stats reader wrote no records")
    return dump


def _tree(records: list[dict], primitive: str, pass_: str, types: tuple[str, ...], device: str,
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


def import_tf_stats(path: Path, framework: str, rules: tuple[OpRule, ...], command: str = "") -> list[Imported]:
    src = read_source(path)
    if src.compressed or src.data.lstrip()[:1] in (b"{", b"["):
        raise ImportFailed(f"{path}: not a tensorflow_stats protobuf (it is {'gzip' if src.compressed else 'JSON'})")
    dump = _dump(path, framework)
    records = [r for r in dump.get("records", []) if isinstance(r, dict)]
    origin = provenance(src.name, src.sha256, "TensorBoard profile plugin tensorflow_stats (protobuf, aggregates)")
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
        meta = m.build_meta(framework=framework, version="unknown (TensorFlow 2)", primitive=primitive,
                            variant=short_name(src.name), passes=passes, shape=[], dtype=None,
                            machine_info={"arch": "unknown", "cpu": "",
                                          "gpu": dump.get("device_type")
                                          or "unknown (a GPU profile, per its provenance)",
                                          "vendor": "unknown"},
                            software={}, provenance=origin, command=command)
        runs = [Run(p, "warm", {"op": trees[p]}, {"source": "tensorflow_stats aggregates"}) for p in passes]
        launches = sum(c.count for t in trees.values() for c in t.children)
        out.append(Imported(Trace(meta, runs), primitive, passes, str(meta["machine"]["gpu"]), 0, launches))
    if not out:
        raise ImportFailed(f"{path}: none of dltrace's primitives among its device op types")
    return out
