"""The framework registry (frameworks.yaml): loaded with yaml.safe_load and
validated, so that a malformed entry is reported by entry and field."""

from __future__ import annotations

from tracer.bounded import NotRegular, TooLarge, read_regular
import functools
import math
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tracer.contract import APIS, DERIVED_EVIDENCE, DEVICES, GPU_BUILD, PRIMITIVES, PROFILE_FORMATS, NativeRequest
from tracer.paths import PACKAGE

if TYPE_CHECKING:
    # importlib.resources.abc is new in 3.11; 3.10 has Traversable in importlib.abc
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

#: the folder the package is in: in a clone, the project
ROOT = Path(__file__).resolve().parent.parent


#: Set (to 1) by `dltrace --trust-registry`: the registry's install steps may then
#: hold what pip takes besides requirement specifiers (options, paths, URLs).
TRUST_ENV = "DLTRACE_TRUST_REGISTRY"
#: The largest registry file read (the package's is 26 KB), and the most YAML nodes
#: it may expand to, aliases followed (the package's has 900): an alias bomb of a
#: few hundred bytes expands to billions when printed or copied.
MAX_BYTES = 1 << 20
MAX_NODES = 100_000
#: pip options an install step may carry without --trust-registry: none of them
#: names another index, a path or code of its own.
SAFE_OPTIONS = frozenset({"--no-deps", "--no-build-isolation", "--pre", "--prefer-binary", "--upgrade"})


def trusted() -> bool:
    return os.environ.get(TRUST_ENV) == "1"


def registry_path() -> Traversable:
    """The file $DLTRACE_REGISTRY names, or the package's own frameworks.yaml (read
    through importlib.resources, so that an installed wheel finds it as a clone does)."""
    override = os.environ.get("DLTRACE_REGISTRY")
    return Path(override) if override else resources.files("tracer") / "frameworks.yaml"


class RegistryError(Exception):
    """frameworks.yaml is malformed; the message names the entry and field."""


@dataclass(frozen=True)
class InstallStep:
    requirements: tuple[str, ...]
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Variant:
    name: str
    description: str = ""
    env: dict[str, str] = field(default_factory=dict)
    set: dict[str, Any] = field(default_factory=dict)
    #: what the switch changes: "library" (a CPU library on or off: a decision a port
    #: meets) or "compilation" (jit against eager: the same device's code compiled or not,
    #: never a device decision; a report shows its splits apart) or "precision" (the same
    #: code in another element type: the kernels a reduced-precision path reaches, shown
    #: apart, never a device decision either)
    switches: str = "library"


#: The kinds of thing a variant switches (frameworks.yaml ``variants.NAME.switches``).
VARIANT_SWITCHES = ("library", "compilation", "precision")

_NATIVE = NativeRequest()  # the defaults of native capture, in one place


@dataclass(frozen=True)
class NativeSpec:
    """How the native layer is sampled for a framework (frameworks.yaml ``native``):
    the sampling settings of :class:`tracer.contract.NativeRequest` (same defaults), and
    ``env``, set for the whole probe process when native stacks are captured (it must
    be set before the import): switches that move the kernels onto the Python thread
    py-spy can see (MXNet's NaiveEngine, a one-thread intra-op pool)."""

    rate: int = _NATIVE.rate
    seconds: float = _NATIVE.seconds
    idle: bool = _NATIVE.idle
    env: dict[str, str] = field(default_factory=dict)
    prime: bool = _NATIVE.prime

    def request(self, pyspy: str) -> NativeRequest:
        return NativeRequest(pyspy, self.rate, self.seconds, self.idle, self.prime)


