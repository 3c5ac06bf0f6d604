"""Run a survey's jobs on a Dask distributed scheduler instead of the local pool.

Why Dask: the paths that matter live on different machines (a GPU box, an ARM
server, the x86 workstation); Dask's worker resources route each job to a worker
that declared what the job needs, so we write no scheduler of our own. A worker
runs ``survey.run_job`` into its own temporary folder and returns the files'
bytes; the submitting machine writes them atomically into the survey folder, so
resume and reuse work as for a local survey.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from tracer import envs
from tracer.errors import DltraceError
from tracer.files import ensure_file_parent, write_bytes
from tracer.registry import Framework
from tracer.runner import DEFAULT_TIMEOUT
from tracer.survey import GAP_SUFFIX, Gap, Job, SurveyEvent, case_path, load_gap

#: Concurrent jobs a worker accepts per resource it declares.
SLOTS = 2


def gpu_count() -> int:
    """GPUs ``nvidia-smi -L`` lists: the simplest honest rule (a probe's own GPU check is per framework env)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def _emulation_ready() -> bool:
    try:
        from tracer.emulation import debian, guest
        guest.qemu()
        return debian.base_ready()
    except Exception:  # no qemu, no guest root: emulated jobs are not declared
        return False


def resources_here(frameworks: Iterable[Framework]) -> dict[str, float]:
    """What this machine can run, as Dask worker resources (names are flat strings)."""
    res: dict[str, float] = {f"arch-{platform.machine()}": SLOTS}
    gpus = gpu_count()
    if gpus:
        res["gpu"] = gpus
    emulation = _emulation_ready()
    for fw in frameworks:
        if not envs.status(fw).ready:
            continue  # declared missing, never attempted
        res[f"fw-{fw.name}"] = SLOTS
        if emulation and fw.aarch64 is not None:
            for cpu in fw.aarch64.cpus:
                res[f"emu-{fw.name}-{cpu}"] = SLOTS
    return res


def needs(job: Job) -> dict[str, float]:
    """The worker resources ``job`` requires."""
    if job.cpu:
        return {f"emu-{job.framework.name}-{job.cpu}": 1}
    req = {f"fw-{job.framework.name}": 1}
    if job.device == "gpu":
        req["gpu"] = 1
    else:
        # the CPU and stand-in paths land in the same folders as a local survey's: traced
        # on the submitting machine's architecture, never mixed with another's
        req[f"arch-{platform.machine()}"] = 1
    return req


def _runnable(req: dict[str, float], workers: list[dict[str, float]]) -> bool:
    return any(all(w.get(k, 0) >= v for k, v in req.items()) for w in workers)


def run_remote(job: Job, fresh: bool, timeout: float) -> tuple[str, dict[str, bytes]]:
    """On a worker: run the job into a temporary folder; return the host and its files' bytes."""
    from tracer.survey import run_job

    with tempfile.TemporaryDirectory(prefix="dltrace-fleet-") as tmp:
        root = Path(tmp)
        run_job(job, root, fresh=True, timeout=timeout)
        files = {str(p.relative_to(root)): p.read_bytes() for p in (root / "traces").rglob("*") if p.is_file()}
    return socket.gethostname(), files


def _gap_all(job: Job, root: Path, why: str) -> SurveyEvent:
    event = SurveyEvent(job, len(job.cases))
    for spec in job.cases:
        g = Gap(job.framework.name, job.device, job.variant, spec.primitive, spec.api, why, "scheduler", job.cpu)
        path = case_path(root, job, spec)
        ensure_file_parent(path)
        write_bytes(path.with_name(path.name[: -len(".json")] + GAP_SUFFIX), json.dumps(g.__dict__).encode())
        event.gaps.append(g)
    return event


def _todo(job: Job, root: Path, fresh: bool) -> bool:
    """Whether any case of ``job`` lacks a trace here (a re-run reuses what is there)."""
    return fresh or any(not case_path(root, job, s).is_file() for s in job.cases)


def _resources(client) -> list[dict[str, float]]:
    return [dict(w.get("resources") or {}) for w in client.scheduler_info(n_workers=-1)["workers"].values()]


def _receive(fut, job: Job, root: Path) -> SurveyEvent:
    """Write what a finished job sent back; a job that raised (its worker died) is a gap."""
    try:
        host, files = fut.result()
    except Exception as exc:
        return _gap_all(job, root, f"worker failed: {type(exc).__name__}: {exc}")
    event = SurveyEvent(job, len(job.cases))
    for rel, data in files.items():
        if ".." in Path(rel).parts or Path(rel).is_absolute() or not rel.startswith("traces/"):
            continue  # a worker only writes under the survey's traces
        ensure_file_parent(root / rel)
        write_bytes(root / rel, data)
        if rel.endswith(GAP_SUFFIX):
            event.gaps.append(load_gap(root / rel))
    return event


def run(jobs: list[Job], root: Path, address: str, fresh: bool = False, timeout: float = DEFAULT_TIMEOUT,
        on_event: Callable[[SurveyEvent], None] = lambda e: None) -> list[Gap]:
    """Submit the jobs to the scheduler at ``address``; write the traces as each job ends."""
    from distributed import Client, wait

    try:
        client = Client(address, timeout=15)
    except (OSError, TimeoutError) as exc:
        raise DltraceError(f"scheduler {address} unreachable: {exc}") from None
    gaps: list[Gap] = []
    try:
        workers = _resources(client)
        futures = {}
        for job in jobs:
            if not _todo(job, root, fresh):
                event = SurveyEvent(job, len(job.cases), reused=len(job.cases))
                on_event(event)
                continue
            req = needs(job)
            if not _runnable(req, workers):
                event = _gap_all(job, root, f"no worker of the scheduler has {', '.join(sorted(req))}")
                gaps.extend(event.gaps)
                on_event(event)
                continue
            fut = client.submit(run_remote, job, fresh, timeout, resources=req, pure=False)
            futures[fut] = job
        pending = set(futures)
        while pending:
            try:
                done, pending = wait(list(pending), timeout=5, return_when="FIRST_COMPLETED")
            except TimeoutError:  # distributed.wait raises when nothing ended in time
                done = set()
            pending = set(pending) - set(done)
            for fut in done:
                event = _receive(fut, futures[fut], root)
                gaps.extend(event.gaps)
                on_event(event)
            if pending and not done:  # a worker may have died: never wait on jobs no worker left can run
                workers = _resources(client)
                for fut in [f for f in pending if not _runnable(needs(futures[f]), workers)]:
                    fut.cancel()
                    pending.discard(fut)
                    event = _gap_all(futures[fut], root, "worker lost mid-job and no worker left has "
                                     + ", ".join(sorted(needs(futures[fut]))))
                    gaps.extend(event.gaps)
                    on_event(event)
    finally:
        client.close()
    return gaps


def start_worker(address: str, frameworks: Iterable[Framework], nthreads: int = 2) -> None:
    """Run a Dask worker in this process until interrupted, declaring this machine's resources."""
    import asyncio

    from distributed import Worker

    res = resources_here(frameworks)

    async def main() -> None:
        async with Worker(address, nthreads=nthreads, resources=res) as w:
            await w.finished()

    asyncio.run(main())
