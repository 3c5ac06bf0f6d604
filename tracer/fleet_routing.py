"""Where a fleet's jobs run: what a worker's machine offers, as Dask worker resources
(:func:`resources_here`), what a job needs (:func:`needs`), and the jobs as the fleet
runs them (:func:`route`: an ARM-audit job on a native aarch64
worker where the scheduler has one). Pure but for what a machine has (its GPUs, its
environments); tracer.fleet submits and serves."""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import replace
from typing import Iterable

from tracer import emulation, envs
from tracer.emulation import guest
from tracer.registry_entries import Framework
from tracer.survey import Job

#: Concurrent jobs a worker accepts per resource it declares.
SLOTS = 2
#: The resource a worker that runs users' workloads declares.
WORKLOAD_RESOURCE = "workloads"


def gpu_count() -> int:
    """GPUs ``nvidia-smi -L`` lists: the simplest honest rule (a probe's own GPU check is per framework env)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def _emulated_ready(fw: Framework) -> bool:
    """Whether ``fw``'s emulated aarch64 environment is built here (QEMU found, the
    Debian guest root and the framework's aarch64 wheels ready)."""
    if fw.aarch64 is None or fw.aarch64.unavailable:
        return False
    try:
        guest.qemu()
        return emulation.status(fw.name) is not None
    except Exception:  # no qemu, no guest root: emulated jobs are not declared
        return False


def resources_here(frameworks: Iterable[Framework], emulation: bool = True, gpu: bool = True) -> dict[str, float]:
    """What this machine can run, as Dask worker resources (names are flat strings).
    ``emulation``/``gpu`` False leave those out: two workers on one machine can then
    offer different things (one for the emulated ARM jobs, one for the rest)."""
    res: dict[str, float] = {f"arch-{platform.machine()}": SLOTS}
    gpus = gpu_count() if gpu else 0
    if gpus:
        res["gpu"] = gpus
    for fw in frameworks:
        if envs.status(fw).ready:  # a missing environment is not declared, so never attempted
            res[f"fw-{fw.name}"] = SLOTS
        if emulation and fw.aarch64 is not None and _emulated_ready(fw):  # (False without aarch64 anyway)
            for cpu in fw.aarch64.cpus:
                res[f"emu-{fw.name}-{cpu}"] = SLOTS
    return res


#: The architecture an ARM-audit job runs on natively, where a worker has it.
ARM = "aarch64"


def needs(job: Job, here: str | None = None) -> dict[str, float]:
    """The worker resources ``job`` requires (``here``: the submitting machine's architecture)."""
    if job.cpu:
        return {f"emu-{job.framework.name}-{job.cpu}": 1}
    req: dict[str, float] = {f"fw-{job.framework.name}": 1}
    if any(s.user is not None for s in job.cases):
        req[WORKLOAD_RESOURCE] = 1  # only a worker started with --workloads runs a user's code
    if job.device == "gpu":
        req["gpu"] = 1
    else:
        # the CPU and stand-in paths land in the same folders as a local survey's: traced
        # on the submitting machine's architecture, never mixed with another's
        req[f"arch-{job.arch or here or platform.machine()}"] = 1
    return req


def runnable(req: dict[str, float], workers: list[dict[str, float]]) -> bool:
    return any(all(w.get(k, 0) >= v for k, v in req.items()) for w in workers)


def route(jobs: Iterable[Job], workers: list[dict[str, float]], here: str | None = None) -> list[Job]:
    """The jobs as the fleet runs them: an ARM-audit job (an emulated CPU model) goes to
    a native aarch64 worker with the framework's environment where one exists, the
    emulated models' jobs of one framework and variant becoming one native job (real
    hardware is one CPU, whichever models were asked for); emulation only where no
    such worker exists. A pure function of the workers' declared resources
    (``here``: the submitting machine's architecture; on an aarch64 machine the CPU
    jobs are native already and the emulated models stay emulated)."""
    here = here or platform.machine()
    out: list[Job] = []
    seen: set[str] = set()
    for job in jobs:
        if job.cpu and here != ARM:
            native = replace(job, cpu="", arch=ARM)
            if runnable(needs(native, here), workers):
                if native.folder in seen:
                    continue
                seen.add(native.folder)
                job = native
        out.append(job)
    return out