@dataclass(frozen=True)
class FrameworkKnowledge:
    """What the processing stages know of the framework's own code (frameworks.yaml
    ``knowledge``; compiled in tracer.knowledge). Patterns are regular expressions."""

    core: str  # the tag of the framework's own native code ("torch core")
    core_symbols: str = ""  # its C++ namespaces, e.g. (?:at|c10|torch)::
    core_libraries: str = ""  # its shared objects' basenames
    core_modules: str = ""  # its compiled part's Python modules
    utility_ops: tuple[str, ...] = ()  # op names that only allocate, view or copy
    generated: tuple[str, ...] = ()  # prefixes of function names it numbers per process
    noise: tuple[str, ...] = ()  # frames that run wherever they are triggered
    incidental: tuple[str, ...] = ()  # its native frames that say where a thread was, not what ran
    not_kernels: tuple[str, ...] = ()  # its native helpers that are never a kernel (refcounts, accessors)
    same_op: tuple[str, ...] = ()  # op-name variants of one op, e.g. in-place: group 1 is the op
    kernels: tuple[str, ...] = ()  # its native frames that are one op's kernel (tensorflow::MklConvOp::Compute)
    compiling: tuple[str, ...] = ()  # words in its frames that mean compiling the model (dynamo, tf_function)
    gpu_kernels: GpuKernels | None = None  # its own GPU kernels in imported profiles


@dataclass(frozen=True)
class GpuKernels:
    """A framework's own GPU kernels, outside any vendor library (frameworks.yaml
    ``knowledge.gpu_kernels``): the kernel names that are its (``names``, a regular
    expression) and the library tag they get; one source compiled for several vendors
    gives one name, so the GPU's vendor picks the tag (``vendors``: vendor -> tag,
    ``tag`` for any other)."""

    names: str
    tag: str
    vendors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OpRule:
    """Which recorded ops of an imported profile are one call of ``primitive``
    (frameworks.yaml ``profile_ops``; tracer.importers.primitives says how each
    field is used). Names in the order the entry gives them."""

    primitive: str
    forward: tuple[str, ...]
    backward: tuple[str, ...] = ()
    top_only: tuple[str, ...] = ()  # the primitive only when no op is around them
    inside_other: tuple[str, ...] = ()  # ops that make the same inner op another primitive
    ranks: tuple[int, ...] = ()  # the input ranks it has, where the file records shapes


_RULE_FIELDS = ("forward", "backward", "top_only", "inside_other", "ranks")


@dataclass(frozen=True)
class EnvHeader:
    """The recording environment a Kineto file's header may hold
    (``metadata.system.<key>``, as harnesses that call the framework's environment
    collector write it): the keys copied into a trace, under ``prefix.`` in its
    ``gpu_software``, and the key that is the framework's version."""

    key: str
    keep: tuple[str, ...]
    prefix: str
    version: str = ""


@dataclass(frozen=True)
class TimelineDialect:
    """How a framework's operator timeline (chrome-trace JSON, format op-timeline)
    records an operator. ``category`` and ``phases`` mark its op events (``B``/``E``:
    begin and end pairs; ``X``: complete events with a duration), and finding one is
    how a file is told to be this framework's; ``devices`` matches the names of the
    processes that are a device (group ``device``, the context; optional group
    ``lane``, a GPU stream); ``backward`` is searched in the op's node name
    (``node_arg``), else its op name, to mark a backward op."""

    category: str
    phases: tuple[str, ...]
    devices: str
    backward: str
    op_arg: str = ""  # the args key that names the op ("": the event's own name)
    node_arg: str = ""  # the args key that names the graph node


@dataclass(frozen=True)
class ProfileVocab:
    """What a framework's files of one profile format call things (frameworks.yaml
    ``profile_vocab.FORMAT``), handed to the format's reader with its ``profile_ops``,
    so that the readers name no framework. Each reader uses the fields its format has."""

    #: what wrote the files, as messages and provenance name it ("torch.profiler")
    producer: str = ""
    #: what the files' records are called, where that is not the producer ("tensorflow_stats")
    records: str = ""
    #: the framework_version its traces say (the files record none)
    version: str = "unknown"
    #: the module run with the framework's own python to read a file only it can read
    #: (``python -m MODULE IN OUT``, exit status tracer.contract.Exit): a probe-side module
    reader: str = ""
    #: name endings it gives its files, dropped from a trace's variant ("mxnet-profile")
    suffixes: tuple[str, ...] = ()
    #: added to the provenance note of every trace from such a file
    note: str = ""
    env_header: EnvHeader | None = None
    timeline: TimelineDialect | None = None


