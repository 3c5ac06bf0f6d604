"""The command line that runs an environment's emulated ``python3`` as a CPU model.

proot, not binfmt_misc: binfmt needs root to register the handler (for the whole
machine) and, to show the guest another /proc/cpuinfo and /sys, root again for a
mount namespace and bind mounts. proot needs neither: it runs the emulator given
per process (``-q "qemu-aarch64-static -cpu SPEC"``; two probes may run as two
CPUs at once), emulates the guest's subprocesses too, and its binds put the CPU's
files over the host's for the guest alone.

The guest sees: the shared Debian root, the host's /proc, /dev and /tmp, the CPU
model's /proc/cpuinfo and /sys (cpus.py), the environment's wheels at the site
directory Debian's python3 reads, and each of the caller's folders at its own path.
The environment is passed through as it is (PYTHONPATH included: a host folder on it
is seen at the same path when it is bound), and the working folder is kept when it
is bound too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tracer.emulation import layout, wheels
from tracer.emulation.cpus import MODELS, CpuModel, cpuinfo_text, features_from_hwcaps, sysfs_files
from tracer.machine import usable_cpus
from tracer.errors import DltraceError, EnvNotReady, UsageError
from tracer.files import write_text

LAUNCH = Path(__file__).resolve().with_name("launch.py")
#: the variable a probe can read to know it runs emulated, and as which CPU
CPU_ENV = "DLTRACE_EMULATED_CPU"


def model(cpu: str) -> CpuModel:
    if cpu not in MODELS:
        raise UsageError(f"unknown emulated CPU '{cpu}' (choose from: {', '.join(MODELS)})")
    return MODELS[cpu]


def qemu() -> str:
    return layout.tool("qemu-aarch64-static")


def qemu_version() -> str:
    """``7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``: QEMU's first line, less its name."""
    try:
        out = subprocess.run([qemu(), "--version"], check=False, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DltraceError(f"cannot run qemu-aarch64-static --version: {exc}") from None
    first = out.splitlines()[0] if out.strip() else ""
    return re.sub(r"^qemu-aarch64 version\s*", "", first).strip() or "unknown"


def emulated_hwcaps(cpu: str, root: Path | None = None) -> tuple[int, int]:
    """AT_HWCAP and AT_HWCAP2 as the installed QEMU gives them to a process of this
    model: glibc's loader prints its auxiliary vector (LD_SHOW_AUXV=1) for a trivial
    guest program, 0.05 s."""
    root = root or layout.base_root()
    proc = subprocess.run([qemu(), "-cpu", model(cpu).qemu_spec(), "-L", str(root), str(root / "usr/bin/true")],
                          check=False, capture_output=True, text=True, timeout=60,
                          env={"LD_SHOW_AUXV": "1", "PATH": "/usr/bin:/bin"})
    found = dict(re.findall(r"^(AT_HWCAP2?):\s*(?:0x)?([0-9a-fA-F]+)\s*$", proc.stdout, re.MULTILINE))
    if proc.returncode != 0 or "AT_HWCAP" not in found:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise DltraceError(f"cannot read the HWCAPs of emulated CPU {cpu} ({model(cpu).qemu_spec()}): {why}")
    return int(found["AT_HWCAP"], 16), int(found.get("AT_HWCAP2", "0"), 16)


def host_cpus() -> int:
    """How many CPUs the guest can run on: qemu-user runs its threads on the host's."""
    return usable_cpus()


def cpu_files(cpu: str, ncpu: int | None = None) -> Path:
    """The folder with this model's ``cpuinfo`` and ``sys/`` for ``ncpu`` CPUs, written
    once under ``$DLTRACE_HOME/emulated/_cpus`` (its name holds a hash of the content,
    so a change makes a new folder and a reader never sees a half-written one)."""
    m = model(cpu)
    ncpu = ncpu or host_cpus()
    features = features_from_hwcaps(*emulated_hwcaps(cpu))
    files = {"cpuinfo": cpuinfo_text(m, ncpu, features),
             **{f"sys/{path}": text for path, text in sysfs_files(m, ncpu).items()}}
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:12]
    folder = layout.emulated_home() / "_cpus" / f"{cpu}-{ncpu}cpu-{digest}"
    if folder.is_dir():
        return folder
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for path, text in files.items():
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        write_text(tmp / path, text)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process wrote the same files first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


#: a host folder the guest sees at the same path, or a (host, guest) pair
Bind = Path | tuple[Path, Path]


def proot_argv(root: Path, site: Path, cpu_dir: Path, qemu_spec: str, binds: list[Bind],
               qemu_path: str = "qemu-aarch64-static", proot_path: str = "proot") -> list[str]:
    """proot's command line up to the guest's python3 (pure: the tests check it).
    A path holding ':' is a DltraceError (see _bindable)."""
    for path in (root, site, cpu_dir):
        layout.bindable(path)
    argv = [proot_path, "-q", f"{qemu_path} -cpu {qemu_spec}", "-r", str(root),
            "-b", "/proc", "-b", "/dev", "-b", "/tmp",
            "-b", f"{cpu_dir / 'cpuinfo'}:/proc/cpuinfo", "-b", f"{cpu_dir / 'sys'}:/sys",
            "-b", f"{site}:{layout.GUEST_SITE}"]
    for bind in binds:
        if isinstance(bind, tuple):
            host, guest = bind
            argv += ["-b", f"{layout.bindable(Path(host).resolve())}:{layout.bindable(Path(guest).resolve())}"]
        else:
            argv += ["-b", layout.bindable(Path(bind).resolve())]
    return [*argv, "/usr/bin/python3"]


def command(name: str, cpu: str, binds: list[Bind]) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and the extra environment that run environment ``name``'s
    emulated python3 as CPU model ``cpu``; append the python arguments (``-m
    tracer.collect.harness REQUEST``). ``binds`` are host folders the guest must see
    at the same path (the project, the request's temporary folder): the working
    folder and every folder on PYTHONPATH must be among them (or under /tmp); a
    (host, guest) pair binds a host folder at another path (the tracer package
    into the probe's code folder).

    The argv starts with the host's Python running launch.py, which makes a guest
    killed by a signal end the same way and keeps DLTRACE_PARENT_PID's meaning."""
    if wheels.status(name) is None:
        raise EnvNotReady(f"emulated environment {name} is not set up (tracer.emulation.setup)")
    m = model(cpu)
    argv = proot_argv(layout.base_root(), layout.site_dir(name), cpu_files(cpu), m.qemu_spec(), binds,
                      qemu(), layout.tool("proot"))
    return [sys.executable, "-I", "-S", str(LAUNCH), *argv], {CPU_ENV: cpu}
