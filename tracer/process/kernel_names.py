"""Which native frames may be named as the kernel a path ran.

A kernel cell ("CPU: op, kernel") is read as "this is the code that computed":
a sampled leaf that is a binding layer (pybind11, nanobind, numpy's
``dispatcher_vectorcall``), a reference count (``c10::intrusive_ptr::retain_``), a
tensor accessor, an allocator, a timer (``mkl_serv_dsecnd``), a traceback helper, a
container growing (``std::vector::_M_realloc_insert``) or a lock is where the
thread happened to be, not what it computed, and names no kernel. The frameworks'
own helpers of that kind are declared with them (frameworks.yaml
``knowledge.not_kernels``); the kinds every library has are here.

A name can also be impossible where it was sampled: the probes compute in float32,
so a complex or double-precision BLAS/LAPACK routine (OpenBLAS's ``ztrtri_LN_single``
under a float conv) is a mis-symbolised address (a stripped library's nearest
exported symbol), flagged rather than named. Pure.
"""

from __future__ import annotations

import re

from tracer.knowledge import knowledge
from tracer.process.tags import _bare

#: Frames of any library that never compute: the kinds, one alternative each.
_NOT_KERNEL = re.compile("|".join((
    r"^(?:pybind11|nanobind|nb)::",  # binding layers
    r"dispatcher_vectorcall|array_function|(?:^|_)vectorcall|^_?Py[A-Z_]|^cfunction_|^method_vectorcall",
    r"intrusive_ptr|shared_ptr|_M_release|(?:^|[^a-z])(?:inc|dec)_?ref",  # reference counts
    r"(?:^|::|_)(?:[Aa]llocat\w*|malloc|calloc|realloc|free|memalign)(?:$|::|_)|operator (?:new|delete)",
    r"_serv_|dsecnd|clock_gettime|gettimeofday|::now$|rdtsc",  # timers
    r"Traceback|PyTreeDef",  # tracebacks, pytree flattening
    r"^(?:std|__gnu_cxx|__cxxabiv1)::",  # the C++ runtime's containers and strings
    r"[Mm]utex|[Ss]pin_?[Ll]ock|(?:^|::)(?:lock|unlock|try_lock)$|futex|^pthread_|^sem_",  # locks
    r"^(?:memcpy|memmove|memset)",
    r"::~\w+$|(?:^|::)(\w+)::\1$",  # destructors, constructors
    r"^absl::|robin_hash|raw_hash_set|[Hh]ash_?[Mm]ap|^google::protobuf::",  # containers, hashing, protobuf
    r"::operator(?:==|!=|<|=)$",  # comparisons (a cache key's)
)))

#: A typed BLAS/LAPACK routine: its first letter is its precision (s float32, d float64,
#: c complex64, z complex128).
_TYPED_BLAS = re.compile(r"^([sdcz])(?:gemm|gemv|ger|trsm|trmm|trsv|trmv|trtri|trti2|potrf|potf2|getrf|getf2|"
                         r"syrk|herk|symm|hemm|axpy|dot|scal|copy|swap|nrm2|asum|lauum|laswp)"
                         r"(?:_|$)")
#: The precision every probe computes in.
PROBE_PRECISION = "s"


def not_a_kernel(name: str) -> bool:
    """A native frame that computes nothing a port replaces (see the module)."""
    bare = _bare(name).strip()
    facts = knowledge()
    return bool(_NOT_KERNEL.search(bare) or (facts.not_kernels and facts.not_kernels.search(bare)))


def implausible(name: str) -> str:
    """Why a kernel name cannot be what ran where the probes compute in float32, or ""."""
    m = _TYPED_BLAS.match(_bare(name).strip().lower())
    if m and m.group(1) != PROBE_PRECISION:
        kind = {"d": "double-precision", "c": "complex", "z": "complex double-precision"}[m.group(1)]
        return (f"{name}: a {kind} BLAS/LAPACK routine under a float32 primitive: likely a mis-symbolised "
                "address in a stripped library, not the kernel")
    return ""
