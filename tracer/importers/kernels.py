"""Which library a GPU kernel comes from, and which vendor a trace's GPU is.

Kernel names are tagged by the op table of libraries.yaml (``tables.op``:
cuDNN, cuBLAS, CUTLASS, MIOpen, hipBLASLt, rocBLAS, Triton...), the same table
:func:`tracer.processing.tags.library_of` reads, so a kernel frame's ``lib`` and what the diff and the report
say about it agree. A framework's own kernels cannot be told by their name alone
(frameworks.yaml ``knowledge.gpu_kernels``): one source compiled for CUDA and for HIP
gives one name, so the vendor decides the tag here, and ``library_of`` reads it back
from the frame's ``lib`` (tracer.processing.tags counts those tags as GPU libraries).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from tracer.knowledge import knowledge
from tracer.processing import tags
from tracer.processing.tags import AMD, NVIDIA, module_of

__all__ = ["AMD", "NVIDIA", "kernel_lib", "module_of", "vendor_of"]

_AMD_GPU = re.compile(r"(?i)\bAMD\b|Radeon|Instinct|\bMI\d{3}")
_NVIDIA_GPU = re.compile(r"(?i)NVIDIA|Tesla|GeForce|Quadro|\bRTX\b|\b[AHBLTV]\d{2,3}\b")


def vendor_of(gpu_names: Iterable[str], api_names: Iterable[str], header: dict[str, Any]) -> str:
    """NVIDIA or AMD, from the runtime calls (hip* or cu*), the ROCm or CUDA keys of
    the file's header, or the GPU's name; "" when nothing says."""
    hip = cuda = 0
    for name in api_names:
        if name.startswith("hip"):
            hip += 1
        elif name.startswith("cu"):
            cuda += 1
    if hip or cuda:
        return AMD if hip >= cuda else NVIDIA
    if any(k in header for k in ("roctracer_version", "hip_runtime_version", "hip_driver_version")):
        return AMD
    if any(k in header for k in ("cuda_runtime_version", "cuda_driver_version", "cupti_version")):
        return NVIDIA
    for name in gpu_names:
        if _AMD_GPU.search(name):
            return AMD
        if _NVIDIA_GPU.search(name):
            return NVIDIA
    return ""


def kernel_lib(name: str, vendor: str, kind: str = "kernel") -> str:
    """The library tag of a GPU activity in a profiler file (:func:`tracer.processing.tags.kernel_lib`),
    read with the process's knowledge: an importer is an entry point (it reads the registry
    for the file's framework as well), and what it tags is stored in the trace's frames."""
    return tags.kernel_lib(name, vendor, kind, k=knowledge())
