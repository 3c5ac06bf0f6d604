"""Derived GPU evidence (`dltrace derive`, and every survey): what each framework's GPU
path runs, read on this machine without a GPU, by the framework's own probe in its own
environment (the ``gpu-evidence`` request of tracer.contract; tracer.collect.gpu_evidence
writes the traces). Where the registry declares a GPU build (frameworks.yaml
``gpu_build``: TensorFlow's full wheel registers GPU kernels, tensorflow-cpu does not),
it runs in that build's environment, NAME-gpu-build.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from tracer import envs
from tracer.contract import MODELS, PASSES, PRIMITIVES, USER_API, UserWorkload
from tracer.errors import DltraceError, EnvNotReady
from tracer.evidence_classes import DERIVED_EVIDENCE
from tracer.gap import GAP_SUFFIX, Gap, write_gap
from tracer.registry_entries import Framework, gpu_build_env
from tracer.runner import DEFAULT_TIMEOUT, CaseResult, CaseSpec, run_probe


def environment(fw: Framework) -> Framework:
    """The environment the evidence is read in: the GPU build's where one is declared
    and set up, else the framework's own where that can derive anything without it
    (frameworks.yaml ``gpu_evidence.needs_build``: tensorflow-cpu registers no GPU
    kernel; JAX lowers without its CUDA plugin, only the compiled HLO needs it)."""
    build = gpu_build_env(fw)
    if build is None:
        return fw
    if not envs.status(build).ready and not fw.gpu_evidence_needs_build:
        return fw
    if not envs.status(build).ready:
        raise EnvNotReady(f"{fw.name}: its GPU build's environment is not set up; run: dltrace env setup {build.name}")
    return build


def derive(fw: Framework, primitives: list[str], out_dir: Path, apis: tuple[str, ...] | None = None,
           timeout: float = DEFAULT_TIMEOUT, command: str = "", models: list[str] | None = None,
           workloads: list[UserWorkload] | None = None, threads: int | None = None) -> list[CaseResult]:
    """One gpu-evidence trace per primitive and API level (``SLUG-gpu-evidence.json``
    in ``out_dir``), per model at each level it is written at, and per user workload,
    all from one probe process. ``primitives`` empty and neither ``models`` nor
    ``workloads``: every primitive. ``threads``: the libraries' share of the cores
    (tracer.contract.THREAD_ENV), where probing jobs run beside it."""
    prims = primitives or ([] if models or workloads else list(PRIMITIVES))
    cases = [CaseSpec(p, api, (), PASSES, ("op",)) for p in prims for api in (apis or fw.apis)]
    cases += [CaseSpec(m, api, (), PASSES, ("op",)) for m in models or [] for api in MODELS[m].apis
              if apis is None or api in apis]
    cases += [CaseSpec(w.name, USER_API, (), PASSES, ("op",), user=w) for w in workloads or []]
    return run_probe(environment(fw), cases, out_dir, "cpu", "default", timeout, command=command,
                     kind="gpu-evidence", threads=threads)


def _derive_workloads(fw: Framework, workloads: list[UserWorkload], folder: Path, timeout: float,
                      threads: int | None = None) -> list[Gap]:
    """The user's workloads' derived GPU paths, in the framework's gpu-derived folder; a gap each that failed."""
    gaps = []
    for w in workloads:
        for old in folder.glob(f"{w.name}-{USER_API}*") if folder.is_dir() else ():
            old.unlink()
    try:
        results = derive(fw, [], folder, timeout=timeout, command="dltrace survey", workloads=workloads,
                         threads=threads)
    except DltraceError as exc:
        results = [CaseResult(CaseSpec(w.name, USER_API, user=w), None, str(exc)) for w in workloads]
    for r in results:
        if r.error:
            gap = Gap(fw.name, "gpu", fw.gpu_evidence, r.spec.primitive, r.spec.api, r.error, "derive")
            write_gap(folder / f"{r.spec.slug()}.json", gap)
            gaps.append(gap)
    return gaps


