"""Which library a GPU kernel comes from, and which vendor a trace's GPU is.

Kernel names are tagged by the op table of :mod:`tracer.process.tags` (OP_LIBS:
cuDNN, cuBLAS, CUTLASS, MIOpen, hipBLASLt, rocBLAS, Triton...), the same table
``library_of`` reads, so a kernel frame's ``lib`` and what the diff and the report
say about it agree. One kind of kernel cannot be told by its name alone:
PyTorch's own kernels (``at::native::vectorized_elementwise_kernel``) have the same
name when compiled for CUDA and for HIP, so the vendor decides the tag here, and
``library_of`` reads it back from the frame's ``lib`` (both tags are vendor
libraries in tags.py).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from tracer.process.tags import library_of
from tracer.trace import Frame

PYTORCH_CUDA, PYTORCH_HIP = "PyTorch CUDA kernels", "PyTorch HIP kernels"
CUDA_RUNTIME, HIP_RUNTIME = "CUDA runtime", "HIP runtime"
NVIDIA, AMD = "NVIDIA", "AMD"

#: PyTorch's own GPU kernels: ATen's namespace and the kernels it declares outside it
#: (softmax_warp_forward lives in an anonymous namespace, flash attention in pytorch_flash).
PYTORCH_KERNEL = re.compile(
    r"(?:^|[\s<(,*&:])(?:at|c10)::|(?:^|[\s:])(?:vectorized_|unrolled_)?elementwise_kernel|softmax_warp_(?:forward|backward)"
    r"|(?:^|[\s:])batch_norm_\w*kernel|(?:^|[\s:])max_pool_(?:forward|backward)_|(?:^|[\s:])avg_pool\d?d?_(?:out|forward|backward)"
    r"|pytorch_flash::|(?:^|[\s:])(?:reduce_kernel|multi_tensor_apply_kernel|CatArrayBatchedCopy\w*|cunn_SoftMax\w*)<"
)
_AMD_GPU = re.compile(r"(?i)\bAMD\b|Radeon|Instinct|\bMI\d{3}")
_NVIDIA_GPU = re.compile(r"(?i)NVIDIA|Tesla|GeForce|Quadro|\bRTX\b|\b[AHBLTV]\d{2,3}\b")


def module_of(vendor: str) -> str:
    """The frame module of a kernel: "cuda" on NVIDIA, "hip" on AMD."""
    return "hip" if vendor == AMD else "cuda" if vendor == NVIDIA else "gpu"


def kernel_lib(name: str, vendor: str, kind: str = "kernel") -> str:
    """The library tag of a GPU activity (a kernel, memcpy or memset)."""
    if kind != "kernel":
        return HIP_RUNTIME if vendor == AMD else CUDA_RUNTIME
    tag = library_of(Frame("op", module_of(vendor), name))
    if tag:
        return tag
    if PYTORCH_KERNEL.search(name):
        return PYTORCH_HIP if vendor == AMD else PYTORCH_CUDA
    return ""


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
