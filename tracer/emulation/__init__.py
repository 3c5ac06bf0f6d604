"""Running probes on emulated aarch64 CPUs (QEMU user mode under proot) on an x86 host.

Where a framework's ARM code paths part (SVE 512 against NEON, oneDNN's own JIT
against the Arm Compute Library) can be traced without ARM hardware: the
framework's aarch64 wheels run in an emulated Debian with the CPU model chosen per
process, and with the /proc/cpuinfo and sysfs files that model's chip would have.
Timings under emulation say nothing about the chip; which code runs is real.

- :func:`setup` builds (or reuses) an environment: a shared Debian bookworm arm64
  root with python3.11 (debian.py), and the framework's wheels (wheels.py), laid
  out and cached as layout.py says;
- :func:`command` gives the argv prefix and environment that run its python3 as a
  CPU model (guest.py, launch.py);
- :func:`cpu_models` lists the models, their QEMU spec, MIDR and features (cpus.py);
- :func:`qemu_version` says which emulator that was;
- :func:`build_core` cross-compiles the Python collector's C core for the guest (core.py).

Nothing here imports a framework on the host.
"""

from pathlib import Path

from tracer.emulation.core import build as _build_core
from tracer.emulation.cpus import MODELS, CpuModel, cpu_models
from tracer.emulation.debian import debian_mirror, ensure_base
from tracer.emulation.guest import command, cpu_files, emulated_hwcaps, model, qemu_version
from tracer.emulation.layout import HOST_PACKAGES, base_root
from tracer.emulation.wheels import setup, status


def build_core(force: bool = False) -> Path:
    """The C collector built for the guest of the shared base root (core.build)."""
    return _build_core(base_root(), force)


__all__ = ["HOST_PACKAGES", "MODELS", "CpuModel", "build_core", "command", "cpu_files", "cpu_models", "debian_mirror",
           "emulated_hwcaps", "ensure_base", "model", "qemu_version", "setup", "status"]
