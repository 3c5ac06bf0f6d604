"""What a skeleton is made from: the cases to run, run on the framework's stand-in device."""

from __future__ import annotations

from tracer import tempdirs
from tracer.contract import MODELS, USER_API, UserWorkload
from tracer.errors import ProbeFailed, UsageError
from tracer.registry_entries import Framework
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, run_probe
from tracer.trace import Trace


def plan(fw: Framework, workloads: list[str], api: str | None,
         users: list[UserWorkload] | None = None) -> list[CaseSpec]:
    """The cases to stand in: each workload at ``api``, or at every level it is written
    at (a model's own levels; a primitive's are the framework's), then the user's own
    workloads (their level is their own)."""
    specs = [CaseSpec(u.name, USER_API, layers=("python", "op"), user=u) for u in users or []]
    for w in workloads:
        levels = MODELS[w].apis if w in MODELS else tuple(fw.apis)
        if api is not None and api not in levels:
            raise UsageError(f"{w} is written at the {' and '.join(levels)} level only, not {api}")
        specs += [CaseSpec(w, a, layers=("python", "op")) for a in ((api,) if api else levels)]
    return specs


def stand_in(fw: Framework, specs: list[CaseSpec], timeout: float = DEFAULT_TIMEOUT,
             command: str = "", door: str = "eager") -> list[Trace]:
    """The cases run on the stand-in device (``door`` "compiled": under torch.compile on
    the CPU, tracer.probes.torch_compiled), in one probe process; their traces."""
    where = "on the stand-in device" if door == "eager" else "under torch.compile"
    with tempdirs.owned("dltrace-scaffold-") as tmp:
        results = run_probe(fw, specs, tmp, device="standin" if door == "eager" else "cpu", timeout=timeout,
                            command=command, door=door)
        failed = [r for r in results if r.error]
        if failed:
            r = failed[0]
            raise ProbeFailed(f"{fw.name} {r.spec.primitive} ({r.spec.api}) {where}: {r.error}")
        return [r.load() for r in results]
