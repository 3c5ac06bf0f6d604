"""The survey and the report as library calls, in their stage order: the command line
parses its options, calls these and shows their progress; a script or a notebook calls
them the same way (``tracer.pipeline.report(folders, out)``).

A survey: probe every job (here or on a fleet), import the reference GPU profiles,
derive the GPU evidence, keep the inputs from outside the survey's folder, render the
report from the traces alone, and record what ran and how long each stage took. A
report: read the folders once, build the survey model once, render it."""

from __future__ import annotations

import datetime
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeAlias, Union

from tracer import fleet
from tracer import survey as sv
from tracer.analysis.audit_model import WorkloadAudit, framework_audit, workload_audit
from tracer.analysis.compiled_needs import CompiledNeeds
from tracer.analysis.models import compiled_door, is_model_trace, is_workload_trace
from tracer.analysis.standin_needs import StandinNeeds, standin_needs
from tracer.analysis.portability import FrameworkReport
from tracer.analysis.survey_model import SurveyModel, build
from tracer.contract import UserWorkload
from tracer.derive import start_evidence, survey_evidence
from tracer.elf_code import ElfCode
from tracer.errors import DltraceError
from tracer.files import ensure_dir, write_text
from tracer.gap import Gap
from tracer.knowledge import Knowledge, knowledge
from tracer.machine import describe as describe_machine
from tracer.registry_entries import Framework
from tracer.render.report import render
from tracer.runner import DEFAULT_TIMEOUT, stop_all
from tracer.trace import Trace


#: What a line a stage says is: a result of the command ("probed in 512 s; 3 gaps", the
#: report's index), a detail of its progress, a problem met on the way (a file that did
#: not import) or a warning (something left out of the report).
NOTE_KINDS = ("result", "detail", "problem", "warning")


class Progress(Protocol):
    """What a caller hears while a survey or a report runs: a stage starting, a job of
    probes done, a line worth showing, of one of :data:`NOTE_KINDS`."""

    def stage(self, name: str) -> None: ...

    def job_done(self, event: sv.SurveyEvent) -> None: ...

    def note(self, text: str, kind: str = "detail") -> None: ...


class Quiet:
    """Progress that says nothing: a library call's default."""

    def stage(self, name: str) -> None:
        pass

    def job_done(self, event: sv.SurveyEvent) -> None:
        pass

    def note(self, text: str, kind: str = "detail") -> None:
        pass


#: Folders of traces: a list of them, or one folder (a str or a path) alone.
Folders: TypeAlias = Union[Sequence[Union[str, "os.PathLike[str]"]], str, "os.PathLike[str]"]


def folder_list(folders: Folders, what: str = "folders") -> list[Path]:
    """``folders`` as a list of paths: one str or path is one folder (never its
    characters, each read as a folder: ``report("traces", out)``); anything else
    that is not a path is one DltraceError line naming it."""
    if isinstance(folders, (str, os.PathLike)):
        return [Path(folders)]
    if isinstance(folders, (bytes, Mapping)) or not isinstance(folders, Iterable):
        raise DltraceError(f"{what}: a folder or a list of folders, not {type(folders).__name__}")
    out = []
    for f in folders:
        if not isinstance(f, (str, os.PathLike)):
            raise DltraceError(f"{what}: each a folder (str or path), not {type(f).__name__} {str(f)[:80]!r}")
        out.append(Path(f))
    return out


def read(folders: Folders, progress: Progress | None = None) -> tuple[list[Trace], list[Gap], list[str]]:
    """The traces and gap records under ``folders``, and the files that could not be
    read (each said once, as a warning: a report of part of its traces says so)."""
    said = progress or Quiet()
    traces, gaps, skipped = sv.read_folders(folder_list(folders))
    for p in skipped:
        said.note(f"skipped {p}", "warning")
    return traces, gaps, skipped


def model(folders: Folders, k: Knowledge, progress: Progress | None = None) -> SurveyModel:
    """The survey model of the traces and gap records under ``folders``."""
    said = progress or Quiet()
    folders = folder_list(folders)
    said.stage("reading traces")
    traces, gaps, skipped = read(folders, said)
    if not traces and not gaps:
        raise DltraceError(f"no traces found in {', '.join(map(str, folders))}")
    with ElfCode() as elf:
        return build(traces, gaps, k, elf.sizes, skipped, on_stage=said.stage, read_ahead=elf.read_ahead)


def report(folders: Folders, output: "str | os.PathLike[str]", progress: Progress | None = None,
           k: Knowledge | None = None) -> Path:
    """Render the report of the traces under ``folders`` into ``output``; returns the
    index page. ``k``: the knowledge to read them with (default: the installed
    frameworks.yaml and libraries.yaml, loaded here, once)."""
    said = progress or Quiet()
    out = ensure_dir(Path(output))
    built = model(folders, k if k is not None else knowledge(), said)
    said.stage("rendering")
    index = render(built, out)
    said.note(f"report: {index}", "result")
    return index


