"""The framework registry (frameworks.yaml): loaded with yaml.safe_load and
validated, so that a malformed entry is reported by entry and field."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The primitives every probe implements, with their default (small) input shapes.
#: Layout is logical NCHW; a probe converts where its framework wants another.
PRIMITIVES: dict[str, tuple[int, ...]] = {
    "dense": (4, 16),
    "conv2d": (2, 3, 8, 8),
    "relu": (4, 16),
    "sigmoid": (4, 16),
    "tanh": (4, 16),
    "softmax": (4, 16),
    "maxpool2d": (2, 3, 8, 8),
    "avgpool2d": (2, 3, 8, 8),
    "batchnorm": (2, 3, 8, 8),
}
#: Where a survey samples native stacks: at the default shapes the kernels are a few
#: percent of a step (TensorFlow's conv kernel: 3 of 85 samples), the framework's
#: dispatch is the rest; at these the kernel is a visible share everywhere.
KERNEL_SHAPES: dict[str, tuple[int, ...]] = {
    "dense": (256, 1024),
    "conv2d": (8, 16, 64, 64),
    "relu": (64, 4096),
    "sigmoid": (64, 4096),
    "tanh": (64, 4096),
    "softmax": (64, 4096),
    "maxpool2d": (8, 16, 64, 64),
    "avgpool2d": (8, 16, 64, 64),
    "batchnorm": (8, 16, 64, 64),
}
PASSES = ("forward", "backward")
#: Trace layers: Python frames, the framework's own op records, sampled native stacks.
LAYERS = ("python", "op", "native")
APIS = ("functional", "layer")
DEVICES = ("cpu", "gpu")

ROOT = Path(__file__).resolve().parent.parent


def registry_path() -> Path:
    """frameworks.yaml beside the package, or the file $DLTRACE_REGISTRY names."""
    return Path(os.environ.get("DLTRACE_REGISTRY") or ROOT / "frameworks.yaml")


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


@dataclass(frozen=True)
class NativeSpec:
    """How the native layer is sampled for a framework (frameworks.yaml ``native``).

    ``env`` is set for the whole probe process when native stacks are captured
    (it must be set before the import): switches that move the kernels onto the
    Python thread py-spy can see (MXNet's NaiveEngine, a one-thread intra-op pool).
    ``rate`` (samples/s) and ``seconds`` (per pass) bound the cost; ``idle`` keeps
    samples of a thread that waits; ``prime`` runs the loops unattributed first, until
    py-spy has loaded the symbols they reach."""

    rate: int = 100
    seconds: float = 1.0
    idle: bool = False
    env: dict[str, str] = field(default_factory=dict)
    prime: bool = True


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
    env: dict[str, str] = field(default_factory=dict)
    native: NativeSpec = field(default_factory=NativeSpec)


def _need(entry: str, data: dict, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise RegistryError(f"frameworks.yaml: entry '{entry}': missing field '{key}'")
        return default
    value = data[key]
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RegistryError(
            f"frameworks.yaml: entry '{entry}': field '{key}' must be a {want}, not {type(value).__name__}"
        )
    return value


def _str_map(entry: str, where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise RegistryError(f"frameworks.yaml: entry '{entry}': field '{where}' must map names to values")
    return {k: str(v) for k, v in value.items()}


def _framework(name: str, data: Any) -> Framework:
    if not isinstance(data, dict):
        raise RegistryError(f"frameworks.yaml: entry '{name}' must be a mapping")
    steps = []
    for i, step in enumerate(_need(name, data, "install", list)):
        where = f"install[{i}]"
        if not isinstance(step, dict) or not isinstance(step.get("requirements"), list) or not step["requirements"]:
            raise RegistryError(f"frameworks.yaml: entry '{name}': field '{where}.requirements' must be a non-empty list")
        steps.append(InstallStep(tuple(map(str, step["requirements"])), tuple(map(str, step.get("options", [])))))
    devices = _str_map(name, "devices", _need(name, data, "devices", dict))
    for dev in devices:
        if dev not in DEVICES:
            raise RegistryError(f"frameworks.yaml: entry '{name}': field 'devices' has unknown device '{dev}' (known: {', '.join(DEVICES)})")
    if "cpu" not in devices:
        raise RegistryError(f"frameworks.yaml: entry '{name}': field 'devices' must include cpu")
    variants = {}
    for vname, v in (_need(name, data, "variants", dict, {}) or {}).items():
        if not isinstance(v, dict) or not (v.get("env") or v.get("set")):
            raise RegistryError(f"frameworks.yaml: entry '{name}': field 'variants.{vname}' needs 'env' or 'set'")
        sets = v.get("set") or {}
        if not isinstance(sets, dict):
            raise RegistryError(f"frameworks.yaml: entry '{name}': field 'variants.{vname}.set' must be a mapping")
        variants[vname] = Variant(vname, str(v.get("description", "")), _str_map(name, f"variants.{vname}.env", v.get("env") or {}), dict(sets))
    apis = tuple(_need(name, data, "apis", list))
    for api in apis:
        if api not in APIS:
            raise RegistryError(f"frameworks.yaml: entry '{name}': field 'apis' has unknown API '{api}' (known: {', '.join(APIS)})")
    nat = _need(name, data, "native", dict, {}) or {}
    try:
        native = NativeSpec(int(nat.get("rate", 100)), float(nat.get("seconds", 1.0)), bool(nat.get("idle", False)),
                            _str_map(name, "native.env", nat.get("env") or {}), bool(nat.get("prime", True)))
    except (TypeError, ValueError):
        raise RegistryError(f"frameworks.yaml: entry '{name}': field 'native' needs a numeric rate and seconds") from None
    if native.rate <= 0 or native.seconds <= 0:
        raise RegistryError(f"frameworks.yaml: entry '{name}': field 'native' needs a positive rate and seconds")
    roots = _need(name, data, "source_roots", list)
    if not roots:
        raise RegistryError(f"frameworks.yaml: entry '{name}': field 'source_roots' must not be empty")
    return Framework(
        name=name,
        import_name=_need(name, data, "import", str),
        version=str(_need(name, data, "version", (str, int, float))),
        probe=_need(name, data, "probe", str),
        install=tuple(steps),
        devices=devices,
        variants=variants,
        source_roots=tuple(map(str, roots)),
        apis=apis,
        env=_str_map(name, "env", _need(name, data, "env", dict, {})),
        native=native,
    )


def load(path: Path | None = None) -> dict[str, Framework]:
    path = path or registry_path()
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RegistryError(f"{Path(path).name} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("frameworks"), dict):
        raise RegistryError(f"{Path(path).name}: top level must be a mapping with a 'frameworks' mapping")
    return {name: _framework(str(name), data) for name, data in doc["frameworks"].items()}


def parse_shape(text: str) -> tuple[int, ...]:
    """'8x64x112x112' -> (8, 64, 112, 112)."""
    try:
        shape = tuple(int(p) for p in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise ValueError(f"shape '{text}' is not of the form 8x64x112x112") from None
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"shape '{text}' must have positive sizes")
    return shape
