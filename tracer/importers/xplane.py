"""An XLA profile (XPlane protobuf) to traces.

The file is read by the framework itself (the reader module its frameworks.yaml entry
names, run in its environment: for JAX, tracer.probes.jax_xplane); this module turns
what it wrote into op-layer trees. In an XPlane each GPU kernel carries the
framework op it computes (stat ``name``, e.g.
``jit(forward_3d_conv)/conv_general_dilated``), the HLO instruction XLA compiled
it into (``hlo_op``, ``cudnn-conv.1``) and the HLO module (``hlo_module``), so a
primitive's tree is::

    conv2d.forward > jit:f > conv_general_dilated > cudnn-conv.1 > Im3d2Col.kd [MIOpen]

with the jitted function as the probe's op layer names it (``jit:_conv2d``). A
profile of several GPUs running the same program is sliced on the first GPU
that ran the framework's kernels; the others are counted, not added. An op is a dltrace
primitive through its framework's ``profile_ops`` for xplane files; an XPlane records
no shapes, so a ``conv_general_dilated`` whose names say it is 1-D or 3-D
(``forward_3d_conv``, ``Im3d2Col``) is not taken for conv2d.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.probes.base import merge_siblings
from tracer.contract import PASSES, PRIMITIVES
from tracer.importers import Imported, ImportFailed
from tracer.importers import meta as m
from tracer.importers.kernels import AMD, NVIDIA, kernel_lib, module_of
from tracer.importers.provenance import provenance
from tracer.importers.env_reader import read_in_env
from tracer.importers.source import clip, read_source, short_name
from tracer.registry_entries import OpRule, ProfileVocab
from tracer.trace import Frame, Node, Run, Trace

TIMEOUT_S = 300
_DEVICE = re.compile(r"^/device:GPU:(\d+)$")
_WRAPPER = re.compile(r"^(?:transpose|jvp|vmap|pjit|jit|remat|checkpoint|custom_jvp_call|custom_vjp_call)\((.*)\)$")
_JIT = re.compile(r"^(?:jit|pjit)\((.+)\)$")
#: Names that say a convolution is not two-dimensional.
_NOT_2D = re.compile(r"(?i)(?:^|[^a-z0-9])[13]d(?:[^a-z0-9]|$)|im[13]d2col|conv[13]d")


@dataclass
class Kernel:
    name: str
    dur_ns: int
    op_path: str  # the op's name path (stat ``name``): jit(f)/conv_general_dilated
    hlo_op: str
    hlo_module: str


@dataclass
class Profile:
    device: str  # the GPU plane sliced
    devices: int  # GPU planes with the framework's kernels
    vendor: str
    gpu: str
    kernels: list[Kernel] = field(default_factory=list)
    reader: str = ""


def read_xplane(path: Path, framework: str, reader: str) -> tuple[dict[str, Any], Any]:
    """The file as a dict, read by ``reader`` (the framework's XPlane reader, a module
    run in ``framework``'s environment), and the Source."""
    src = read_source(path)
    head = src.data.lstrip()[:1]
    if src.compressed or head in (b"{", b"["):
        raise ImportFailed(f"{path}: not an XPlane protobuf (it is {'gzip' if src.compressed else 'JSON'}; "
                           "JSON profiles are read as another format)")
    what = f"{framework}'s XPlane reader ({reader})"
    dump = read_in_env(path, framework, reader, what, TIMEOUT_S)
    if not isinstance(dump, dict) or not isinstance(dump.get("planes"), list):
        raise ImportFailed(f"{path}: {what} wrote no planes")
    return dump, src


def profile_of(dump: dict[str, Any], path: Path) -> Profile:
    """The framework's kernels of the first GPU that ran any, with what each computes."""
    per_device: dict[int, tuple[dict[str, Any], list[Kernel]]] = {}
    for plane in dump["planes"]:
        if not isinstance(plane, dict) or not isinstance(plane.get("name"), str):
            continue
        dev = _DEVICE.match(plane["name"])
        if not dev:
            continue
        kernels = []
        for line in plane.get("lines") or []:
            for ev in (line.get("events") or []) if isinstance(line, dict) else []:
                k = _kernel(ev)
                if k is not None:
                    kernels.append(k)
        if kernels:
            per_device[int(dev.group(1))] = (s if isinstance(s := plane.get("stats"), dict) else {}, kernels)
    if not per_device:
        raise ImportFailed(f"{path}: no GPU kernel with a framework op (stats hlo_op, name) in this XPlane")
    first = min(per_device)
    stats, kernels = per_device[first]
    vendor_stat = stats.get("device_vendor")
    vendor = AMD if vendor_stat == "AMD" else NVIDIA if vendor_stat == "Nvidia" or vendor_stat == "NVIDIA" else ""
    facts = [f"compute capability {stats['compute_cap_major']}.{stats['compute_cap_minor']}"
             if isinstance(stats.get("compute_cap_major"), int) and isinstance(stats.get("compute_cap_minor"), int)
             else "",
             f"{stats['core_count']} cores" if isinstance(stats.get("core_count"), int) else ""]
    gpu = f"{vendor or 'unknown'} GPU" + (f" ({', '.join(f for f in facts if f)})" if any(facts) else "")
    reader = clip(str(dump.get("reader", "")), 80)
    return Profile(f"/device:GPU:{first}", len(per_device), vendor, gpu, kernels, reader)


def _kernel(ev: Any) -> Kernel | None:
    if not (isinstance(ev, list) and len(ev) == 4 and isinstance(ev[0], str) and isinstance(ev[3], dict)):
        return None
    name, _, dur, stats = ev
    hlo_op, op_path = stats.get("hlo_op"), stats.get("name")
    if not isinstance(hlo_op, str) or not isinstance(op_path, str) or not hlo_op:
        return None
    dur_ns = int(dur) if isinstance(dur, (int, float)) and dur == dur and 0 <= dur < 1e18 else 0
    module = stats.get("hlo_module")
    return Kernel(name, dur_ns, op_path, hlo_op, module if isinstance(module, str) else "")


def split_op(op_path: str) -> tuple[str, str, bool]:
    """``jit(f)/transpose(jvp(conv_general_dilated))`` -> (function "jit:f", op
    "conv_general_dilated", backward True)."""
    parts = [p for p in op_path.split("/") if p]
    function = ""
    for p in parts[:-1]:
        jm = _JIT.match(p)
        if jm:
            function = f"jit:{jm.group(1)}"
            break
    op = parts[-1] if parts else op_path
    backward = "transpose(" in op_path
    while True:
        wm = _WRAPPER.match(op)
        if not wm:
            break
        op = wm.group(1)
    return function or "jit", op, backward


def primitive_ops(rules: tuple[OpRule, ...]) -> dict[str, str]:
    """Op -> dltrace primitive, from the framework's ``profile_ops`` for xplane files."""
    return {name: r.primitive for r in rules for name in r.forward}


def _slices(prof: Profile, ops: dict[str, str]) -> tuple[dict[str, dict[str, list[Kernel]]], list[str]]:
    """primitive -> pass -> kernels (``ops``: op -> primitive); and why some ops were
    not taken."""
    out: dict[str, dict[str, list[Kernel]]] = defaultdict(lambda: defaultdict(list))
    refused: list[str] = []
    for k in prof.kernels:
        function, op, backward = split_op(k.op_path)
        prim = ops.get(op)
        if prim is None:
            continue
        if prim == "conv2d":
            evidence = next((s for s in (k.hlo_module, function, k.name) if _NOT_2D.search(s)), None)
            if evidence is not None:
                note = f"{op} is not 2-D here ({clip(evidence, 60)})"
                if note not in refused:
                    refused.append(note)
                continue
        out[prim]["backward" if backward else "forward"].append(k)
    return out, refused


def _tree(primitive: str, pass_: str, kernels: list[Kernel], vendor: str, framework: str) -> Node:
    module = module_of(vendor)
    by: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    times: dict[tuple[str, str, str, str], int] = Counter()
    for k in kernels:
        function, op, _ = split_op(k.op_path)
        key = (function, op, k.hlo_op)
        by[key][k.name] += 1
        times[key + (k.name,)] += k.dur_ns  # (not (*key, ...): mypy takes it for 3.11's star index)
    fns = []
    for (function, op, hlo), names in by.items():
        kids = [Node(Frame("op", module, n, lib=kernel_lib(n, vendor)), c, times[(function, op, hlo, n)])
                for n, c in names.items()]
        hlo_node = Node(Frame("op", "xla", hlo, lib="XLA"), sum(names.values()), sum(x.time_ns for x in kids),
                        children=kids)
        op_node = Node(Frame("op", framework, op), hlo_node.count, hlo_node.time_ns, children=[hlo_node])
        fns.append(Node(Frame("op", framework, function), op_node.count, op_node.time_ns, children=[op_node]))
    children = merge_siblings(fns)
    return Node(Frame("root", "", f"{primitive}.{pass_}"), 1, sum(c.time_ns for c in children), children=children)


def import_xplane(path: Path, framework: str, rules: tuple[OpRule, ...], vocab: ProfileVocab = ProfileVocab(),
                  command: str = "") -> list[Imported]:
    dump, src = read_xplane(path, framework, vocab.reader)
    prof = profile_of(dump, path)
    slices, refused = _slices(prof, primitive_ops(rules))
    if not slices:
        ops = Counter(split_op(k.op_path)[1] for k in prof.kernels).most_common(5)
        why = f"; {'; '.join(refused)}" if refused else ""
        raise ImportFailed(f"{path}: none of dltrace's primitives ({', '.join(PRIMITIVES)}) in its ops "
                           f"({', '.join(f'{clip(o, 40)} ×{n}' for o, n in ops)}){why}")
    origin = provenance(src.name, src.sha256, "XPlane protobuf")
    origin.update({"reader": prof.reader, "events": dump.get("events"), "events_cut": bool(dump.get("cut")),
                   "gpu_plane": prof.device, "gpu_planes_with_op_kernels": prof.devices})
    out = []
    for primitive in PRIMITIVES:
        passes_k = slices.get(primitive)
        if not passes_k:
            continue
        passes = [p for p in PASSES if passes_k.get(p)]
        runs = []
        for p in passes:
            info = {"source": f"{vocab.producer or 'an XLA profiler'} (XPlane), imported", "kernels": len(passes_k[p]),
                    "gpu_plane": prof.device, "step": "whole file"}
            tree = _tree(primitive, p, passes_k[p], prof.vendor, framework)
            runs.append(Run(p, "warm", {"op": tree}, {"layers": {"op": info}}))
        meta = m.build_meta(framework=framework, version=vocab.version, primitive=primitive,
                            variant=short_name(src.name, vocab.suffixes),
                            passes=passes, shape=[], dtype=None,
                            machine_info={"arch": "unknown", "cpu": "", "gpu": prof.gpu,
                                          "vendor": prof.vendor or "unknown"},
                            software={}, provenance=origin, command=command)
        names = Counter(k.name for p in passes for k in passes_k[p])
        out.append(Imported(Trace(meta, runs), primitive, passes, prof.gpu, len(names), sum(names.values())))
    return out