def audit(framework: str, folders: Folders, k: Knowledge | None = None,
          progress: Progress | None = None) -> FrameworkReport:
    """The porting audit of ``framework``'s built-in cases under ``folders`` (a survey's traces)."""
    folders = folder_list(folders)
    missing = [f for f in folders if not f.exists()]
    if missing:
        raise DltraceError(f"no such folder: {missing[0]}; run: dltrace survey {framework}")
    traces, gaps, _ = read(folders, progress)
    if not [t for t in traces if t.info.framework == framework and not is_model_trace(t)]:
        raise DltraceError(f"no {framework} traces in {', '.join(map(str, folders))}; run: dltrace survey {framework}")
    return framework_audit(framework, [t for t in traces if t.info.framework == framework], gaps,
                           k if k is not None else knowledge())


def audit_workload(framework: str, workload: str, traces: list[Trace], gaps: list[Gap], folders: Folders = (),
                   k: Knowledge | None = None, progress: Progress | None = None) -> WorkloadAudit:
    """The audit of a workload from its ``traces`` and ``gaps`` (tracer.workload_record),
    set against the built-in cases' traces under ``folders`` that exist (none: it says so)."""
    given = [f for f in folder_list(folders) if f.is_dir()]
    builtin = [t for t in read(given, progress)[0] if not is_workload_trace(t)] if given else []
    return workload_audit(framework, workload, traces, gaps, builtin, k if k is not None else knowledge())


@dataclass
class SurveyPlan:
    """What a survey runs: the jobs planned (tracer.survey.plan), where it writes, and
    the stages after probing. ``scheduler``: a fleet's (tracer.fleet.scheduler), or None
    to probe here with ``workers`` subprocesses at a time."""

    frameworks: list[Framework]
    jobs: list[sv.Job]
    output: Path
    command: str
    ready: list[Framework]
    primitives: list[str] | None = None
    models: list[str] = field(default_factory=list)
    workloads: Mapping[str, list[UserWorkload]] = field(default_factory=dict)
    with_traces: list[Path] = field(default_factory=list)
    workers: int = 2
    fresh: bool = False
    timeout: float = DEFAULT_TIMEOUT
    imports: bool = True
    derive: bool = True
    scheduler: fleet.Scheduler | None = None

    def __post_init__(self) -> None:
        # one folder given as a str is that folder, never its characters
        self.with_traces = folder_list(self.with_traces, "with_traces")


def survey(plan: SurveyPlan, progress: Progress | None = None) -> Path:
    """Run ``plan``'s stages in order; every trace is kept as soon as it exists, so that a
    stage that fails loses nothing before it. Returns the report's index page."""
    said = progress or Quiet()
    start = time.monotonic()
    output = plan.output
    ensure_dir(output / "traces")  # before probing: results must have somewhere to go
    host = describe_machine()
    record = sv.SurveyRecord(plan.command,
                             datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                             {k: host[k] for k in ("cpu", "arch", "cores", "python")},
                             [fw.name for fw in plan.frameworks], len(plan.jobs), sum(len(j.cases) for j in plan.jobs))
    t0 = time.monotonic()
    said.stage("probing")

    def job_done(event: sv.SurveyEvent) -> None:
        if event.same_as_default:
            record.same_as_default[event.job.label] = event.same_as_default
        if event.seconds:
            where = event.job.label
            record.job_seconds[where] = round(record.job_seconds.get(where, 0.0) + event.seconds, 2)
            if event.spent:  # none where the probe ended before it could say (a crash, a hang)
                phases = Counter(record.job_phases.get(where, {}))
                phases.update(event.spent)
                record.job_phases[where] = {k: round(v, 2) for k, v in sorted(phases.items())}
        said.job_done(event)

    derive_said = _said_per_folder(said, "cases' GPU evidence derived")
    # Probing here, each framework's GPU evidence goes on the probing jobs' workers, queued
    # first: it needs none of their traces, each framework's is shorter than the heaviest
    # jobs (JAX's, the longest, 75 s), and the lighter jobs behind it still end together.
    # Derived after probing, it left a core idle while JAX's ran alone; queued behind the
    # jobs, JAX's began only as probing ended (a fresh survey at 13e831d). On a
    # fleet it is derived here, after.
    pool = ThreadPoolExecutor(max(1, plan.workers)) if plan.scheduler is None else None
    deriving: list[Future[list[Gap]]] = []
    if pool is not None and plan.derive:
        deriving = start_evidence(pool, plan.ready, output, plan.primitives, plan.fresh, plan.timeout, derive_said,
                                  plan.models, dict(plan.workloads), sv.share_of_cores(plan.workers))

    try:
        if plan.scheduler is not None:
            gaps = fleet.run(plan.jobs, output, plan.scheduler, fresh=plan.fresh, timeout=plan.timeout,
                             on_event=job_done)
        else:
            gaps = sv.run(plan.jobs, output, workers=plan.workers, fresh=plan.fresh, timeout=plan.timeout,
                          on_event=job_done, pool=pool)
        record.seconds["probing"] = round(time.monotonic() - t0, 1)
        said.note(f"probed in {record.seconds['probing']:.0f} s; {len(gaps)} gaps", "result")
        gaps += _imports(plan, said, record)
        if plan.derive:
            t1 = time.monotonic()
            said.stage("deriving the GPU evidence")
            if pool is not None:  # queued with the probing jobs: what is left of it
                gaps += [gap for fut in deriving for gap in fut.result()]
            else:
                gaps += survey_evidence(plan.ready, output, plan.primitives, plan.fresh, plan.timeout, derive_said,
                                        plan.models, dict(plan.workloads), workers=plan.workers)
            record.seconds["derive"] = round(time.monotonic() - t1, 1)
            said.note(f"GPU evidence derived in {record.seconds['derive']:.0f} s after probing", "result")
    except BaseException:  # Ctrl-C, SIGTERM: the evidence still being derived stops too
        stop_all()
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    recorded = _recorded(plan) if plan.imports else []
    _keep_inputs(plan, recorded, said)
    t1 = time.monotonic()
    index = report([output / "traces"], output, said)
    record.seconds["report"] = round(time.monotonic() - t1, 1)
    record.seconds["total"] = round(time.monotonic() - start, 1)
    record.gaps = len(gaps)
    sv.write_record(output, record)
    return index


