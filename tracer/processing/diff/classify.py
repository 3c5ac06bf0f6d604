"""What kind of decision a split is, from the frames reached on each side only:
device dispatch, compilation, library choice, ISA-specific code,
allocation/transfer. Pure; the rules are in :func:`classify`'s docstring.
Whether a split is a decision at all, once its pair is known (a whole model's GPU
profile against a CPU probe, two framework versions), is tracer.processing.diff.context's
job: it relabels such splits "model context" or "version difference"."""

from __future__ import annotations

import re
from functools import lru_cache

from tracer.contract import STANDIN_LIB
from tracer.knowledge import Knowledge
from tracer.processing.diff.result import Classification
from tracer.processing.tags import (JIT, MKL, ONEDNN, OPENBLAS, is_gpu_lib, is_system_lib, is_vendor_lib, isa_of,
                                 library_call_kind, library_of, vendor_named)
from tracer.processing.vocabulary import DEVICE_CHOICE, GPU_CODE
from tracer.trace import Frame

#: Words that mean compiling the model in any framework; each framework adds its own
#: (frameworks.yaml knowledge ``compiling``). Only words eager execution does not use.
_COMPILE_WORDS = ("jit", "jitted", "jit_compile", "compile[dr]?", "compilation")
_ALLOC = re.compile(r"memcpy|memmove|malloc|calloc|realloc|allocat|device_put|device_get|transfer|htod|dtoh|"
                    r"(?<![a-z])(?:h2d|d2h)(?![a-z])|pin_memory|pinned|empty_strided|to_copy")
_ALLOC_NAME = re.compile(r"^(?:to|copy_|free|empty|empty_like|asarray|asnumpy|alloc|copyto)$")
_CODEGEN_LIBS = frozenset({ONEDNN, MKL, OPENBLAS, JIT})


@lru_cache(maxsize=4)
def _compile(k: Knowledge) -> re.Pattern[str]:
    words = "|".join((*_COMPILE_WORDS, *k.compiling))
    return re.compile(rf"(?<![a-z])(?:{words})(?![a-z])")


def _text(f: Frame) -> str:
    return f"{f.module}.{f.name} {f.lib}".lower()


def _markers(frames: list[Frame], pattern: re.Pattern[str]) -> set[str]:
    return {m.group(0) for f in frames for m in pattern.finditer(_text(f))}


def _codegen(f: Frame, k: Knowledge) -> bool:
    """A kernel generator's frame (oneDNN's jit_* kernels, BLAS): not model compilation."""
    return library_of(f, k) in _CODEGEN_LIBS or vendor_named(f, k) in _CODEGEN_LIBS


def _last_name(f: Frame) -> str:
    return re.split(r"[.:]", f.name.split("(")[0])[-1].lower()


