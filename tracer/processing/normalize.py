"""Frame identity across machines and versions.

Two traces of the same code, taken on two machines, on two builds of a library or
in two processes, name the same function in slightly different ways: addresses,
generated suffixes, compiler clone suffixes, ABI tags. The diff must not report
those as split points, so it compares frames by :func:`identity`, which strips that
noise with the table :data:`RULES`. File names, line numbers and libraries are kept
on the Frame as evidence and never take part in identity.

Pure functions, stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tracer.knowledge import Knowledge
from tracer.trace import Frame

NATIVE = frozenset({"native"})
COMPILED = frozenset({"native", "op"})
PYTHON = frozenset({"python", "c"})
ALL = frozenset({"root", "python", "c", "op", "library", "native"})


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    replacement: str
    kinds: frozenset[str]  # frame kinds the rule applies to
    why: str


def _r(pattern: str, replacement: str, kinds: frozenset[str], why: str) -> Rule:
    return Rule(re.compile(pattern), replacement, kinds, why)


#: Applied in order to a frame's name (and module). Each rule says why it exists;
#: a rule only applies to the frame kinds where the noise occurs, so that a Python
#: method called ``cold`` or ``part`` is never touched by a C++ rule.
RULES: tuple[Rule, ...] = (
    _r(r"\s*\[clone\s+[^\]]*\]", "", NATIVE,
       "demanglers print compiler clones as 'f(int) [clone .isra.0]'; a clone is the same function"),
    _r(r"(?:\.(?:isra|constprop|part|cold|hot|lto_priv|localalias|llvm|clone|str)(?:\.\d+)*)+$", "", NATIVE,
       "GCC/LLVM clone suffixes (.isra.0, .constprop.1, .part.2, .cold, .llvm.123) depend on the "
       "compiler's inlining decisions, not on the code path"),
    _r(r"\[abi:[^\]]*\]", "", NATIVE,
       "libstdc++ ABI tags ([abi:cxx11]) differ between toolchains for the same function"),
    _r(r"\(anonymous namespace\)|\{anonymous\}|`anonymous namespace'", "{anon}", NATIVE,
       "demanglers spell the anonymous namespace differently"),
    _r(r"std::__(?:cxx11|1|ndk1)::", "std::", NATIVE,
       "libstdc++ and libc++ put std in different inline namespaces"),
    _r(r"\s+(?=[<>,*&)\]])|(?<=[<(,\[])\s+", "", NATIVE,
       "demanglers differ in spaces inside template arguments ('> >' vs '>>')"),
    _r(r"\$_\d+", "$_", NATIVE,
       "clang numbers lambdas and local types per translation unit ($_12); the number moves "
       "when unrelated code changes"),
    _r(r"<lambda_[0-9a-f]+>", "<lambda>", ALL,
       "MSVC-style lambda names carry a hash of the enclosing file"),
    _r(r"\+0x[0-9a-fA-F]+$", "", ALL,
       "an offset into a symbol (f+0x1a) is a return address, not a different function"),
    _r(r"0x[0-9a-fA-F]+", "0x…", ALL,
       "addresses (ids in reprs such as '<function <lambda> at 0x7f…>', unsymbolised frames) "
       "change with every process and machine"),
    _r(r"pybind11_(?:detail_)?function_record\w*", "pybind11", PYTHON,
       "pybind11 names its internal function-record type after the compiler ABI "
       "(pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1)"),
    # here: the frameworks' own numbered names (tracer.knowledge, see rules())
    _r(r"(?<=[A-Za-z])_(?:\d+|(?=[0-9a-f]*\d)[0-9a-f]{8,})(?=$|[.:<(])", "", COMPILED,
       "op and kernel names made by code generators carry counters or hashes (Conv2D_1, "
       "cpp_fused_conv_0, kernel_3f2a9b1c)"),
    _r(r"(?<=[A-Za-z])\.\d+$", "", frozenset({"op"}),
       "XLA names HLO instructions with a per-module counter (convolution.3, fusion.12)"),
)

_ADDRESS_ONLY = re.compile(r"^(?:0x…|\?\?|\[unknown\]|\[jit\]|\[?JIT code\]?|)$")
_SO_VERSION = re.compile(r"(?:\.cpython-[^.]*|\.abi3)?\.so(?:\.[0-9.]+)?$|\.dylib$|\.dll$")


@lru_cache(maxsize=4)
def rules(k: Knowledge) -> tuple[Rule, ...]:
    """:data:`RULES`, with the frameworks' numbered generated names (tracer.knowledge:
    TensorFlow's __inference_conv_1234, JAX's jit_f_17) in their place."""
    at = next(i for i, r in enumerate(RULES) if r.why.startswith("op and kernel names made by code generators"))
    extra = []
    if k.generated is not None:
        extra.append(Rule(k.generated, r"\1\2", ALL, "frameworks number generated functions per process "
                                                           "(frameworks.yaml: generated)"))
    extra += [Rule(p, r"\1", frozenset({"op"}), "variants of an op that compute it (frameworks.yaml: same_op)")
              for p in k.same_op]
    return (*RULES[:at], *extra, *RULES[at:])


def normalize(text: str, kind: str, k: Knowledge) -> str:
    """``text`` (a frame's name or module) with the noise of :func:`rules` removed."""
    for rule in rules(k):
        if kind in rule.kinds:
            text = rule.pattern.sub(rule.replacement, text)
    return text.strip()


def normalize_lib(lib: str) -> str:
    """A shared object's name without its version and platform tag
    (libdnnl.so.3 -> libdnnl, _C.cpython-311-x86_64-linux-gnu.so -> _C)."""
    return _SO_VERSION.sub("", lib.rsplit("/", 1)[-1])


#: The key under which two frames are the same function: (kind, module, name), normalised.
Identity = tuple[str, str, str]


@lru_cache(maxsize=1 << 16)  # pure; equal frames of two traces are normalised once
def identity(frame: Frame, k: Knowledge) -> Identity:
    """The hashable key under which two frames are "the same function".

    ``(kind, module, name)`` after normalisation. A native frame without a usable
    symbol (a bare address, JIT-generated code) is identified by its library instead,
    so that all unsymbolised code of one library in one calling context aligns.
    """
    kind = frame.kind
    name = normalize(frame.name, kind, k)
    module = normalize(frame.module, kind, k) if frame.module else ""
    if kind == "native" and _ADDRESS_ONLY.match(name):
        lib = frame.lib
        name = ("[jit]" if lib in ("", "[jit]") or name in ("[jit]", "JIT code", "[JIT code]")
                else f"[{normalize_lib(lib)}]")
    return (kind, module, name)


def identity_label(key: tuple[str, str, str]) -> str:
    """A readable, stable string for an identity (graph keys, JSON)."""
    kind, module, name = key
    return f"{kind}:{module}.{name}" if module else f"{kind}:{name}"
