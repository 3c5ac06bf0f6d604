"""Typed, read-only views of what a trace says of itself (its ``meta``) and of each
run (its ``stats``), parsed and checked in one place.

Why: a trace file is JSON written by a probe process, an importer, another dltrace
version or another machine, and the processing stages group, pair and label traces by
a dozen of its fields. Reading those as ``dict[str, Any]`` spread the same defaults
and type checks ("a dict, else {}", "the variant, else default") over twenty modules.
Here each field has one type and one default; what the JSON holds beyond them stays
in ``Trace.meta`` (written back unchanged). A field the loader checks (the required
four, ``shape``, ``machine.arch``/``cpu``, ``collector``, ``recorded_by``, the
numeric stats) raises ValueError when its type is wrong; a field it does not check
reads as its default when it holds another type (traces recorded elsewhere may).

Stdlib only, like tracer.trace, whose loader calls :func:`parse_meta` and
:func:`parse_stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from tracer.contract import COLLECTORS

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    """The default of a mapping field (a dataclass default must be a factory)."""
    return _EMPTY

#: Meta fields every trace has: the processing stages group and pair traces by them.
REQUIRED_META = ("framework", "primitive", "api", "device")
#: The longest name one of them may be (a workload's is at most 64: tracer.contract.UserWorkload).
MAX_NAME = 512
#: Optional meta fields the loader checks, and their JSON types.
OPTIONAL_META: dict[str, tuple[type, ...]] = {
    "variant": (str,), "framework_version": (str,), "shape": (list,), "passes": (list,), "machine": (dict,),
    "source_roots": (list,), "command": (str,), "created": (str,), "tool": (str,), "native": (dict,),
    "native_env": (dict,), "variant_env": (dict,), "variant_set": (dict,), "layers_requested": (list,),
    "provenance": (dict,), "emulated": (dict, bool), "library": (dict,), "dispatch": (dict,),
    "evidence": (str,), "backend": (dict,), "gpu_evidence": (dict,), "recorded_by": (dict,), "collector": (dict,),
    "model": (dict,), "thread_env": (dict,), "spent_s": (dict,),
}
#: Run stats that are numbers where present.
NUMERIC_STATS = ("untraced_s", "traced_s", "overhead", "seconds")


def _wrong(what: str, value: Any, want: str) -> ValueError:
    return ValueError(f"{what} must be {want}, not {type(value).__name__}")


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else _EMPTY


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


@dataclass(frozen=True)
class Machine:
    """Where a trace was recorded. ``arch`` and ``cpu`` are None where the trace does
    not say (a profile recorded elsewhere may not): a report shows "?" there."""

    arch: str | None = None
    cpu: str | None = None
    gpu: str = ""
    #: on a GPU machine dltrace recorded on: the card's kernel driver and the runtime the
    #: framework drove it with ("NVIDIA 580.159.04", "CUDA 13.0, cuDNN 91900")
    gpu_driver: str = ""
    gpu_runtime: str = ""

    @classmethod
    def parse(cls, value: Any) -> Machine:
        m = _dict(value)
        for key in ("arch", "cpu"):
            if not isinstance(m.get(key, ""), str):
                raise _wrong(f"meta.machine.{key}", m[key], "a string")
        return cls(m.get("arch"), m.get("cpu"), str(m.get("gpu") or ""), _str(m.get("gpu_driver")),
                   _str(m.get("gpu_runtime")))


@dataclass(frozen=True)
class Emulated:
    """The emulated CPU a probe ran on (the runner's account: tracer.runner)."""

    cpu: str = "?"
    model: str = ""


@dataclass(frozen=True)
class Provenance:
    """Where a trace not recorded by dltrace here came from: a profile recorded by
    others (``origin``/``source``, its GPU) or what a GPU build, lowering or source
    read said (``read``)."""

    origin: str = ""
    source: str = ""
    what: str = ""
    read: str = ""
    gpu: str = ""

    @classmethod
    def parse(cls, value: Any) -> Provenance | None:
        if not isinstance(value, dict):
            return None
        return cls(origin=str(value.get("origin") or ""), source=str(value.get("source") or ""),
                   what=str(value.get("what") or ""), read=str(value.get("read", "")),
                   gpu=str(value.get("gpu") or ""))


@dataclass(frozen=True)
class Native:
    """How the native layer's capture went for the probe process (tracer.collect.sampler):
    its error, whether the process ended during it, the libraries' paths it saw."""

    error: str = ""
    incomplete: bool = False
    lib_paths: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class Dispatch:
    """The framework's dispatch table as the probe read it for the ops it reached
    (op -> row; a row's shape is the probe's: tracer.analysis.backend_needs reads it).
    ``ops`` is None where the table could not be read (``error`` says why)."""

    ops: Mapping[str, Any] | None = None
    new_backend_key: str = ""
    error: str = ""


@dataclass(frozen=True)
class Backend:
    """What a derived GPU-evidence trace says a new backend needs: op -> row, for all
    passes (``ops``) or per pass (``passes``), and what a backend registers as (``key``)."""

    key: str = ""
    ops: Mapping[str, Any] = field(default_factory=_empty)
    passes: Mapping[str, Any] = field(default_factory=_empty)


@dataclass(frozen=True)
class Standin:
    """What the stand-in device's run reached (pass -> ops) and what it registered by name."""

    reached: Mapping[str, Any]
    registered_by_name: tuple[Any, ...] = ()
    evidence: str | None = None
    unit: str | None = None  # what one op of its list is (torch: an op at the dispatch key; JAX: a StableHLO op)


@dataclass(frozen=True)
class Collector:
    """Which Python-level collector recorded the python layer, and why the fallback ran."""

    python: str
    why: str = ""


@dataclass(frozen=True)
class TraceMeta:
    """What a trace says of itself, typed. ``Trace.info`` holds it."""

    framework: str
    primitive: str
    api: str
    device: str
    variant: str = "default"
    framework_version: str | None = None
    shape: tuple[int, ...] = ()
    machine: Machine = field(default_factory=Machine)
    emulated: Emulated | None = None
    provenance: Provenance | None = None
    native: Native | None = None
    native_env: Mapping[str, Any] = field(default_factory=_empty)
    dispatch: Dispatch | None = None
    library: Mapping[str, Any] = field(default_factory=_empty)
    evidence: str = ""  # the evidence class the trace names (tracer.evidence_classes.EVIDENCE), "" where none
    backend: Backend | None = None
    standin: Standin | None = None
    recorded_by: Mapping[str, str] = field(default_factory=_empty)
    collector: Collector | None = None
    cpu_capability: str = ""
    #: the BLAS the framework's build links, as the build says (torch: BLAS_INFO), "" where unknown
    blas: str = ""
    onednn_enabled: bool | None = None
    #: a model's training step (tracer.contract.MODELS): its layers, level, defaults...
    model: Mapping[str, Any] = field(default_factory=_empty)

    @property
    def imported(self) -> bool:
        """A slice of a whole model's profile recorded elsewhere (tracer.importers)."""
        return self.api == "imported"

    @property
    def openblas_core(self) -> str:
        """The kernel set OpenBLAS chose for this CPU, "" where it did not say."""
        return str(_dict(self.library.get("OpenBLAS")).get("core") or "")

    @property
    def worker(self) -> str:
        """The fleet worker that recorded the trace (tracer.fleet), "" for a local probe."""
        return str(self.recorded_by.get("worker") or self.recorded_by.get("address") or "")


def native_not_finished(why: str) -> dict[str, Any]:
    """meta ``native`` of a trace whose probe process ended during its native capture:
    written before the capture starts (tracer.collect.harness) and again, with the
    reason, when the survey finds the process gone (tracer.survey)."""
    return {"error": f"native capture did not finish: {why}", "incomplete": True}


def _check_types(meta: dict[str, Any]) -> None:
    for key in REQUIRED_META:
        value = meta.get(key)
        if value is None:
            raise ValueError(f"meta.{key} is missing")
        if not isinstance(value, str) or not value:
            raise _wrong(f"meta.{key}", value, "a non-empty string")
        if len(value) > MAX_NAME:  # each page, table and file name repeats it
            raise ValueError(f"meta.{key} is {len(value)} characters long (at most {MAX_NAME})")
    for key, kinds in OPTIONAL_META.items():
        value = meta.get(key)
        if value is not None and not isinstance(value, kinds):
            raise _wrong(f"meta.{key}", value, " or ".join(k.__name__ for k in kinds))
    if not all(type(d) is int and d >= 0 for d in meta.get("shape") or []):
        raise ValueError("meta.shape must be a list of sizes")


def _collector(value: Any) -> Collector | None:
    """Traces written before meta.collector existed have none (the pure-Python collector)."""
    if value is None:
        return None
    if value.get("python") not in COLLECTORS:
        raise ValueError(f"meta.collector.python must be one of {', '.join(COLLECTORS)}")
    if not isinstance(value.get("why", ""), str):
        raise _wrong("meta.collector.why", value["why"], "a string")
    return Collector(value["python"], value.get("why", ""))


def _recorded_by(value: Any) -> Mapping[str, str]:
    for key, v in (value or {}).items():
        if not isinstance(v, str):
            raise _wrong(f"meta.recorded_by.{str(key)[:40]}", v, "a string")
    return MappingProxyType(dict(value)) if value else _EMPTY


def _emulated(value: Any) -> Emulated | None:
    if isinstance(value, dict):
        return Emulated(str(value.get("cpu", "?")), str(value.get("model", "")))
    return Emulated() if value is True else None


def _native(value: Any) -> Native | None:
    if not isinstance(value, dict):
        return None
    return Native(str(value.get("error") or ""), bool(value.get("incomplete")),
                  MappingProxyType(dict(_dict(value.get("lib_paths")))))


def _dispatch(value: Any) -> Dispatch | None:
    if not isinstance(value, dict):
        return None
    ops = value.get("ops")
    return Dispatch(MappingProxyType(ops) if isinstance(ops, dict) else None, str(value.get("new_backend_key", "")),
                    str(value.get("error") or ""))


def _backend(value: Any) -> Backend | None:
    if not isinstance(value, dict):
        return None
    return Backend(str(value.get("key", "")), _dict(value.get("ops")), _dict(value.get("passes")))


def _strings(value: Any) -> tuple[str, ...]:
    """A list of strings; anything else (an integer, a list of lists) is none."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _standin(value: Any) -> Standin | None:
    """The stand-in's record, each pass's list of ops a list of strings (a pass whose
    list is not one is no list: a file someone else wrote is read, not trusted)."""
    if not isinstance(value, dict) or not isinstance(value.get("reached"), dict):
        return None
    evidence = value.get("evidence")
    reached = {str(p): list(_strings(ops)) for p, ops in value["reached"].items() if isinstance(ops, list)}
    unit = value.get("unit")
    return Standin(reached, _strings(value.get("registered_by_name")), None if evidence is None else str(evidence),
                   unit if isinstance(unit, str) else None)


def _model(value: Any) -> Mapping[str, Any]:
    """A model's (or a user's workload's) record, its mappings mappings and its lists
    lists of strings, whatever the file held."""
    if not isinstance(value, dict):
        return _EMPTY
    out = dict(value)
    for key in ("defaults", "built_from_primitives", "workload", "passes"):
        if key in out and not isinstance(out[key], dict):
            out[key] = {}
    if "layers" in out:
        out["layers"] = list(_strings(out["layers"]))
    for key in ("name", "title", "api", "loss", "optimizer"):
        if key in out and not isinstance(out[key], str):
            out[key] = str(out[key])[:200]
    return out


def parse_meta(meta: Any) -> TraceMeta:
    """The typed view of a trace's meta; ValueError (one line) where a field the
    processing stages rely on has the wrong type."""
    if not isinstance(meta, dict):
        raise _wrong("meta", meta, "an object")
    _check_types(meta)
    version = meta.get("framework_version")
    onednn = meta.get("onednn_enabled")
    return TraceMeta(
        framework=meta["framework"], primitive=meta["primitive"], api=meta["api"], device=meta["device"],
        variant=meta.get("variant", "default"), framework_version=version,
        shape=tuple(meta.get("shape") or ()), machine=Machine.parse(meta.get("machine")),
        emulated=_emulated(meta.get("emulated")), provenance=Provenance.parse(meta.get("provenance")),
        native=_native(meta.get("native")), native_env=_dict(meta.get("native_env")),
        dispatch=_dispatch(meta.get("dispatch")), library=_dict(meta.get("library")),
        evidence=_str(meta.get("evidence")), backend=_backend(meta.get("backend")),
        standin=_standin(meta.get("standin")), recorded_by=_recorded_by(meta.get("recorded_by")),
        collector=_collector(meta.get("collector")), cpu_capability=_str(meta.get("cpu_capability")),
        blas=_str(meta.get("blas")),
        onednn_enabled=onednn if isinstance(onednn, bool) else None, model=_model(meta.get("model")))


# ----------------------------------------------------------------------------- run stats


@dataclass(frozen=True)
class LayerStats:
    """What a collector recorded of one layer of one run (``stats.layers.NAME``): the
    fields below are the ones read elsewhere; the rest are shown as they are."""

    sampled: bool = False
    source: str | None = None
    rate: Any = None
    errors: int = 0
    slowdown: float | None = None
    jit_code: tuple[tuple[str, int, int], ...] = ()  # (kernel, bytes, start) of generated code reached
    #: the library layer told apart per op (``per_op``): op -> (times it ran, {call: times reported})
    per_op: Mapping[str, tuple[int, Mapping[str, int]]] = field(default_factory=_empty)


@dataclass(frozen=True)
class RunStats:
    """What a run's stats say: its timings (None where absent), why a layer was not
    captured (``not_captured``: layer -> reason), and each layer's own stats."""

    untraced_s: float | None = None
    traced_s: float | None = None
    overhead: float | None = None
    seconds: float | None = None
    layers: Mapping[str, LayerStats] = field(default_factory=_empty)
    not_captured: Mapping[str, str] = field(default_factory=_empty)

    def is_sampled(self, layer: str) -> bool:
        """Whether the stats call the layer's counts samples (``layers.NAME.sampled``)."""
        return layer in self.layers and self.layers[layer].sampled


def _layer_stats(value: Mapping[str, Any]) -> LayerStats:
    jit = tuple((str(r[0]), r[1], r[2]) for r in value.get("jit_code") or ()
                if isinstance(r, list) and len(r) == 3 and type(r[1]) is int and type(r[2]) is int)
    errors = value.get("errors", 0)
    slowdown = value.get("slowdown")
    return LayerStats(bool(value.get("sampled")), value.get("source") if isinstance(value.get("source"), str) else None,
                      value.get("rate"), errors if type(errors) is int else 0,
                      slowdown if type(slowdown) in (int, float) else None, jit, _per_op(value.get("per_op")))


def _per_op(value: Any) -> Mapping[str, tuple[int, Mapping[str, int]]]:
    """``per_op`` as written by the harness; what is not of its shape is left out (a
    trace from elsewhere is read, never trusted)."""
    if not isinstance(value, dict):
        return MappingProxyType({})
    out = {}
    for op, rec in list(value.items())[:100_000]:
        if not isinstance(rec, dict) or type(rec.get("count")) is not int or not isinstance(rec.get("calls"), dict):
            continue
        calls = {str(c): n for c, n in rec["calls"].items() if type(n) is int}
        out[str(op)] = (rec["count"], MappingProxyType(calls))
    return MappingProxyType(out)


def parse_stats(stats: Any) -> RunStats:
    """The typed view of a run's stats; ValueError where a number or the layers'
    object has the wrong type."""
    if not isinstance(stats, dict):
        raise _wrong("a run's stats", stats, "an object")
    for key in NUMERIC_STATS:
        value = stats.get(key)
        if value is not None and (type(value) not in (int, float) or value != value):
            raise _wrong(f"stats.{key}", value, "a number")
    layers = stats.get("layers", {})
    if not isinstance(layers, dict) or not all(isinstance(v, dict) for v in layers.values()):
        raise ValueError("stats.layers must map layer names to objects")
    per = {str(k): _layer_stats(v) for k, v in layers.items()}
    not_captured = {key[: -len("_error")]: str(value) for key, value in stats.items()
                    if key.endswith("_error") and value}
    return RunStats(stats.get("untraced_s"), stats.get("traced_s"), stats.get("overhead"), stats.get("seconds"),
                    MappingProxyType(per), MappingProxyType(not_captured))