def survey_evidence(frameworks: list[Framework], root: Path, primitives: list[str] | None = None, fresh: bool = False,
                    timeout: float = DEFAULT_TIMEOUT,
                    on_done: Callable[[str, int, str], None] = lambda name, n, error: None,
                    models: list[str] | None = None,
                    workloads: dict[str, list[UserWorkload]] | None = None, workers: int = 2) -> list[Gap]:
    """Every survey's derived GPU evidence, beside its traces (``traces/<framework>/
    gpu-derived/``), reused unless ``fresh``; what cannot be derived is a gap (a GPU
    build not set up, a case that failed), never a stop. ``models``: also their
    training steps (their GPU path on the models page, and, beside a stand-in's run of
    the step, the list the registry or the compiler gives). ``workers`` frameworks at a
    time, as the survey probes: each framework's evidence is one probe process on one
    core, and one after another they left the other core idle for minutes."""
    with ThreadPoolExecutor(max(1, workers)) as pool:
        started = start_evidence(pool, frameworks, root, primitives, fresh, timeout, on_done, models, workloads)
        return [gap for fut in started for gap in fut.result()]


def start_evidence(pool: Executor, frameworks: list[Framework], root: Path, primitives: list[str] | None = None,
                   fresh: bool = False, timeout: float = DEFAULT_TIMEOUT,
                   on_done: Callable[[str, int, str], None] = lambda name, n, error: None,
                   models: list[str] | None = None,
                   workloads: dict[str, list[UserWorkload]] | None = None,
                   threads: int | None = None) -> list[Future[list[Gap]]]:
    """:func:`survey_evidence`, each framework's share queued on ``pool``: a survey queues
    them with its probing jobs, on their workers (the stage after probing left one core
    idle while JAX's evidence was derived alone), each with ``threads`` (the probing jobs'
    share of the cores)."""
    # The strongest evidence first (the registry allows only DERIVED_EVIDENCE, strongest
    # first): a compiler's, which is also the slowest to derive: JAX's (XLA compiling each
    # case and workload for the GPU) took 75 s of a survey's 105 s of deriving, and started
    # last, alone on one core.
    chosen = sorted((fw for fw in frameworks if fw.gpu_evidence),
                    key=lambda fw: DERIVED_EVIDENCE.index(fw.gpu_evidence))
    return [pool.submit(_framework_evidence, fw, root, primitives, fresh, timeout, on_done, models,
                        (workloads or {}).get(fw.name, []), threads) for fw in chosen]


def _framework_evidence(fw: Framework, root: Path, primitives: list[str] | None, fresh: bool, timeout: float,
                        on_done: Callable[[str, int, str], None], models: list[str] | None,
                        mine: list[UserWorkload], threads: int | None = None) -> list[Gap]:
    """One framework's share of :func:`survey_evidence`."""
    gaps: list[Gap] = []
    folder = root / "traces" / fw.name / "gpu-derived"
    name = f"{fw.name}/{folder.name}"
    if mine:  # a user's workload is derived again each time: its code may have changed
        gaps += _derive_workloads(fw, mine, folder, timeout, threads)
    mark = f"-{USER_API}-gpu-evidence.json"  # a workload's, derived above
    done = [p for p in folder.glob("*-gpu-evidence.json") if not p.name.endswith(mark)] if folder.is_dir() else []
    if done and not fresh:
        on_done(name, len(done), "")
        return gaps
    for stale in folder.glob(f"*{GAP_SUFFIX}") if folder.is_dir() else ():
        if not stale.name.endswith(f"-{USER_API}{GAP_SUFFIX}"):
            stale.unlink()
    try:
        nets = [m for m in models or [] if m in fw.models]
        results = derive(fw, list(primitives or PRIMITIVES), folder, timeout=timeout, command="dltrace survey",
                         models=nets, threads=threads)
    except DltraceError as exc:
        gap = Gap(fw.name, "gpu", fw.gpu_evidence, "", "derived", str(exc), "derive")
        write_gap(folder / "derive.json", gap)
        on_done(name, 0, str(exc))
        return [*gaps, gap]
    for r in results:
        if r.error:
            gap = Gap(fw.name, "gpu", fw.gpu_evidence, r.spec.primitive, r.spec.api, r.error, "derive")
            write_gap(folder / f"{r.spec.slug()}.json", gap)
            gaps.append(gap)
    on_done(name, sum(1 for r in results if not r.error), "")
    return gaps
