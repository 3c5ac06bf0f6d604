"""Which native frames may be named as the kernel a path ran.

A kernel cell ("CPU: op, kernel") is read as "this is the code that computed":
a sampled leaf that is a binding layer (pybind11, nanobind, numpy's
``dispatcher_vectorcall``), a reference count (``c10::intrusive_ptr::retain_``), a
tensor accessor, an allocator, a timer (``mkl_serv_dsecnd``), a traceback helper, a
container growing (``std::vector::_M_realloc_insert``) or a lock is where the
thread happened to be, not what it computed, and names no kernel. The frameworks'
own helpers of that kind are declared with them (frameworks.yaml
``knowledge.not_kernels``); the kinds every library has are in libraries.yaml
(``not_kernels``).

A name can also be impossible where it was sampled: the probes compute in float32,
so a complex or double-precision BLAS/LAPACK routine (OpenBLAS's ``ztrtri_LN_single``
under a float conv) is a mis-symbolised address (a stripped library's nearest
exported symbol), flagged rather than named. Pure.
"""

from __future__ import annotations

from tracer.knowledge import Knowledge
from tracer.processing.tags import _bare

#: The precision every probe computes in (the first letter of a typed BLAS routine).
PROBE_PRECISION = "s"


def not_a_kernel(name: str, k: Knowledge) -> bool:
    """A native frame that computes nothing a port replaces (see the module)."""
    bare = _bare(name).strip()
    return bool(k.libraries.not_kernels.search(bare) or (k.not_kernels and k.not_kernels.search(bare)))


def implausible(name: str, k: Knowledge) -> str:
    """Why a kernel name cannot be what ran where the probes compute in float32, or ""."""
    m = k.libraries.typed_blas.match(_bare(name).strip().lower())
    if m and m.group(1) != PROBE_PRECISION:
        kind = {"d": "double-precision", "c": "complex", "z": "complex double-precision"}[m.group(1)]
        return (f"{name}: a {kind} BLAS/LAPACK routine under a float32 primitive: likely a mis-symbolised "
                "address in a stripped library, not the kernel")
    return ""