@dataclass(frozen=True)
class Aarch64Spec:
    """The framework on an emulated aarch64 CPU (frameworks.yaml ``aarch64``): the
    requirements its own aarch64 wheels install (tracer.emulation builds the
    environment), and the CPU models a survey emulates."""

    requirements: tuple[str, ...]
    cpus: tuple[str, ...]
    #: the framework's variants a survey also runs there (the default always runs):
    #: a switch whose default differs on ARM (TensorFlow's oneDNN) must be run both ways
    variants: tuple[str, ...] = ()
    #: requirements published only as sdists: built on the host into pure-Python
    #: wheels, with the ``build`` requirements (tracer/emulation/wheels.py)
    sdists: tuple[str, ...] = ()
    build: tuple[str, ...] = ()
    #: why the framework cannot run on aarch64 at all (no aarch64 wheel): a survey
    #: marks each case on each CPU as a gap with this reason, never a silent absence
    unavailable: str = ""
    #: the primitives the default survey emulates, where not all (JAX: XLA compiles
    #: each pass under emulation); `dltrace survey --arm-all` runs every primitive
    primitives: tuple[str, ...] = ()


@dataclass(frozen=True)
class Framework:
    name: str
    import_name: str
    version: str
    probe: str
    install: tuple[InstallStep, ...]
    devices: dict[str, str]
    variants: dict[str, Variant]
    source_roots: tuple[str, ...]
    apis: tuple[str, ...]
    knowledge: FrameworkKnowledge
    #: profiler files recorded elsewhere (real GPUs) that every survey of it imports
    imported: tuple[Path, ...] = ()
    #: folders of dltrace's own GPU-path traces recorded on GPU machines, that every
    #: survey of it sets its CPU path against
    recorded: tuple[Path, ...] = ()
    #: the profiler file formats its files are imported from (contract.PROFILE_FORMATS),
    #: in the order they are tried: ``dltrace import --framework`` and ``imported``
    profiles: tuple[str, ...] = ()
    #: format -> which recorded ops are which primitive (frameworks.yaml ``profile_ops``)
    profile_ops: dict[str, tuple[OpRule, ...]] = field(default_factory=dict)
    #: format -> what its files call things (frameworks.yaml ``profile_vocab``)
    profile_vocab: dict[str, ProfileVocab] = field(default_factory=dict)
    aarch64: Aarch64Spec | None = None
    env: dict[str, str] = field(default_factory=dict)
    native: NativeSpec = field(default_factory=NativeSpec)
    #: the framework's GPU build (frameworks.yaml ``gpu_build``), installed in an
    #: environment of its own only to read what it registers for GPUs (never traced)
    gpu_build: tuple[InstallStep, ...] = ()
    #: the evidence class its probe's gpu_evidence derives (frameworks.yaml ``gpu_evidence``;
    #: "" when it derives none), and whether only the GPU build can derive it
    gpu_evidence: str = ""
    gpu_evidence_needs_build: bool = False


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)


