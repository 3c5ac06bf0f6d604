"""What an imported trace says about itself: the ``meta`` of tracer.trace.

Only facts the file records are copied, each through a whitelist and a type check:
a profiler file's header also holds host names, user names, environment
variables and access tokens (one of the reference files carries a whole
environment), and none of that belongs in a trace. What the file does not record
is said to be unknown, never guessed: ``framework_version`` "unknown",
``machine.arch`` "unknown". ``api`` is "imported" and ``emulated`` false: the
trace is a slice of a real recording, nothing in it was run or emulated here.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections import Counter
from typing import Any, Iterable

from tracer import __version__
from tracer.importers.source import clip
from tracer.registry_entries import EnvHeader

#: Header keys (Kineto's top level) worth keeping: runtime and driver versions.
SOFTWARE_KEYS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version", "hip_runtime_version",
                 "hip_driver_version", "roctracer_version", "schemaVersion")
_MODEL_NAME = re.compile(r"^\s*Model name:\s*(.+)$")


def _scalar(value: Any) -> str | int | float | None:
    """A version-like value: a short string or a number; anything else is dropped."""
    if value.__class__ is str and value.strip() and value.strip() not in ("N/A", "None"):
        return clip(value, 80)
    if value.__class__ in (int, float):
        return value
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if value.__class__ is dict else {}


def recording_env(header: dict[str, Any], spec: EnvHeader | None) -> dict[str, Any]:
    """The recording environment the header holds (``metadata.system.<spec.key>``,
    the framework's entry says which key), or {}."""
    if spec is None:
        return {}
    return _dict(_dict(_dict(header.get("metadata")).get("system")).get(spec.key))


def framework_version(header: dict[str, Any], spec: EnvHeader | None) -> str:
    version = _scalar(recording_env(header, spec).get(spec.version)) if spec and spec.version else None
    return str(version) if version is not None else "unknown"


def gpu_software(header: dict[str, Any], spec: EnvHeader | None) -> dict[str, Any]:
    """Runtime, driver and library versions the file records, under their own keys
    (those of its recording environment as ``PREFIX.key``; the framework's version
    is the trace's framework_version instead)."""
    out: dict[str, Any] = {}
    for key in SOFTWARE_KEYS:
        value = _scalar(header.get(key))
        if value is not None:
            out[key] = value
    if spec is None:
        return out
    env = recording_env(header, spec)
    for key in spec.keep:
        value = _scalar(env.get(key))
        if value is not None and key != spec.version:
            out[f"{spec.prefix}.{key}"] = value
    return out


def gpu_name(header: dict[str, Any], device_ids: Iterable[int | None]) -> str:
    """The GPU's name from ``deviceProperties``: the device most activities ran on,
    else the first device listed; "unknown" when the file has none."""
    listed = header.get("deviceProperties")
    props = [p for p in (listed if listed.__class__ is list else [])
             if p.__class__ is dict and p.get("name").__class__ is str and p["name"]]
    if not props:
        return "unknown"
    used = Counter(d for d in device_ids if d is not None)
    for dev, _ in used.most_common():
        for p in props:
            if p.get("id") == dev:
                return clip(p["name"], 100)
    return clip(props[0]["name"], 100)


def machine(header: dict[str, Any], gpu: str, vendor: str, spec: EnvHeader | None = None) -> dict[str, Any]:
    """The recording machine as far as the file says (no host name)."""
    system = _dict(_dict(header.get("metadata")).get("system"))
    arch = _scalar(_dict(system.get("uname")).get("machine"))
    cpu = ""
    info = recording_env(header, spec).get("cpu_info")
    if info.__class__ is list:
        for line in info:
            m = _MODEL_NAME.match(line) if line.__class__ is str else None
            if m:
                cpu = clip(m.group(1), 100)
                break
    return {"arch": str(arch) if arch is not None else "unknown", "cpu": cpu, "gpu": gpu, "vendor": vendor or "unknown"}


def shape_and_dtype(args: dict[str, Any]) -> tuple[list[int], str | None]:
    """The first input's shape and dtype of an op, when the file recorded them."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    shape: list[int] = []
    if dims.__class__ is list and dims and dims[0].__class__ is list \
            and all(d.__class__ is int and d >= 0 for d in dims[0]):
        shape = list(dims[0])
    dtype = clip(types[0], 40) if types.__class__ is list and types and types[0].__class__ is str and types[0] else None
    return shape, dtype


def build_meta(*, framework: str, version: str, primitive: str, variant: str, passes: list[str],
               shape: list[int], dtype: str | None, machine_info: dict[str, Any], software: dict[str, Any],
               provenance: dict[str, Any], command: str, device: str = "gpu") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "framework": framework, "framework_version": version, "primitive": primitive, "api": "imported",
        "device": device, "evidence": "imported", "variant": variant, "shape": shape, "passes": passes,
        "machine": machine_info,
        "provenance": provenance, "emulated": False, "tool": "dltrace", "tool_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": command, "layers_requested": ["op"],
    }
    if dtype:
        meta["dtype"] = dtype
    if software:
        meta["gpu_software"] = software
    return meta
