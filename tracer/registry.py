"""The framework registry (frameworks.yaml): loaded and validated, each mapping read
into its dataclass (tracer.registry_entries) by the fields' types, plus a table of the
checks a type cannot make, so that a malformed entry is reported by entry and field."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from dataclasses import MISSING, fields, is_dataclass
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar, Union, get_args, get_origin, get_type_hints

from tracer.contract import APIS, DEVICES, MODELS, PRIMITIVES, PROFILE_FORMATS
from tracer.data_file import RegistryError, read_text, safe_yaml
from tracer.evidence_classes import DERIVED_EVIDENCE
from tracer.paths import PACKAGE
from tracer.machine import ISA_FLAGS
from tracer.registry_entries import (Aarch64Spec, DefaultOn, Example, Framework, FrameworkKnowledge, GpuEvidenceSpec,
                                     GpuKernels, InstallStep, NativeSpec, OpRule, ProfileVocab, TimelineDialect,
                                     Variant, VARIANT_SWITCHES)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)


# ----------------------------------------------------------------------------- validation
# Every mapping of the file is read into its dataclass by the fields' types (:func:`_read`);
# what a type cannot say (a regular expression, a known device, a requirement specifier)
# is a check of that field (:data:`_CHECKS`). Every problem names the file, entry and field.


class _Entry:
    """One framework's mapping (``data``), whose problems name the file and the entry."""

    def __init__(self, source: str, name: str, data: Any):
        self.source, self.name, self.data = source, name, data

    def error(self, key: str, problem: str) -> RegistryError:
        where = f"field '{key}' " if key else ""
        return RegistryError(f"{self.source}: entry '{self.name}': {where}{problem}")

    def strings(self, key: str, value: Any) -> tuple[str, ...]:
        """A list of strings (a single string is not split into its characters)."""
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                  for v in value):
            raise self.error(key, f"must be a list of strings, not {type(value).__name__}")
        return tuple(map(str, value))

    def pattern(self, key: str, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise self.error(key, f"is not a valid regular expression ({exc})") from None
        return value


_T = TypeVar("_T", bound="DataclassInstance")
#: A field's check: (the entry, the field's full key, the file's value) -> the field's value.
Check = Callable[[_Entry, str, Any], Any]


def _read(cls: type[_T], e: _Entry, data: Any, where: str, closed: bool = False,
          fixed: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None) -> _T:
    """``data`` as a ``cls``: each field from the key of its name (:data:`_KEYS` where the
    file's differs), by its check (:data:`_CHECKS`) or else its type; a field with no
    default must be there. ``fixed``: fields known from elsewhere (a name that is the
    mapping's key); ``defaults``: defaults the dataclass cannot hold (a name's); ``closed``:
    a key that names no field is an error."""
    if not isinstance(data, dict):
        raise e.error(where, f"must be a dict, not {type(data).__name__}")
    fixed = fixed or {}
    keys = {_KEYS.get((cls, f.name), f.name): f for f in fields(cls) if f.name not in fixed}
    unknown = [k for k in data if k not in keys] if closed else []
    if unknown:
        raise e.error(where, f"has unknown field '{unknown[0]}' (choose from: {', '.join(keys)})")
    hints, out = get_type_hints(cls), {**(defaults or {}), **fixed}
    for key, f in keys.items():
        value, full = data.get(key), f"{where}.{key}" if where else key
        if value is None:
            if f.name not in out and f.default is MISSING and f.default_factory is MISSING:
                raise RegistryError(f"{e.source}: entry '{e.name}': missing field '{full}'")
            continue
        check = _CHECKS.get((cls, f.name))
        out[f.name] = check(e, full, value) if check else _typed(e, full, hints[f.name], value)
    return cls(**out)


def _typed(e: _Entry, key: str, hint: Any, value: Any) -> Any:
    """``value`` as a field of type ``hint``: str, bool, a tuple of strings or of
    dataclasses, a dict of strings, a dataclass or an optional one."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):  # X | None: the file gives X, or nothing (a default)
        return _typed(e, key, next(a for a in args if a is not type(None)), value)
    if is_dataclass(hint):
        return _read(hint, e, value, key)  # type: ignore[arg-type]
    want = origin or hint
    if not isinstance(value, {tuple: list}.get(want, want)) or (isinstance(value, bool) and want is not bool):
        raise e.error(key, f"must be a {'list' if want is tuple else want.__name__}, not {type(value).__name__}")
    if origin is tuple:
        return (e.strings(key, value) if args[0] is str
                else tuple(_typed(e, f"{key}[{i}]", args[0], v) for i, v in enumerate(value)))
    if origin is dict and args[1] is str:
        if not all(isinstance(k, str) for k in value) or not all(isinstance(v, (str, int, float, bool))
                                                               for v in value.values()):
            raise e.error(key, "must map names to values")
        return {k: str(v) for k, v in value.items()}
    return value


def _must(test: Callable[[Any], bool], problem: str, then: Check | None = None) -> Check:
    """A check: ``value`` passes ``test`` (else ``problem``), then is converted by ``then``."""
    def check(e: _Entry, key: str, value: Any) -> Any:
        if not test(value):
            raise e.error(key, problem.format(value=repr(str(value)[:60]), kind=type(value).__name__))
        return then(e, key, value) if then else value
    return check


def _known(what: str, choices: Callable[[_Entry], Iterable[Any]], one: bool = False, keys: bool = False,
           problem: str = "has unknown {what} '{first}' (choose from: {known})") -> Check:
    """A check: a list of names (``one``: a name; ``keys``: a mapping's keys), each one of ``choices``."""
    def check(e: _Entry, key: str, value: Any) -> Any:
        names = [value] if one else value if keys else e.strings(key, value)
        known = [str(c) for c in choices(e)]
        unknown = [str(n)[:60] for n in names if n not in known]
        if unknown:
            raise e.error(key, problem.format(what=what, first=unknown[0], all=", ".join(unknown),
                                              known=", ".join(known)))
        return value if one or keys else names
    return check


def _pattern(e: _Entry, key: str, value: Any) -> str:
    return e.pattern(key, _typed(e, key, str, value))


def _typed_as(hint: Any, then: Check | None = None) -> Check:
    return lambda e, key, value: (then or (lambda _e, _k, v: v))(e, key, _typed(e, key, hint, value))


_is_text = _must(lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool),
                 "must be a str or int or float, not {kind}", lambda e, key, value: str(value))
_dotted = _must(lambda v: isinstance(v, str) and bool(_DOTTED.fullmatch(v)),
                "must be a dotted module name, not {value}")
_strings: Check = lambda e, key, value: e.strings(key, value)  # noqa: E731
_patterns: Check = lambda e, key, value: tuple(e.pattern(key, p) for p in e.strings(key, value))  # noqa: E731


def _non_empty(check: Check, listed: bool = False) -> Check:
    """``check``, and then not empty; ``listed``: a value that is no list is told the same."""
    def non_empty(e: _Entry, key: str, value: Any) -> Any:
        items = check(e, key, value) if isinstance(value, list) or not listed else ()
        if not items:
            raise e.error(key, "must be a non-empty list")
        return items
    return non_empty


def _variants(e: _Entry, key: str, value: Any) -> dict[str, Variant]:
    out = {}
    for name, v in _typed(e, key, dict[str, Any], value).items():
        if not isinstance(v, dict) or not (v.get("env") or v.get("set")):
            raise e.error(f"{key}.{name}", "needs 'env' or 'set'")
        out[str(name)] = _read(Variant, e, v, f"{key}.{name}", fixed={"name": str(name)})
    return out


def _native(e: _Entry, key: str, value: Any) -> NativeSpec:
    nat, defaults = _typed(e, key, dict[str, Any], value), NativeSpec()
    try:
        raw_rate = nat.get("rate", defaults.rate)
        if isinstance(raw_rate, float) and not math.isfinite(raw_rate):
            raise ValueError(raw_rate)
        rate, seconds = int(raw_rate), float(nat.get("seconds", defaults.seconds))
    except (TypeError, ValueError, OverflowError):
        raise e.error(key, "needs a numeric rate and seconds, finite") from None
    if not (0 < rate <= 100_000 and 0 < seconds < 3600):
        raise e.error(key, "needs a positive rate and seconds")
    return NativeSpec(rate, seconds, bool(nat.get("idle", defaults.idle)),
                      _typed(e, f"{key}.env", dict[str, str], nat.get("env") or {}),
                      bool(nat.get("prime", defaults.prime)))


def _profile_ops(e: _Entry, key: str, value: Any) -> dict[str, tuple[OpRule, ...]]:
    out = {}
    for fmt, rules in _formats(e, key, value).items():
        if not isinstance(rules, dict):
            raise e.error(f"{key}.{fmt}", "must map primitives to their ops")
        for name, spec in rules.items():
            if name not in PRIMITIVES:
                raise e.error(f"{key}.{fmt}.{name}", f"is not a primitive (choose from: {', '.join(PRIMITIVES)})")
            if not isinstance(spec, dict) or not spec.get("forward"):
                raise e.error(f"{key}.{fmt}.{name}", "needs forward: the op names a call enters first")
        out[str(fmt)] = tuple(_read(OpRule, e, spec, f"{key}.{fmt}.{name}", closed=True,
                                    fixed={"primitive": str(name)}) for name, spec in rules.items())
    return out


def _formats(e: _Entry, key: str, value: Any) -> dict[str, Any]:
    """A mapping of profile formats, each one the entry's ``profiles`` declare."""
    for fmt in _typed(e, key, dict[str, Any], value):
        if fmt not in (e.data.get("profiles") or []):
            raise e.error(f"{key}.{fmt}", "is not one of its profiles")
    return dict(value)


def _aarch64(e: _Entry, key: str, value: Any) -> Aarch64Spec:
    spec = _typed(e, key, dict[str, Any], value)
    if spec.get("unavailable"):  # nothing to install: its cases are gaps with this reason
        return _read(Aarch64Spec, e, {k: spec.get(k) for k in ("cpus", "unavailable")}, key,
                     fixed={"requirements": ()}, defaults={"cpus": ()})
    return _read(Aarch64Spec, e, spec, key, defaults={"cpus": ()})


def _gpu_evidence(e: _Entry, value: Any) -> dict[str, Any]:
    """The entry's ``gpu_evidence`` mapping, as the two fields of Framework it sets."""
    if value is None or value == {}:
        return {}
    spec = _read(GpuEvidenceSpec, e, value, "gpu_evidence")
    return {"gpu_evidence": spec.evidence, "gpu_evidence_needs_build": spec.needs_build}


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


def _named_mapping(e: _Entry, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and _NAME.fullmatch(k) for k in value):
        raise e.error(key, "must map short names (letters, digits, - and _) to entries")
    return value


def _extras(e: _Entry, key: str, value: Any) -> dict[str, InstallStep]:
    return {k: _read(InstallStep, e, v, f"{key}.{k}", closed=True) for k, v in _named_mapping(e, key, value).items()}


def _examples(e: _Entry, key: str, value: Any) -> dict[str, Example]:
    """Each example's file is a Python file under the project's examples/ folder, and the
    extras it names are the entry's own."""
    declared = e.data.get("extras") if isinstance(e.data.get("extras"), dict) else {}
    out = {}
    for name, spec in _named_mapping(e, key, value).items():
        ex = _read(Example, e, spec, f"{key}.{name}", closed=True)
        parts = Path(ex.file).parts
        if Path(ex.file).is_absolute() or ".." in parts or parts[:1] != ("examples",) or not ex.file.endswith(".py"):
            raise e.error(f"{key}.{name}.file", "must be a Python file under examples/ (a relative path)")
        unknown = [x for x in ex.extras if x not in declared]
        if unknown:
            raise e.error(f"{key}.{name}.extras", f"names extra '{unknown[0][:60]}', which the entry's 'extras' "
                                                  "does not declare")
        out[name] = ex
    return out


def _framework(source: str, name: str, data: Any) -> Framework:
    if not _NAME.fullmatch(name):  # fullmatch: "evil\n" is no name ($ matches before a final newline)
        raise RegistryError(f"{source}: framework name {name[:60]!r} must be a short name of letters, digits, - and _")
    e = _Entry(source, name, data)
    if not isinstance(data, dict):
        raise e.error("", "must be a mapping")
    if data.get("imported") and not data.get("profiles"):
        raise e.error("imported", "needs 'profiles': the formats its files are read as")
    return _read(Framework, e, {k: v for k, v in data.items() if k != "gpu_evidence"}, "",
                 fixed={"name": name, **_gpu_evidence(e, data.get("gpu_evidence"))},
                 defaults={"variants": {}, "knowledge": FrameworkKnowledge(f"{name} core")})


#: The file's key of a field, where it is not the field's name.
_KEYS: dict[tuple[type, str], str] = {(Framework, "import_name"): "import"}
_KNOWLEDGE_PATTERNS = ("core_symbols", "core_libraries", "core_modules")
#: What a field's type cannot say: each checks (and converts) the file's value.
_CHECKS: dict[tuple[type, str], Check] = {
    (Framework, "import_name"): _dotted, (Framework, "probe"): _dotted, (Framework, "version"): _is_text,
    (Framework, "builds"): lambda e, key, value: tuple(_dotted(e, f"{key}[{i}]", v)
                                                       for i, v in enumerate(e.strings(key, value))),
    (Framework, "devices"): _typed_as(dict[str, str], _must(lambda d: "cpu" in d, "must include cpu",
                                                             _known("device", lambda e: DEVICES, keys=True))),
    (Framework, "variants"): _variants, (Framework, "source_roots"): _non_empty(_strings),
    (Framework, "apis"): _known("API", lambda e: APIS), (Framework, "models"): _known("model", lambda e: MODELS),
    (Framework, "knowledge"): lambda e, key, value: _read(FrameworkKnowledge, e, value, key,
                                                          defaults={"core": f"{e.name} core"}),
    (Framework, "native"): _native, (Framework, "aarch64"): _aarch64,
    (Framework, "imported"): lambda e, key, value: tuple(PACKAGE / p for p in e.strings(key, value)),
    (Framework, "recorded"): lambda e, key, value: tuple(PACKAGE / p for p in e.strings(key, value)),
    (Framework, "profiles"): _known("format", lambda e: PROFILE_FORMATS), (Framework, "profile_ops"): _profile_ops,
    (Framework, "extras"): _extras, (Framework, "examples"): _examples, (Example, "about"): _is_text,
    (Framework, "profile_vocab"): lambda e, key, value: {
        str(fmt): _read(ProfileVocab, e, spec, f"{key}.{fmt}", closed=True)
        for fmt, spec in _formats(e, key, value).items()},
    (InstallStep, "requirements"): _non_empty(_requirements, listed=True), (InstallStep, "options"): _options,
    (Variant, "set"): _must(lambda v: isinstance(v, dict) and all(isinstance(k, str) and _DOTTED.fullmatch(k)
                                                                  for k in v),
                            "must map dotted attribute names to values"),
    (Variant, "switches"): _known("switch", lambda e: VARIANT_SWITCHES, one=True), (Variant, "description"): _is_text,
    (Variant, "default_on"): lambda e, key, value: _read(DefaultOn, e, value, key, closed=True),
    (DefaultOn, "isa"): _non_empty(_known("ISA feature flag", lambda e: ISA_FLAGS)),
    (DefaultOn, "recorded_as"): _must(lambda v: isinstance(v, str) and v.isidentifier(),
                                      "must name a trace meta field (an identifier), not {value}"),
    **{(FrameworkKnowledge, f): _pattern for f in _KNOWLEDGE_PATTERNS},
    **{(FrameworkKnowledge, f.name): _patterns for f in fields(FrameworkKnowledge)
       if f.name not in ("core", "gpu_kernels", "compiled_ops", *_KNOWLEDGE_PATTERNS)},
    (FrameworkKnowledge, "compiled_ops"): _typed_as(dict[str, str]),
    (GpuKernels, "names"): lambda e, key, value: e.pattern(key, "|".join(e.strings(key, value))),
    (OpRule, "ranks"): _must(lambda v: isinstance(v, list) and all(
        isinstance(r, int) and not isinstance(r, bool) and 0 < r < 9 for r in v),
        "must be a list of input ranks (1 to 8)", lambda e, key, value: tuple(value)),
    **{(ProfileVocab, f): _is_text for f in ("producer", "records", "note")},
    (ProfileVocab, "reader"): lambda e, key, value: value if value == "" else _dotted(e, key, value),
    (ProfileVocab, "version"): lambda e, key, value: _is_text(e, key, value) or "unknown",
    (TimelineDialect, "phases"): _must(lambda v: v in (["B", "E"], ["X"]),
                                       "must be [B, E] (begin and end pairs) or [X] (complete events)", _strings),
    (TimelineDialect, "devices"): lambda e, key, value: _must(
        lambda v: "device" in re.compile(v).groupindex, "needs a group named 'device'")(
        e, key, _pattern(e, key, value)),
    (TimelineDialect, "backward"): _pattern,
    (Aarch64Spec, "requirements"): _non_empty(_requirements), (Aarch64Spec, "sdists"): _requirements,
    (Aarch64Spec, "build"): _requirements,
    (Aarch64Spec, "primitives"): _known("primitive", lambda e: PRIMITIVES, problem="names no {what}: {all}"),
    (Aarch64Spec, "variants"): _known("variant of the framework", lambda e: e.data.get("variants") or {},
                                      problem="names no {what}: {all}"),
    (Aarch64Spec, "skip_examples"): _known("example of the framework", lambda e: e.data.get("examples") or {},
                                           problem="names no {what}: {all}"),
    (Aarch64Spec, "warmup"): _must(lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10,
                                   "must be a number of steps from 0 to 10"),
    (GpuEvidenceSpec, "evidence"): _known("evidence class", lambda e: DERIVED_EVIDENCE, one=True),
}


def load(path: str | os.PathLike[str] | Traversable | None = None) -> dict[str, Framework]:
    """The registry at ``path`` (default: ``DLTRACE_REGISTRY``, else the package's).
    The file is read on every call, so a changed file is seen; what one text parses to
    is kept, since several stages of one command ask for it (50 ms a parse)."""

    path = registry_path() if path is None else Path(path) if isinstance(path, (str, os.PathLike)) else path
    return dict(_parse(path.name, read_text(path), trusted()))


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