class _Entry:
    """One framework's mapping, read field by field; every problem names the file,
    the entry and the field (``within``: the mapping's own field, for a nested one)."""

    def __init__(self, source: str, name: str, data: Any, within: str = ""):
        self.source, self.name, self.within = source, name, within
        if not isinstance(data, dict):
            raise self.error("", "must be a mapping")
        self.data = data

    def error(self, key: str, problem: str) -> RegistryError:
        key = f"{self.within}.{key}" if self.within and key else self.within or key
        where = f"field '{key}' " if key else ""
        return RegistryError(f"{self.source}: entry '{self.name}': {where}{problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is ...:
                full = f"{self.within}.{key}" if self.within else key
                raise RegistryError(f"{self.source}: entry '{self.name}': missing field '{full}'")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(key, f"must be a {want}, not {type(value).__name__}")
        return value

    def strings(self, key: str, value: Any) -> tuple[str, ...]:
        """A list of strings (a single string is not split into its characters)."""
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                  for v in value):
            raise self.error(key, f"must be a list of strings, not {type(value).__name__}")
        return tuple(map(str, value))

    def str_map(self, key: str, value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value) \
                or not all(isinstance(v, (str, int, float, bool)) for v in value.values()):
            raise self.error(key, "must map names to values")
        return {k: str(v) for k, v in value.items()}

    def pattern(self, key: str, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise self.error(key, f"is not a valid regular expression ({exc})") from None
        return value

    def knowledge(self) -> FrameworkKnowledge:
        """Optional: a framework without it is known by its name alone."""
        k = self.get("knowledge", dict, {})
        sub = _Entry(self.source, self.name, k)
        core = sub.get("core", str, f"{self.name} core")

        def text(f: str) -> str:
            return self.pattern(f"knowledge.{f}", sub.get(f, str, ""))

        def patterns(f: str) -> tuple[str, ...]:
            return tuple(self.pattern(f"knowledge.{f}", p)
                         for p in self.strings(f"knowledge.{f}", sub.get(f, list, [])))

        # the fields by name (mypy cannot type a ** of a dict of mixed fields); in the
        # order they were validated before, so that the first malformed one is the one reported
        return FrameworkKnowledge(
            core,
            core_symbols=text("core_symbols"), core_libraries=text("core_libraries"),
            core_modules=text("core_modules"),
            utility_ops=patterns("utility_ops"), generated=patterns("generated"), noise=patterns("noise"),
            incidental=patterns("incidental"), same_op=patterns("same_op"), kernels=patterns("kernels"),
            compiling=patterns("compiling"), gpu_kernels=self.gpu_kernels(sub), not_kernels=patterns("not_kernels"))

    def gpu_kernels(self, k: _Entry) -> GpuKernels | None:
        spec = k.get("gpu_kernels", dict, None)
        if spec is None:
            return None
        sub = _Entry(self.source, self.name, spec, "knowledge.gpu_kernels")
        names = self.strings("knowledge.gpu_kernels.names", sub.get("names", list))
        return GpuKernels(self.pattern("knowledge.gpu_kernels.names", "|".join(names)), sub.get("tag", str),
                          self.str_map("knowledge.gpu_kernels.vendors", sub.get("vendors", dict, {})))

    def aarch64(self) -> Aarch64Spec | None:
        spec = self.get("aarch64", dict, None)
        if spec is None:
            return None
        sub = _Entry(self.source, self.name, spec)
        unavailable = sub.get("unavailable", str, "")
        cpus = self.strings("aarch64.cpus", sub.get("cpus", list, []))
        if unavailable:
            return Aarch64Spec((), cpus, unavailable=unavailable)
        requirements = _requirements(self, "aarch64.requirements", sub.get("requirements", list))
        if not requirements:
            raise self.error("aarch64.requirements", "must be a non-empty list")
        variants = self.strings("aarch64.variants", sub.get("variants", list, []))
        unknown = [v for v in variants if v not in self.get("variants", dict, {})]
        if unknown:
            raise self.error("aarch64.variants", f"names no variant of the framework: {', '.join(unknown)}")
        primitives = self.strings("aarch64.primitives", sub.get("primitives", list, []))
        unknown = [p for p in primitives if p not in PRIMITIVES]
        if unknown:
            raise self.error("aarch64.primitives", f"names no primitive: {', '.join(unknown)}")
        return Aarch64Spec(requirements, cpus, variants, primitives=primitives,
                           sdists=_requirements(self, "aarch64.sdists", sub.get("sdists", list, [])),
                           build=_requirements(self, "aarch64.build", sub.get("build", list, [])))

    def dotted(self, key: str) -> str:
        value: str = self.get(key, str)
        if not _DOTTED.fullmatch(value):
            raise self.error(key, f"must be a dotted module name, not {value[:60]!r}")
        return value


def _framework(source: str, name: str, data: Any) -> Framework:
    if not _NAME.fullmatch(name):  # fullmatch: "evil\n" is no name ($ matches before a final newline)
        raise RegistryError(f"{source}: framework name {name[:60]!r} must be a short name of letters, digits, - and _")
    e = _Entry(source, name, data)
    steps = []
    for i, step in enumerate(e.get("install", list)):
        where = f"install[{i}]"
        if not isinstance(step, dict) or not isinstance(step.get("requirements"), list) or not step["requirements"]:
            raise e.error(f"{where}.requirements", "must be a non-empty list")
        steps.append(_pip_step(e, where, step))
    devices = e.str_map("devices", e.get("devices", dict))
    for dev in devices:
        if dev not in DEVICES:
            raise e.error("devices", f"has unknown device '{dev}' (known: {', '.join(DEVICES)})")
    if "cpu" not in devices:
        raise e.error("devices", "must include cpu")
    variants = {}
    for vname, v in e.get("variants", dict, {}).items():
        if not isinstance(v, dict) or not (v.get("env") or v.get("set")):
            raise e.error(f"variants.{vname}", "needs 'env' or 'set'")
        sets = v.get("set") or {}
        if not isinstance(sets, dict) or not all(isinstance(k, str) and _DOTTED.fullmatch(k) for k in sets):
            raise e.error(f"variants.{vname}.set", "must map dotted attribute names to values")
        switches = str(v.get("switches", "library"))
        if switches not in VARIANT_SWITCHES:
            raise e.error(f"variants.{vname}.switches", f"must be one of {', '.join(VARIANT_SWITCHES)}")
        variants[str(vname)] = Variant(str(vname), str(v.get("description", "")),
                                       e.str_map(f"variants.{vname}.env", v.get("env") or {}), dict(sets), switches)
    apis = e.strings("apis", e.get("apis", list))
    for api in apis:
        if api not in APIS:
            raise e.error("apis", f"has unknown API '{api}' (known: {', '.join(APIS)})")
    nat = e.get("native", dict, {})
    defaults = NativeSpec()
    try:
        raw_rate = nat.get("rate", defaults.rate)
        if isinstance(raw_rate, float) and not math.isfinite(raw_rate):
            raise ValueError(raw_rate)
        rate, seconds = int(raw_rate), float(nat.get("seconds", defaults.seconds))
    except (TypeError, ValueError, OverflowError):
        raise e.error("native", "needs a numeric rate and seconds, finite") from None
    if not (0 < rate <= 100_000 and 0 < seconds < 3600):
        raise e.error("native", "needs a positive rate and seconds")
    native = NativeSpec(rate, seconds, bool(nat.get("idle", defaults.idle)),
                        e.str_map("native.env", nat.get("env") or {}), bool(nat.get("prime", defaults.prime)))
    roots = e.strings("source_roots", e.get("source_roots", list))
    if not roots:
        raise e.error("source_roots", "must not be empty")
    return Framework(
        name=name,
        import_name=e.dotted("import"),
        version=str(e.get("version", (str, int, float))),
        probe=e.dotted("probe"),
        install=tuple(steps),
        devices=devices,
        variants=variants,
        source_roots=roots,
        apis=apis,
        knowledge=e.knowledge(),
        imported=tuple(PACKAGE / p for p in e.strings("imported", e.get("imported", list, []))),
        recorded=tuple(PACKAGE / p for p in e.strings("recorded", e.get("recorded", list, []))),
        profiles=(profiles := _profiles(e)),  # validated in field order, then read by profile_ops
        profile_ops=_profile_ops(e, profiles),
        profile_vocab=_profile_vocab(e, profiles),
        aarch64=e.aarch64(),
        env=e.str_map("env", e.get("env", dict, {})),
        native=native,
        gpu_build=_steps(e, "gpu_build", e.get("gpu_build", list, [])),
        **_gpu_evidence(e),
    )


def _profiles(e: _Entry) -> tuple[str, ...]:
    formats = e.strings("profiles", e.get("profiles", list, []))
    unknown = [f for f in formats if f not in PROFILE_FORMATS]
    if unknown:
        raise e.error("profiles", f"has unknown format '{unknown[0]}' (choose from: {', '.join(PROFILE_FORMATS)})")
    if e.data.get("imported") and not formats:
        raise e.error("imported", "needs 'profiles': the formats its files are read as")
    return formats


def _profile_ops(e: _Entry, formats: tuple[str, ...]) -> dict[str, tuple[OpRule, ...]]:
    out = {}
    for fmt, rules in e.get("profile_ops", dict, {}).items():
        where = f"profile_ops.{fmt}"
        if fmt not in formats:
            raise e.error(where, "is not one of its profiles")
        if not isinstance(rules, dict):
            raise e.error(where, "must map primitives to their ops")
        out[fmt] = tuple(_rule(e, f"{where}.{name}", name, spec) for name, spec in rules.items())
    return out


_VOCAB_TEXT = ("producer", "records", "version", "note")


def _profile_vocab(e: _Entry, formats: tuple[str, ...]) -> dict[str, ProfileVocab]:
    out = {}
    for fmt, spec in e.get("profile_vocab", dict, {}).items():
        where = f"profile_vocab.{fmt}"
        if fmt not in formats:
            raise e.error(where, "is not one of its profiles")
        sub = _Entry(e.source, e.name, spec, where)
        known = (*_VOCAB_TEXT, "reader", "suffixes", "env_header", "timeline")
        unknown = [k for k in sub.data if k not in known]
        if unknown:
            raise e.error(where, f"has unknown field '{unknown[0]}' (choose from: {', '.join(known)})")
        text = {k: str(sub.get(k, (str, int, float), "")) for k in _VOCAB_TEXT}
        reader = sub.get("reader", str, "")
        if reader and not _DOTTED.fullmatch(reader):
            raise e.error(f"{where}.reader", f"must be a dotted module name, not {reader[:60]!r}")
        out[str(fmt)] = ProfileVocab(
            **{**text, "version": text["version"] or "unknown"}, reader=reader,
            suffixes=e.strings(f"{where}.suffixes", sub.get("suffixes", list, [])),
            env_header=_env_header(e, f"{where}.env_header", sub.get("env_header", dict, None)),
            timeline=_timeline(e, f"{where}.timeline", sub.get("timeline", dict, None)))
    return out


def _env_header(e: _Entry, where: str, spec: dict[str, Any] | None) -> EnvHeader | None:
    if spec is None:
        return None
    sub = _Entry(e.source, e.name, spec, where)
    return EnvHeader(sub.get("key", str), e.strings(f"{where}.keep", sub.get("keep", list)), sub.get("prefix", str),
                     sub.get("version", str, ""))


def _timeline(e: _Entry, where: str, spec: dict[str, Any] | None) -> TimelineDialect | None:
    if spec is None:
        return None
    sub = _Entry(e.source, e.name, spec, where)
    phases = e.strings(f"{where}.phases", sub.get("phases", list))
    if phases not in (("B", "E"), ("X",)):
        raise e.error(f"{where}.phases", "must be [B, E] (begin and end pairs) or [X] (complete events)")
    devices = e.pattern(f"{where}.devices", sub.get("devices", str))
    if "device" not in re.compile(devices).groupindex:
        raise e.error(f"{where}.devices", "needs a group named 'device'")
    return TimelineDialect(sub.get("category", str), phases, devices,
                           e.pattern(f"{where}.backward", sub.get("backward", str)),
                           sub.get("op_arg", str, ""), sub.get("node_arg", str, ""))


def _rule(e: _Entry, where: str, primitive: Any, spec: Any) -> OpRule:
    if primitive not in PRIMITIVES:
        raise e.error(where, f"is not a primitive (choose from: {', '.join(PRIMITIVES)})")
    if not isinstance(spec, dict) or not spec.get("forward"):
        raise e.error(where, "needs forward: the op names a call enters first")
    unknown = [k for k in spec if k not in _RULE_FIELDS]
    if unknown:
        raise e.error(where, f"has unknown field '{unknown[0]}' (choose from: {', '.join(_RULE_FIELDS)})")
    ranks = spec.get("ranks") or []
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and 0 < r < 9
                                              for r in ranks):
        raise e.error(f"{where}.ranks", "must be a list of input ranks (1 to 8)")
    names = {k: e.strings(f"{where}.{k}", spec.get(k) or []) for k in _RULE_FIELDS[:-1]}
    return OpRule(str(primitive), names["forward"], names["backward"], names["top_only"], names["inside_other"],
                  tuple(ranks))


