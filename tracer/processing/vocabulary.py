"""The words that name devices and backends, in one place: which frame names reach
GPU code (the diff's classification), which name a CPU backend or a device choice,
and which words make a Python condition a branch on the device (single-trace
candidates). Library tags are tracer.processing.tags' job."""

from __future__ import annotations

import re

GPU_WORDS = (r"cuda\w*", "cudnn", r"cublas\w*", "cupy", "cupyx", "gpu", "cutlass", "nccl", "nvrtc", "rocm", "hip",
             "miopen", "ptx")
CPU_BACKEND_WORDS = ("cpu", "intel64", "ideep", "mkldnn")
OTHER_DEVICE_WORDS = ("xpu", "mps", "tpu")
CHOICE_WORDS = ("device", "backend")


def words(*alternatives: str) -> str:
    """Whole words (no letter before or after)."""
    return r"(?<![a-z])(?:" + "|".join(alternatives) + r")(?![a-z])"


#: A frame name that reaches GPU code (lower-cased text).
GPU_CODE = re.compile(words(*GPU_WORDS))
#: A frame name that names a CPU backend or a device choice (lower-cased text).
DEVICE_CHOICE = re.compile(words(*CPU_BACKEND_WORDS, *OTHER_DEVICE_WORDS, *CHOICE_WORDS))
#: What makes a Python condition "about the device or backend", matched on its
#: source text (and a ``try``'s first statement and handler types).
DEVICE_CONDITION = re.compile(
    r"cuda|gpu|" + words("cpu") + r"|device|(?<![\w.])xp(?!\w)|cupy|(?<![\w.])(?:numpy|np)(?![\w.])|cudnn|"
    r"ideep|mkldnn|onednn|dnnl|intel64|backend|is_available|ndarray|platform|"
    + words("xpu", "mps", "tpu", "rocm", "hip")
    + "|" + words("jit", "eager"),
    re.IGNORECASE,
)