def _imports(plan: SurveyPlan, said: Progress, record: sv.SurveyRecord) -> list[Gap]:
    """The reference GPU profiles imported, and the GPU machines' recorded folders named."""
    gaps: list[Gap] = []
    if plan.imports:
        t1 = time.monotonic()
        said.stage("importing the reference GPU profiles")
        gaps = sv.import_references(plan.frameworks, plan.output, fresh=plan.fresh, on_file=_said_per_folder(
            said, "primitives imported"))
        record.seconds["imports"] = round(time.monotonic() - t1, 1)
        for name, folder in _recorded(plan):
            n = sum(1 for _ in sv.trace_files([folder]))
            said.note(f"  {name}: {n} traces recorded by dltrace on a GPU machine ({folder.name})")
    return gaps


def _said_per_folder(said: Progress, done: str) -> Callable[[str, int, str], None]:
    def on_folder(folder: str, n: int, error: str) -> None:
        said.note(f"  {folder}: {error}" if error else f"  {folder}: {n} {done}", "problem" if error else "detail")
    return on_folder


def _recorded(plan: SurveyPlan) -> list[tuple[str, Path]]:
    """Each recorded GPU folder with the GPU machine's own CPU path beside it
    (cpu-default), the baseline its GPU path is set against: the same version on the
    same machine (once each: two GPU folders of one machine, float32 and bf16, share
    its CPU path)."""
    return list(dict.fromkeys((fw.name, f) for fw in plan.frameworks for folder in fw.recorded
                              for f in (folder, folder.parent / "cpu-default") if f.is_dir()))


def _keep_inputs(plan: SurveyPlan, recorded: list[tuple[str, Path]], said: Progress) -> None:
    """What the report reads from outside the survey's folder is kept in it, and named
    in inputs.json: `dltrace report OUTPUT/traces` then renders the same report."""
    output = plan.output
    outside = [(f"{name}-recorded-{folder.parent.name}-{folder.name}", folder) for name, folder in recorded]
    inside = (output / "traces").resolve()
    outside += [(f"with-{i}-{Path(f).name}", Path(f)) for i, f in enumerate(plan.with_traces)
                if not Path(f).resolve().is_relative_to(inside)]
    kept = sv.keep_inputs(outside, output)
    for k in kept:
        if k.get("skipped"):
            said.note(f"{k['name']}: {k['skipped']} files left out of the report's inputs "
                      "(links, files outside the folder given, files that are not traces)", "warning")
    write_text(output / "inputs.json", json.dumps({"kept_in": f"traces/{sv.INPUTS}", "inputs": kept}, indent=1) + "\n")


def doors(traces: list[Trace]) -> tuple[StandinNeeds | None, CompiledNeeds | None]:
    """One step's two doors from its traces (``dltrace probe --door compiled``, ``dltrace
    audit torch --door compiled``): the eager list of its stand-in traces, and the
    compiled door's list of the traces that recorded one, set beside the eager list."""
    standin = [t for t in traces if t.info.standin is not None]
    return (standin_needs(standin, [], None) if standin else None), compiled_door(traces)