def _gpu_evidence(e: _Entry) -> dict[str, Any]:
    spec = e.get("gpu_evidence", dict, {})
    if not spec:
        return {}
    sub = _Entry(e.source, e.name, spec)
    evidence = sub.get("evidence", str)
    if evidence not in DERIVED_EVIDENCE:
        raise e.error("gpu_evidence.evidence", f"must be one of {', '.join(DERIVED_EVIDENCE)}")
    return {"gpu_evidence": evidence, "gpu_evidence_needs_build": bool(sub.get("needs_build", bool, False))}


def _steps(e: _Entry, key: str, steps: list[Any]) -> tuple[InstallStep, ...]:
    out = []
    for i, step in enumerate(steps):
        where = f"{key}[{i}]"
        if not isinstance(step, dict) or not isinstance(step.get("requirements"), list) or not step["requirements"]:
            raise e.error(f"{where}.requirements", "must be a non-empty list")
        out.append(_pip_step(e, where, step))
    return tuple(out)


def _pip_step(e: _Entry, where: str, step: dict[str, Any]) -> InstallStep:
    return InstallStep(_requirements(e, f"{where}.requirements", step["requirements"]),
                       _options(e, f"{where}.options", step.get("options") or []))


def _requirements(e: _Entry, where: str, value: Any) -> tuple[str, ...]:
    """Requirement specifiers only (a name, extras, versions, markers): a pip option
    (``--index-url``, ``-e DIR``), a path or a URL in a registry would make
    `dltrace env setup` run code from wherever it points. `dltrace --trust-registry`
    allows them, for a registry the user wrote."""
    items = e.strings(where, value)
    if trusted():
        return items
    from packaging.requirements import InvalidRequirement, Requirement

    for item in items:
        try:
            url = Requirement(item).url
        except InvalidRequirement:
            url = None
            why = "is not a requirement specifier"
        else:
            why = "" if url is None else "names a URL"
        if why:
            raise e.error(where, f"item {item[:60]!r} {why}: only package names with versions are installed "
                                 "(pip options, paths and URLs run code from elsewhere; "
                                 "`dltrace --trust-registry` allows them)")
    return items


