"""A user's own workload recorded where `dltrace audit --workload` needs it: the CPU
path (python, op and library layers), the stand-in device where the framework declares
one (what reached it is the must-implement list), and the GPU path derived here
without a GPU where its probe derives one. What could not be recorded is a gap,
never a stop: the audit says what it rests on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tracer.contract import EMULATED_LAYERS, LAYERS, STANDIN, USER_API, UserWorkload
from tracer.derive import derive
from tracer.errors import DltraceError, ProbeFailed
from tracer.gap import Gap
from tracer.registry_entries import Framework
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, run_probe
from tracer.trace import Trace


def record(fw: Framework, user: UserWorkload, folder: Path, timeout: float = DEFAULT_TIMEOUT, command: str = "",
           on_step: Callable[[str], None] = lambda what: None,
           cpus: tuple[str, ...] = ()) -> tuple[list[Trace], list[Gap]]:
    """The workload's traces on each device this machine reaches for ``fw`` (written in
    ``folder``), and on each emulated ARM CPU of ``cpus``, and a gap for each that failed.
    A failure in the user's own code (its one line) fails every device alike: it is
    raised, not kept as gaps; one only under emulation (a SIGILL, a missing wheel) is
    that CPU's gap."""
    traces: list[Trace] = []
    gaps: list[Gap] = []
    devices = ["cpu", *([STANDIN] if STANDIN in fw.devices else [])]
    for device in devices:
        on_step(f"running {user.name} on {fw.name}'s {device} device")
        layers = LAYERS if device == "cpu" else ("python", "op")  # the native layer too: what each layer costs
        spec = CaseSpec(user.name, USER_API, layers=layers, user=user)
        try:
            (res,) = run_probe(fw, [spec], folder / device, device, timeout=timeout, command=command)
        except ProbeFailed as exc:
            gaps.append(Gap(fw.name, device, "default", user.name, USER_API, str(exc), exc.kind))
            continue
        if res.error:
            if device == "cpu":  # the user's code failed: said once, as it is
                raise ProbeFailed(f"{fw.name} {user.name} ({device}): {res.error}", detail=res.detail)
            gaps.append(Gap(fw.name, device, "default", user.name, USER_API, res.error))
            continue
        traces.append(res.load())
    for cpu in cpus:
        on_step(f"running {user.name} on {fw.name}, emulated {cpu}")
        spec = CaseSpec(user.name, USER_API, layers=EMULATED_LAYERS, user=user)
        try:
            (res,) = run_probe(fw, [spec], folder / f"cpu-{cpu}", "cpu", timeout=timeout, command=command, cpu=cpu)
        except ProbeFailed as exc:
            gaps.append(Gap(fw.name, "cpu", "default", user.name, USER_API, f"{cpu} (emulated): {exc}", exc.kind,
                            cpu=cpu))
            continue
        if res.error:
            gaps.append(Gap(fw.name, "cpu", "default", user.name, USER_API, f"{cpu} (emulated): {res.error}",
                            cpu=cpu))
            continue
        traces.append(res.load())
    if fw.gpu_evidence:
        on_step(f"deriving {fw.name}'s GPU path of {user.name} ({fw.gpu_evidence})")
        try:
            results = derive(fw, [], folder / "gpu-derived", timeout=timeout, command=command, workloads=[user])
        except DltraceError as exc:
            gaps.append(Gap(fw.name, "gpu", fw.gpu_evidence, user.name, USER_API, str(exc), "derive"))
        else:
            for r in results:
                if r.error:
                    gaps.append(Gap(fw.name, "gpu", fw.gpu_evidence, user.name, USER_API, r.error, "derive"))
                else:
                    traces.append(r.load())
    return traces, gaps
