"""Describe the machine a trace was recorded on (no hostname): what a reader needs
to tell an x86 trace from an ARM one, or an AVX-512 machine from an AVX2 one."""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any

#: ISA feature flags that decide which kernels a library picks.
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni",
    "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme",
)


def _cpuinfo() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "CPU part") and model in ("", platform.machine()):
                    model = value.strip()
                elif key in ("flags", "Features"):
                    flags.update(value.split())
    except OSError:
        pass
    return model, [f for f in ISA_FLAGS if f in flags]


def isa() -> list[str]:
    """This machine's ISA feature flags (of :data:`ISA_FLAGS`): what decides a library's
    or a framework's default path on it (TensorFlow's oneDNN, tracer.survey.plan)."""
    return _cpuinfo()[1]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity; a container or taskset may allow
    fewer than the machine has): how many processes of its own it should run at a time."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def describe() -> dict[str, Any]:
    model, flags = _cpuinfo()
    return {
        "cpu": model,
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "isa": flags,
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "python_impl": sys.implementation.name,
    }


#: Where the kernel drivers of GPUs say their version (the first that exists is read).
_DRIVER_FILES = (("/proc/driver/nvidia/version", r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)"),
                 ("/sys/module/amdgpu/version", r"(\S+)"))


def gpu_driver() -> str:
    """The GPU kernel driver's version ("NVIDIA 580.159.04"), "" where no driver says
    one: what a trace recorded on a GPU machine needs to be reproduced."""
    for path, pattern in _DRIVER_FILES:
        try:
            with open(path) as fh:
                found = re.search(pattern, fh.read(4096))
        except OSError:
            continue
        if found:
            return f"{'NVIDIA' if 'nvidia' in path else 'AMD'} {found.group(1)}"
    return ""