def _options(e: _Entry, where: str, value: Any) -> tuple[str, ...]:
    items = e.strings(where, value)
    unsafe = [o for o in items if o not in SAFE_OPTIONS]
    if unsafe and not trusted():
        raise e.error(where, f"has pip option {unsafe[0][:60]!r}, not one of {', '.join(sorted(SAFE_OPTIONS))} "
                             "(`dltrace --trust-registry` allows any)")
    return items




def gpu_build_env(fw: Framework) -> Framework | None:
    """``fw`` as its GPU build's environment (name ``NAME-gpu-build``, the
    ``gpu_build`` install steps), which `dltrace env setup NAME-gpu-build` builds and
    `dltrace derive` reads; None when the registry declares no GPU build."""
    import dataclasses

    if not fw.gpu_build:
        return None
    return dataclasses.replace(fw, name=fw.name + GPU_BUILD, install=fw.gpu_build, aarch64=None, imported=(),
                               recorded=())


def load(path: str | os.PathLike[str] | Traversable | None = None) -> dict[str, Framework]:
    """The registry at ``path`` (default: ``DLTRACE_REGISTRY``, else the package's).
    The file is read on every call, so a changed file is seen; what one text parses to
    is kept, since several stages of one command ask for it (50 ms a parse)."""

    path = registry_path() if path is None else Path(path) if isinstance(path, (str, os.PathLike)) else path
    return dict(_parse(path.name, read_text(path), trusted()))


