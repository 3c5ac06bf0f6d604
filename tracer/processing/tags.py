"""Which library a frame belongs to, and which ISA-specific code it is.

This is what a port to a new CPU or accelerator has to replace: the vendor
libraries a primitive reaches (oneDNN, Eigen, BLAS, cuDNN...) and the code written
for one instruction set (AVX-512 kernels, JIT-generated code...).

Tags come from the tables of libraries.yaml (tracer.libraries), rows of a regular
expression and a tag, tried in order, first match wins:

1. ``symbol`` on the symbol. It comes first because the frameworks link vendor code
   statically: oneDNN and MKL live inside libtorch_cpu.so, Eigen is compiled into
   TensorFlow's and MXNet's cores, XLA into jaxlib. A symbol in ``dnnl::`` is oneDNN
   whatever shared object holds it.
2. ``soname`` on the shared object's basename (``Frame.lib``). Each framework's own
   shared objects are declared with it (frameworks.yaml, tracer.knowledge).
3. The framework namespaces (tracer.knowledge), then ``system_symbols`` (libc/libpython
   names) on the symbol, for frames whose library is unknown.
4. The library's own basename without its version (an untabled library still gets a
   stable tag), else "".

Op frames (the framework's own dispatch records) are tagged by ``op`` on the op or
kernel name (aten::mkldnn_convolution, _MklConv2D, cudnn...), and Python/C frames by
``module`` on their module (cupy, numpy, ideep4py), then by ``python_name`` on their
name (forward_ideep, torch.cuda...). Every function takes the :class:`Knowledge` to
read (``k``, required: the entry points load it once and hand it down).
Pure functions over a Frame; no I/O.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tracer import libraries as vendor_libraries
from tracer.knowledge import Knowledge
from tracer.processing.normalize import normalize_lib
from tracer.libraries import Table
from tracer.trace import Frame

ONEDNN, MKL, OPENBLAS, BLAS, EIGEN, XLA, MSHADOW = "oneDNN", "MKL", "OpenBLAS", "BLAS", "Eigen", "XLA", "mshadow"
CUDNN, CUBLAS, CUDART, HIP_RUNTIME = "cuDNN", "cuBLAS", "CUDA runtime", "HIP runtime"
NVIDIA, AMD = "NVIDIA", "AMD"
LIBC, LIBSTDCXX, LIBPYTHON, JIT = "libc", "libstdc++", "libpython", "JIT code"


#: What every native stack passes through whatever the backend, as the package's
#: libraries.yaml groups it (the renderers mute these tags).
SYSTEM_LIBS = vendor_libraries.default().system


@lru_cache(maxsize=1 << 16)
def is_incidental(frame: Frame, k: Knowledge) -> bool:
    """A native frame that says where a thread waited, forked, allocated or passed a
    call along (libraries.yaml ``incidental``, OpenMP's library, a framework's own
    parallel-for wrapper), not what it computed."""
    if frame.kind != "native":
        return False
    bare = _bare(frame.name).strip()
    return (library_of(frame, k) == "OpenMP" or bool(k.libraries.incidental.match(bare))
            or bool(k.incidental and k.incidental.search(bare)))


def is_vendor_lib(lib: str, k: Knowledge) -> bool:
    """A library a port replaces or links (oneDNN, cuDNN, a framework's own GPU kernels),
    not the framework's core or the system."""
    return lib in k.libraries.vendor or lib in k.gpu_kernel_tags


def is_gpu_lib(lib: str, k: Knowledge) -> bool:
    """GPU code: a GPU library or runtime, or a framework's own GPU kernels."""
    return lib in k.libraries.gpu or lib in k.gpu_kernel_tags


def is_system_lib(lib: str, k: Knowledge) -> bool:
    """What every native stack passes through whatever the backend (libc, libpython, OpenMP...)."""
    return lib in k.libraries.system


def library_order(lib: str, k: Knowledge) -> tuple[int, str]:
    """Sort key for lists of libraries: what a port replaces first (vendor and GPU
    libraries, JIT code), then the framework's core, then the rest, system last."""
    rank = (0 if is_vendor_lib(lib, k) or is_gpu_lib(lib, k) or lib == JIT else 1 if lib in k.core_tags
            else 3 if is_system_lib(lib, k) else 2)
    return rank, lib.lower()


_ADDRESS = re.compile(r"^(?:0x[0-9a-fA-F]+|\?\?|\[unknown\]|)$")
#: Names a native frame of JIT code gets when nothing named it (the collector's, and older traces').
_JIT_NAMES = frozenset({"[jit]", "JIT code", "[JIT code]"})


def _first(table: Table, text: str) -> str:
    for pattern, tag in table:
        if pattern.search(text):
            return tag
    return ""


def _bare(symbol: str) -> str:
    """A demangled symbol without template arguments and parameter lists, so that
    ``tensorflow::ConvOp<Eigen::ThreadPoolDevice>`` is tagged by its own namespace."""
    out, depth = [], 0
    for ch in symbol:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def is_jit(frame: Frame) -> bool:
    """Native code generated at run time (no symbol, no shared object)."""
    if frame.kind != "native":
        return False
    if frame.lib == "[jit]" or frame.name in _JIT_NAMES:
        return True
    return not frame.lib and bool(_ADDRESS.match(frame.name))


def is_unnamed(frame: Frame) -> bool:
    """A native frame with no symbol: a bare address, or JIT code no perf map named."""
    return frame.name in _JIT_NAMES or bool(_ADDRESS.match(frame.name))


@lru_cache(maxsize=1 << 16)  # pure; a trace has a few thousand distinct frames, seen many times
def library_of(frame: Frame, k: Knowledge) -> str:
    """The library tag of a frame ("oneDNN", "Eigen", "cuDNN", "torch core"...), "" if unknown."""
    t = k.libraries
    kind = frame.kind
    if kind == "native":
        if is_jit(frame):  # named by a perf map (jit_avx2_conv_fwd_kernel_f32_t: oneDNN's), else unknown
            return (not is_unnamed(frame) and (_first(t.symbol, frame.name) or _first(t.jit, frame.name))) or JIT
        bare = _bare(frame.name)
        lib = frame.lib.rsplit("/", 1)[-1]
        return (_first(t.symbol, bare) or (lib and (_first(t.soname, lib) or _first(k.core_libraries, lib)))
                or _first(k.core_symbols, bare) or _first(t.system_symbols, bare)
                or (normalize_lib(lib) if lib else ""))
    if kind == "op":
        # the op layer's own record of who computes it: a library tag in lib, or XLA's HLO ops
        return (_first(t.op, frame.name) or (_first(t.soname, frame.lib) if frame.lib else "")
                or (frame.lib if is_vendor_lib(frame.lib, k) else "") or (XLA if frame.module == "xla" else ""))
    if kind == "library":  # the reporting library, or the one its implementation delegates to
        return _first(t.implementation, frame.name) or frame.lib
    if kind in ("python", "c"):
        return (_first(t.module, frame.module) or _first(k.core_modules, frame.module)
                or _first(t.python_name, f"{frame.module}.{frame.name}"))
    return ""


def library_call_kind(frame: Frame) -> str:
    """What a library call computes (``convolution``, ``reorder``, ``SGEMM``): the
    first word of a "library" frame's name; "" for other frames."""
    return frame.name.split(" ", 1)[0] if frame.kind == "library" else ""


@lru_cache(maxsize=1 << 16)
def vendor_named(frame: Frame, k: Knowledge) -> str:
    """The vendor library a native frame's full symbol names anywhere, template
    arguments included (``std::_Function_handler<..., dnnl::impl::...::execute>``
    is oneDNN's lambda even though the frame itself is libstdc++'s)."""
    return _first(k.libraries.symbol, frame.name) if frame.kind == "native" else ""


@lru_cache(maxsize=1 << 16)
def isa_of(frame: Frame, k: Knowledge) -> str:
    """The ISA a native or op frame's code is written for ("avx2", "avx512_core", "neon",
    "jit" for run-time generated code...), "" if the name does not say."""
    if frame.kind not in ("native", "op", "library"):
        return ""
    isa = k.libraries.isa
    if is_jit(frame):
        return (not is_unnamed(frame) and _first(isa, frame.name.lower())) or "jit"
    return _first(isa, frame.name.lower())


def module_of(vendor: str) -> str:
    """The frame module of a GPU kernel: "cuda" on NVIDIA, "hip" on AMD."""
    return "hip" if vendor == AMD else "cuda" if vendor == NVIDIA else "gpu"


def kernel_lib(name: str, vendor: str, kind: str = "kernel", *, k: Knowledge) -> str:
    """The library tag of a GPU activity (a kernel, memcpy or memset): the op table's,
    else the framework's own kernels' (knowledge ``gpu_kernels``). One rule for the
    importers, which tag the kernels of a profile, and for the kernels dltrace's probe
    recorded on a GPU machine, untagged (tracer.analysis.gpu_cells)."""
    if kind != "kernel":
        return HIP_RUNTIME if vendor == AMD else CUDART
    return library_of(Frame("op", module_of(vendor), name), k) or k.gpu_kernel_tag(name, vendor)


#: The frame module a GPU kernel dltrace's probe recorded is kept under, and its vendor.
KERNEL_MODULES = {module_of(v): v for v in (NVIDIA, AMD)}
_COPIES = re.compile(r"^(?:Memset|Memcpy)\b")


def recorded_kernel_lib(f: Frame, k: Knowledge) -> str:
    """The tag the importer would give a GPU activity dltrace's probe recorded on a GPU
    machine (module "cuda" or "hip", untagged: the probe runs with the standard library
    alone); "" for any other frame, or one no table knows."""
    vendor = KERNEL_MODULES.get(f.module)
    if f.lib or vendor is None:
        return ""
    return kernel_lib(f.name, vendor, "memcpy" if _COPIES.match(f.name) else "kernel", k=k)
