"""What the processing stages know: of each framework's own code (its native core's
symbols, shared objects and Python modules, the ops it records that only allocate, view
or copy, the names it numbers per process, frames that run wherever they are triggered,
its own GPU kernels), declared with the framework in its frameworks.yaml entry
(``knowledge``), and of the vendor libraries every framework reaches (libraries.yaml,
tracer.libraries). Compiled into one :class:`Knowledge`, so that no processing module
names a framework or a library.

The processing and analysis stages take a Knowledge as a required argument and never
read one themselves; the entry points (the command line, a survey, a report, an
importer) :func:`load` it, or take :func:`knowledge`, the default read once per
process, and hand it down.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

from tracer import libraries as vendor_libraries
from tracer import registry
from tracer.registry_entries import DefaultOn, Framework
from tracer.libraries import QUALIFIED, Libraries

_Table = tuple[tuple[re.Pattern[str], str], ...]


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, so that a cached function may take one
class Knowledge:
    core_tags: frozenset[str]  # each framework's tag for its own native code ("torch core")
    core_symbols: _Table  # C++ namespaces -> core tag
    core_libraries: _Table  # shared-object basenames -> core tag
    core_modules: _Table  # Python modules of the compiled part -> core tag
    utility_ops: re.Pattern[str] | None  # op names that allocate, view or copy
    generated: re.Pattern[str] | None  # names numbered per process: PREFIX + name + _N
    noise: re.Pattern[str] | None  # frames that never decide a split
    incidental: re.Pattern[str] | None  # native frames that say where a thread was, not what ran
    same_op: tuple[re.Pattern[str], ...]  # an op variant's name, its group 1 the op it computes
    kernels: re.Pattern[str] | None = None  # native frames (without template arguments) that are an op's kernel
    compiling: tuple[str, ...] = ()  # words in frame names that mean compiling the model, every framework's
    #: the frameworks' own GPU kernels: (their names, the tag, vendor -> tag), in registry order
    gpu_kernels: tuple[tuple[re.Pattern[str], str, dict[str, str]], ...] = ()
    gpu_kernel_tags: frozenset[str] = frozenset()  # every tag they get: GPU code, as a vendor library's is
    #: "framework/variant" of the variants that switch compilation (jit against eager), not a library
    compilation_variants: frozenset[str] = frozenset()
    #: "framework/variant" of the variants that switch the element type (bf16 against float32)
    precision_variants: frozenset[str] = frozenset()
    #: native frames of a framework's own code that are never a kernel (its reference counts,
    #: tensor accessors, traceback and pytree helpers): a kernel cell skips them
    not_kernels: re.Pattern[str] | None = None
    #: native frames of a framework's own code that compute (ATen's native kernels): a kernel cell may name them
    computes: re.Pattern[str] | None = None
    #: native frames that name the op they run, group 1 the op (at::_ops::addmm::call)
    op_frames: tuple[re.Pattern[str], ...] = ()
    #: a compiled program's instruction -> the framework op it comes from (XLA's exponential -> exp)
    compiled_ops: dict[str, str] = field(default_factory=dict)
    #: "framework/variant" -> where the variant's path is the default (frameworks.yaml
    #: ``default_on``: TensorFlow's oneDNN), for the variants whose path is the default on some CPUs
    default_on: dict[str, DefaultOn] = field(default_factory=dict)
    #: frameworks with no native code of their own (no core symbols or libraries): NumPy computes for them
    pure_python: frozenset[str] = frozenset()
    #: the vendor libraries' tables (libraries.yaml)
    libraries: Libraries = field(default_factory=vendor_libraries.default)

    def is_compilation_variant(self, framework: str, variant: str) -> bool:
        return f"{framework}/{variant}" in self.compilation_variants

    def is_precision_variant(self, framework: str, variant: str) -> bool:
        return f"{framework}/{variant}" in self.precision_variants

    def gpu_kernel_tag(self, name: str, vendor: str) -> str:
        """The tag of a GPU kernel that is a framework's own, on ``vendor``'s GPU; "" if none's."""
        return next((vendors.get(vendor, tag) for names, tag, vendors in self.gpu_kernels if names.search(name)), "")

    def is_utility_op(self, name: str) -> bool:
        return bool(self.utility_ops and self.utility_ops.search(name))

    def is_noise(self, label: str) -> bool:
        return bool(self.noise and self.noise.search(label))


def _either(patterns: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(patterns)) if patterns else None


def from_frameworks(frameworks: dict[str, Framework], libraries: Libraries | None = None) -> Knowledge:
    """The tables of every framework, in registry order, with ``libraries`` (default: the package's)."""
    facts = [fw.knowledge for fw in frameworks.values()]
    return Knowledge(
        libraries=libraries or vendor_libraries.default(),
        core_tags=frozenset(k.core for k in facts),
        core_symbols=tuple((re.compile(QUALIFIED + f"(?:{k.core_symbols})"), k.core) for k in facts if k.core_symbols),
        core_libraries=tuple((re.compile(k.core_libraries), k.core) for k in facts if k.core_libraries),
        core_modules=tuple((re.compile(k.core_modules), k.core) for k in facts if k.core_modules),
        utility_ops=_either([p for k in facts for p in k.utility_ops]),
        generated=re.compile(r"(" + "|".join(p for k in facts for p in k.generated) + r")(\w*?)_\d+(?=$|[.:<(])")
        if any(k.generated for k in facts) else None,
        noise=_either([p for k in facts for p in k.noise]),
        incidental=_either([p for k in facts for p in k.incidental]),
        same_op=tuple(re.compile(p) for k in facts for p in k.same_op),
        kernels=_either([p for k in facts for p in k.kernels]),
        compiling=tuple(dict.fromkeys(p for k in facts for p in k.compiling)),
        gpu_kernels=tuple((re.compile(g.names), g.tag, g.vendors) for k in facts if (g := k.gpu_kernels)),
        gpu_kernel_tags=frozenset(t for k in facts if (g := k.gpu_kernels) for t in (g.tag, *g.vendors.values())),
        compilation_variants=frozenset(f"{name}/{v.name}" for name, fw in frameworks.items()
                                       for v in fw.variants.values() if v.switches == "compilation"),
        precision_variants=frozenset(f"{name}/{v.name}" for name, fw in frameworks.items()
                                     for v in fw.variants.values() if v.switches == "precision"),
        not_kernels=_either([p for k in facts for p in k.not_kernels]),
        computes=_either([p for k in facts for p in k.computes]),
        op_frames=tuple(re.compile(p) for k in facts for p in k.op_frames),
        compiled_ops={i: o for k in facts for i, o in k.compiled_ops.items()},
        default_on={f"{name}/{v.name}": v.default_on for name, fw in frameworks.items()
                    for v in fw.variants.values() if v.default_on is not None},
        pure_python=frozenset(name for name, fw in frameworks.items()
                              if not fw.knowledge.core_symbols and not fw.knowledge.core_libraries),
    )


def load(registry_file: str | os.PathLike[str] | None = None,
         libraries_file: str | os.PathLike[str] | None = None) -> Knowledge:
    """The knowledge of a registry (default: frameworks.yaml, or the file $DLTRACE_REGISTRY
    names) and of a libraries file (default: the package's), read now: what an entry point
    loads once and hands to the stages."""
    return from_frameworks(registry.load(registry_file),
                           vendor_libraries.load(libraries_file) if libraries_file else None)


@lru_cache(maxsize=1)
def knowledge() -> Knowledge:
    """The default knowledge (:func:`load` with no argument), read once per process."""
    return load()