def read_text(path: Path | Traversable) -> str:
    """A data file's text. A file named by the user (DLTRACE_REGISTRY) is read as traces
    are: only a regular file (a named pipe would block, /dev/zero never end), at most
    MAX_BYTES of it; a problem is a one-line RegistryError."""
    try:
        return (read_regular(path, MAX_BYTES) if isinstance(path, Path) else path.read_bytes()).decode()
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror}") from None
    except (NotRegular, TooLarge) as exc:
        raise RegistryError(f"cannot read {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{path.name} is not valid YAML: {exc}".splitlines()[0]) from None


def _expanded_nodes(text: str) -> int:
    """How many YAML nodes ``text`` holds once every alias is followed (each node
    counted once per place it appears), without expanding anything."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if not done:
            if id(node) in visiting:  # an alias inside its own anchor: endless once expanded
                return MAX_NODES + 1
            visiting.add(id(node))
        kids: list[yaml.Node] = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                                 else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            sizes[id(node)] = min(1 + sum(sizes.get(id(k), 0) for k in kids), MAX_NODES + 1)
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def safe_yaml(file_name: str, text: str) -> Any:
    """``text`` (the file ``file_name``) through yaml.safe_load, refused with a one-line
    RegistryError when it is not YAML or expands to more than MAX_NODES nodes."""
    try:
        if _expanded_nodes(text) > MAX_NODES:
            raise RegistryError(f"{file_name}: expands to more than {MAX_NODES:,} YAML nodes once its aliases are "
                                "followed (an alias bomb?)")
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise RegistryError(f"{file_name} is not valid YAML: {exc}".splitlines()[0]) from None


@functools.lru_cache(maxsize=8)
def _parse(file_name: str, text: str, trust: bool = False) -> dict[str, Framework]:
    """``text`` (the registry file ``file_name``) as Framework entries; the caller copies
    the dict it returns, and the entries are frozen. ``trust``: what --trust-registry
    allows is part of what a text parses to, so it is part of the cache's key."""
    doc = safe_yaml(file_name, text)
    if not isinstance(doc, dict) or not isinstance(doc.get("frameworks"), dict):
        raise RegistryError(f"{file_name}: top level must be a mapping with a 'frameworks' mapping")
    return {str(name): _framework(file_name, str(name), data) for name, data in doc["frameworks"].items()}


def parse_shape(text: str) -> tuple[int, ...]:
    """'8x64x112x112' -> (8, 64, 112, 112)."""
    try:
        shape = tuple(int(p) for p in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise ValueError(f"shape '{text[:60]}' is not of the form 8x64x112x112") from None
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"shape '{text[:60]}' must have positive sizes")
    if len(shape) > MAX_RANK:
        raise ValueError(f"shape has {len(shape)} dimensions; at most {MAX_RANK}")
    return shape


#: The most dimensions an input shape may have (the primitives take 2 or 4; activations any, up to this).
MAX_RANK = 8