def classify(frames_a: list[Frame], frames_b: list[Frame],
             devices_differ: bool = True, *, k: Knowledge) -> tuple[Classification, str]:
    """Classify a split from the frames reached on each side only. First rule that fires:

    1. device dispatch: GPU code (cuda/gpu/cudnn/cublas/cupy names, GPU library tags) on one side only;
    2. compilation: jit/pjit/compile/dynamo/tf.function frames on one side only (oneDNN's and BLAS's
       generated kernels excluded: those are ISA-specific code, not compiling the model);
    3. library choice: the vendor libraries reached differ (oneDNN vs Eigen vs BLAS...), or the
       libraries' own reports name different primitives (a oneDNN convolution against the gemm
       that Eigen's convolution calls);
    4. ISA-specific code: the ISA tags reached differ (avx512_core vs avx2, jit code, a reference
       implementation), libc's and libpython's own variants (glibc's AVX memcpy) left out;
    5. allocation/transfer: memcpy/alloc/transfer/device_put frames on one side only;
    6. device dispatch: cpu/device/backend names on one side only (forward_cpu vs forward_gpu);
    7. other.

    The two device rules apply only when the traces compared ran on different devices
    (``devices_differ``): a CPU against a CPU variant cannot be a device dispatch.
    """

    def lib(f: Frame) -> str:
        return library_of(f, k)

    if devices_differ:
        gpu_a = _markers(frames_a, GPU_CODE) | {t for t in map(lib, frames_a) if is_gpu_lib(t, k)}
        gpu_b = _markers(frames_b, GPU_CODE) | {t for t in map(lib, frames_b) if is_gpu_lib(t, k)}
        if bool(gpu_a) != bool(gpu_b):
            side, words = ("A", gpu_a) if gpu_a else ("B", gpu_b)
            return "device dispatch", f"{side} reaches GPU code ({_names(words)}); the other side does not"
        new_a = {f.name for f in frames_a if f.lib == STANDIN_LIB}
        new_b = {f.name for f in frames_b if f.lib == STANDIN_LIB}
        if bool(new_a) != bool(new_b):
            side, words = ("A", new_a) if new_a else ("B", new_b)
            return "device dispatch", (f"{side} reaches the stand-in backend ({_names(words)}: what a new backend "
                                       "must implement); the other side runs CPU's own kernels")
    comp_a = _markers([f for f in frames_a if not _codegen(f, k)], _compile(k))
    comp_b = _markers([f for f in frames_b if not _codegen(f, k)], _compile(k))
    if bool(comp_a) != bool(comp_b):
        side, words = ("A", comp_a) if comp_a else ("B", comp_b)
        return "compilation", f"{side} goes through compilation ({_names(words)}); the other side runs eagerly"
    libs_a = {t for t in map(lib, frames_a) if is_vendor_lib(t, k)}
    libs_b = {t for t in map(lib, frames_b) if is_vendor_lib(t, k)}
    if libs_a != libs_b:
        return "library choice", f"A reaches {_names(libs_a)}; B reaches {_names(libs_b)}"
    # layout conversions (oneDNN's reorders) come and go with any implementation
    calls_a = {c for c in map(library_call_kind, frames_a) if c and c != "reorder"}
    calls_b = {c for c in map(library_call_kind, frames_b) if c and c != "reorder"}
    if calls_a != calls_b and calls_a and calls_b:
        return "library choice", (f"the libraries run other primitives: A {_names(calls_a, 'none')}; "
                                  f"B {_names(calls_b, 'none')}")
    # glibc picks its own AVX memcpy at load time: not ISA-specific code a port must provide
    isa_a = {isa_of(f, k) for f in frames_a if isa_of(f, k) and not is_system_lib(lib(f), k)}
    isa_b = {isa_of(f, k) for f in frames_b if isa_of(f, k) and not is_system_lib(lib(f), k)}
    if isa_a != isa_b:
        none = "no ISA-specific"
        return "ISA-specific code", f"A runs {_names(isa_a, none)} code; B runs {_names(isa_b, none)} code"
    alloc_a = _markers(frames_a, _ALLOC) | {n for n in map(_last_name, frames_a) if _ALLOC_NAME.match(n)}
    alloc_b = _markers(frames_b, _ALLOC) | {n for n in map(_last_name, frames_b) if _ALLOC_NAME.match(n)}
    if bool(alloc_a) != bool(alloc_b):
        side, words = ("A", alloc_a) if alloc_a else ("B", alloc_b)
        return "allocation/transfer", f"{side} allocates or moves data ({_names(words)}); the other side does not"
    dev_a, dev_b = _markers(frames_a, DEVICE_CHOICE), _markers(frames_b, DEVICE_CHOICE)
    if devices_differ and dev_a != dev_b:
        return "device dispatch", f"device or backend names differ (A: {_names(dev_a)}; B: {_names(dev_b)})"
    return "other", "no device, library, ISA, compilation or allocation difference in the frame names"


def _names(items: set[str], none: str = "no vendor library", most: int = 4) -> str:
    return ", ".join(sorted(items)[:most]) if items else none
