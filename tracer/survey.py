"""A survey: probe every primitive of every framework on every device and variant
it can, keep every trace as soon as it exists, and never lose results already had.

Layout of a survey folder (``reports/NAME``)::

    traces/<framework>/<device>-<variant>/<primitive>-<api>.json   one trace per case
    traces/<framework>/<device>-<variant>/<primitive>-<api>.gap.json  why a case has none
    index.html, <framework>.html, ...                               the report

Re-running resumes: a case whose trace is already there is not probed again.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
import os
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from tracer import __version__, envs, machine
from tracer.bounded import NotRegular, TooLarge, limit_from_env, read_regular
from tracer.contract import (CNN_PRIMITIVES, EMULATED_LAYERS, EXACT_LAYERS, LAYERS, MODELS, PRIMITIVES, USER_API,
                             UserWorkload)
from tracer.errors import DltraceError, ProbeFailed
from tracer.files import REPORT_KEY, SURVEY_JSON, read_json_object, write_bytes, write_text
from tracer.gap import GAP_SUFFIX, Gap, load_gap, write_gap
from tracer.importers import SUFFIX, ImportFailed, file_suffixes, import_file, imported_path
from tracer.importers.source import short_name
from tracer.paths import PACKAGE
from tracer.registry_entries import Framework
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, run_probe, stop_all
from tracer.trace import MAX_TRACE_MIB, Trace, TraceFormatError, load, save
from tracer.trace_meta import native_not_finished

#: The survey's own record of itself, beside its traces: what it ran, on what, and how
#: long each stage took, so that the figures the docs quote come from a file, not memory.
RECORD = SURVEY_JSON
RECORD_FORMAT = "dltrace-survey-record"


@dataclass(frozen=True)
class Job:
    """One probe subprocess: a framework on one device with one variant, on this
    machine, (``cpu``) on an emulated aarch64 CPU model, or (``arch``) natively on a
    fleet worker of that architecture (tracer.fleet: an ARM-audit job an aarch64
    worker runs instead of emulating it)."""

    framework: Framework
    device: str
    variant: str
    cases: tuple[CaseSpec, ...]
    cpu: str = ""  # an emulated CPU model (tracer.emulation), "" for this machine
    arch: str = ""  # run natively on this architecture (a fleet worker's), "" for this machine's
    #: "both": each model's and workload's compiled door recorded beside its eager run (a
    #: stand-in job of a framework with a compiled door: tracer.contract.CompiledDoor)
    door: str = "eager"
    #: the feature of this machine's CPU on which this variant's path is the framework's
    #: own default (frameworks.yaml ``default_on``): :func:`run` probes it only if the
    #: default's traces say the switch was off after all
    repeats: str = ""

    @property
    def folder(self) -> str:
        where = f"aarch64-{self.cpu}" if self.cpu else f"{self.arch}-native" if self.arch else self.device
        return f"{self.framework.name}/{where}-{self.variant}"

    @property
    def label(self) -> str:
        """The job as survey.json times it: its folder, and the workload where the job is one
        (an example's job shares its folder with the primitives' job), or ``+ NAME`` where
        the workload ran after the primitives in their process (an emulated CPU's)."""
        users = [c.user.name for c in self.cases if c.user is not None]
        if len(users) != 1:
            return self.folder
        return f"{self.folder} {users[0]}" if len(self.cases) == 1 else f"{self.folder} + {users[0]}"


@dataclass
class SurveyEvent:
    job: Job
    done: int  # cases finished in this job (traced, reused or gap)
    gaps: list[Gap] = field(default_factory=list)
    reused: int = 0
    seconds: float = 0.0  # the job's wall time where it ran here (0: not timed, a fleet's)
    #: the seconds of the cases it probed, by phase (tracer.collect.harness.Spent)
    spent: Counter[str] = field(default_factory=Counter)
    #: why the job was not probed: its variant repeats the default path here (Job.repeats)
    same_as_default: str = ""


def plan(frameworks: Iterable[Framework], primitives: Iterable[str] | None = None,
         devices: Iterable[str] = ("cpu",), variants: bool = True, native: bool = False,
         arm: bool = False, arm_all: bool = False, models: Iterable[str] = (),
         all_variants: bool = False, workloads: dict[str, list[UserWorkload]] | None = None,
         doors: bool = False, isa: Iterable[str] | None = None) -> list[Job]:
    """The jobs of a survey, heaviest framework first so that parallel jobs end together.

    ``native`` adds, per primitive, a case of each framework's first API (functional)
    at its kernel shape (tracer.contract.Primitive) with native stacks (py-spy): the layer API reaches the
    same kernels, sampling costs seconds per case and pass, and at the default
    shapes the kernels hardly show in the samples.

    ``arm`` adds, for each framework with an ``aarch64`` entry, one job per emulated
    CPU model: the functional cases at the default shapes, python, op and library
    layers (py-spy cannot attach under QEMU; everything runs 10 to 100 times slower
    there, and what the libraries report is what the audit needs), and one more per
    variant its ``aarch64.variants`` names (TensorFlow's oneDNN, off by default on ARM),
    or (``arm_all``) per variant it has; there, only the primitives its
    ``aarch64.primitives`` lists, if any (JAX: slow to compile under emulation),
    else the CNN family's nine (the transformer family would add two thirds to the
    slowest jobs of a survey), unless ``arm_all``.

    ``models`` adds each model's training step that the framework's probe runs
    (frameworks.yaml ``models``), at each API level the model is written at (a
    framework that lacks one is a gap saying so, never silence), to the default
    variant of each device (a stand-in backend included: what reaches it is what a
    port must implement for the network); not to
    the CPU switches, the native layer or the emulated CPUs, which the primitives
    cover at a fraction of the time. ``workloads`` (framework -> the user's own
    workloads, the examples among them) are added to each device's default variant,
    each as one case at its own level in a job of its own (a probe process of its own),
    with native stacks on the CPU where ``native`` (what each layer costs on it).

    A CPU switch variant runs what its question needs, unless ``all_variants``: a
    library or compilation switch (oneDNN off, jit off) the CNN family, the primitives
    that switch was asked of (which library a switch moves); a reduced-precision one
    every primitive at the first API level and the default shapes (which kernels the
    type reaches: the library layer names them; the layer API adds Python, not kernels).
    Every variant of everything would double a survey past its 15 minutes.

    ``doors``: each stand-in job also records its models' and workloads' compiled door
    (torch.compile's graphs, beside the eager list; a framework without one ignores it).

    ``isa``: the CPU features of the machine the CPU jobs run on (default: this one's). A
    variant whose path is the framework's default on such a CPU (``default_on``:
    TensorFlow's oneDNN on an AVX512-VNNI machine) is marked :attr:`Job.repeats`, which
    :func:`run` checks against the default's traces instead of tracing the path twice."""
    prims = list(primitives or PRIMITIVES)
    flags = machine.isa() if isa is None else list(isa)
    jobs = []
    for fw in frameworks:
        cases = tuple(CaseSpec(p, api) for p in prims for api in fw.apis)
        if native:
            cases += tuple(CaseSpec(p, fw.apis[0], PRIMITIVES[p].kernel_shape, layers=LAYERS) for p in prims)
        for device in devices:
            if device not in fw.devices:
                continue
            # a stand-in backend computes on this CPU: below the op layer (libraries, native
            # stacks) is its own CPU computation, not what a backend runs
            mine = tuple(replace(c, layers=("python", "op")) for c in cases if "native" not in c.layers) \
                if device == "standin" else cases
            nets = tuple(CaseSpec(m, api, layers=("python", "op") if device == "standin" else EXACT_LAYERS)
                         for m in models if m in fw.models for api in MODELS[m].apis)
            door = "both" if doors and device == "standin" else "eager"
            for variant in ["default", *(fw.variants if variants and device == "cpu" else [])]:
                jobs.append(Job(fw, device, variant, mine + nets if variant == "default"
                                else mine if all_variants else _variant_cases(fw, variant, mine),
                                door=door if variant == "default" else "eager",
                                repeats="" if variant == "default" else fw.variants[variant].repeats_default(flags)))
            # each workload in a probe process of its own: the user's code may set the
            # framework's global state (torch.backends.mkldnn.enabled = False), exit, or
            # take the process down, and no built-in case may pay for it
            on_cpu = LAYERS if native else EXACT_LAYERS
            jobs += [Job(fw, device, "default", (CaseSpec(w.name, USER_API, user=w,
                                                          layers=("python", "op") if device == "standin" else on_cpu),),
                         door=door)
                     for w in (workloads or {}).get(fw.name, [])]
        if arm and fw.aarch64 is not None:
            some = fw.aarch64.primitives or CNN_PRIMITIVES
            emulated = tuple(CaseSpec(p, fw.apis[0]) for p in prims if arm_all or p in some)
            listed = fw.variants if arm_all else fw.aarch64.variants
            on_arm = ["default", *(listed if variants else ())]
            # the workloads (the examples among them) on each CPU: which library call computed
            # each of their ops there (tracer.analysis.arm_ops). The first one runs after the
            # default variant's primitives, in their process: importing a framework under QEMU
            # takes 9 s (Chainer) to 45 s (TensorFlow), and a workload that runs last can
            # change no built-in case's trace (each is written when traced; one that ends the
            # process leaves them, tracer.survey.run_job). Each other one has a process of its
            # own, so that no workload changes another's.
            skipped = {str(ex.path.resolve()) for name, ex in fw.examples.items() if name in fw.aarch64.skip_examples}
            arm_workloads = [CaseSpec(w.name, USER_API, user=w, layers=EMULATED_LAYERS)
                             for w in (workloads or {}).get(fw.name, [])
                             if arm_all or str(Path(w.file).resolve()) not in skipped]
            for cpu in fw.aarch64.cpus:
                jobs += [Job(fw, "cpu", v, emulated + tuple(arm_workloads[:1]) if v == "default" else emulated, cpu)
                         for v in on_arm]
                jobs += [Job(fw, "cpu", "default", (w,), cpu) for w in arm_workloads[1:]]
    return jobs


def _variant_cases(fw: Framework, variant: str, cases: tuple[CaseSpec, ...]) -> tuple[CaseSpec, ...]:
    """The cases a CPU switch variant runs by default (:func:`plan`)."""
    if fw.variants[variant].switches == "precision":
        return tuple(c for c in cases if c.api == fw.apis[0] and "native" not in c.layers)
    return tuple(c for c in cases if c.primitive in CNN_PRIMITIVES)


def case_path(root: Path, job: Job, spec: CaseSpec) -> Path:
    return root / "traces" / job.folder / f"{spec.slug()}.json"


def run_job(job: Job, root: Path, fresh: bool = False, timeout: float = DEFAULT_TIMEOUT,
            threads: int | None = None) -> SurveyEvent:
    """Probe the cases of ``job`` that have no trace yet; failures become gaps.
    ``threads``: the libraries' thread count for its probe (tracer.contract.THREAD_ENV).
    The event says how long the job took (survey.json's per-job times)."""
    t0 = time.monotonic()
    event = _run_job(job, root, fresh, timeout, threads)
    event.seconds = round(time.monotonic() - t0, 2)
    return event


def _run_job(job: Job, root: Path, fresh: bool, timeout: float, threads: int | None) -> SurveyEvent:
    todo, blocked = [], []
    for spec in job.cases:
        path = case_path(root, job, spec)
        gap_path = path.with_name(path.name[: -len(".json")] + GAP_SUFFIX)
        if fresh or spec.user is not None:  # a user's workload is the user's code: it may have changed
            path.unlink(missing_ok=True)
        if gap_path.is_file() or gap_path.is_symlink():
            gap_path.unlink()
        if path.exists() and not path.is_file():
            blocked.append(spec)  # a folder (or a pipe) where the trace goes: that case's gap
            continue
        if path.exists():
            try:
                had = load(path)
            except TraceFormatError:
                path.unlink()  # a broken trace is probed again
            else:
                # reused unless it lacks a layer now asked for (native capture that
                # failed still counts: the trace says why, probing again would not
                # help; one the probe died in is tried again)
                if "native" not in spec.layers or (had.info.native is not None and not native_incomplete(had)):
                    continue
        todo.append(spec)
    reused = len(job.cases) - len(todo) - len(blocked)
    event = SurveyEvent(job, reused, reused=reused)
    fw = job.framework

    def gap(spec: CaseSpec, error: str, kind: str = "failed") -> None:
        g = Gap(fw.name, job.device, job.variant, spec.primitive, spec.api, error, kind, job.cpu, job.arch)
        write_gap(case_path(root, job, spec), g)
        event.gaps.append(g)

    for spec in blocked:
        gap(spec, f"{case_path(root, job, spec)} is not a file (a folder or pipe is in the way of its trace); "
                  "remove it and run the survey again", "output")
    while todo:
        out_dir = case_path(root, job, todo[0]).parent
        try:
            results = run_probe(fw, todo, out_dir, job.device, job.variant, timeout=timeout, command="dltrace survey",
                                threads=threads,
                                cpu=job.cpu, door=job.door)
        except ProbeFailed as exc:
            if exc.kind == "interrupted":
                break
            if exc.kind in ("crashed", "timeout"):
                # The harness writes each trace as soon as it has it: keep those, mark the
                # case it died in, and go on with the rest. Traces written before the
                # native capture it died in keep their other layers and say why they
                # have no native one.
                for spec in todo:
                    if "native" in spec.layers and _mark_native_lost(case_path(root, job, spec), str(exc)):
                        gap(spec, f"native layer lost: {exc}", exc.kind)
                todo = [s for s in todo if not case_path(root, job, s).exists()]
                if todo:
                    gap(todo.pop(0), str(exc), exc.kind)
                continue
            for spec in todo:
                gap(spec, str(exc), exc.kind)
            break
        except DltraceError as exc:  # no environment
            for spec in todo:
                gap(spec, str(exc), "env")
            break
        for res in results:
            if res.error:
                gap(res.spec, res.error)
            event.spent.update(res.spent)
        break
    event.done = len(job.cases)
    return event


def native_incomplete(trace: Trace) -> bool:
    """The probe process ended while this trace's native stacks were being captured."""
    return trace.info.native is not None and trace.info.native.incomplete


def _mark_native_lost(path: Path, why: str) -> bool:
    """Record in a trace whose native capture the probe died in why it has no native
    layer; False if the trace is not such a trace."""
    try:
        trace = load(path)
    except TraceFormatError:
        return False
    if not native_incomplete(trace):
        return False
    native = native_not_finished(why)
    trace.set_meta("native", native)
    for run in trace.runs:
        if run.phase == "warm":
            run.stats["native_error"] = native["error"]
    save(trace, path)
    return True


def share_of_cores(workers: int) -> int | None:
    """Each of ``workers`` probe processes' library threads (tracer.contract.THREAD_ENV);
    None alone: the libraries' own choice."""
    return max(1, (os.cpu_count() or 1) // workers) if workers > 1 else None


def run(jobs: list[Job], root: Path, workers: int = 2, fresh: bool = False,
        timeout: float = DEFAULT_TIMEOUT, on_event: Callable[[SurveyEvent], None] = lambda e: None,
        pool: ThreadPoolExecutor | None = None) -> list[Gap]:
    """Run the jobs, ``workers`` probe subprocesses at a time; return the gaps. With
    several at once, each probe's libraries get an equal share of the cores (at least
    one thread): oversubscribed OpenMP pools time a step hundreds of times slower.

    A job that repeats the default path here (:attr:`Job.repeats`) waits for its default
    job: where the default's traces say the switch was on, it is not probed (its event
    says why); where they say it was off, it is probed then.

    ``pool``: the caller's, of ``workers`` threads (kept open), where it may have queued
    other work (tracer.pipeline: the GPU evidence)."""
    gaps: list[Gap] = []
    own = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=max(1, workers))
    threads = share_of_cores(workers)
    futures: dict[Future[SurveyEvent], Job] = {}
    # each held job with the first job of its default folder (its primitives' job), which it waits for
    held = [(j, next((d for d in jobs if d.folder == _default_folder(j)), None)) for j in jobs if j.repeats]

    def start(job: Job) -> Future[SurveyEvent]:
        fut = pool.submit(run_job, job, root, fresh, timeout, threads)
        futures[fut] = job
        return fut

    def decide(ended: list[Job | None]) -> set[Future[SurveyEvent]]:
        """The held jobs whose default job is among ``ended``: each reported as the default's
        path, or started (returned)."""
        started = set()
        for pair in [p for p in held if any(p[1] is e for e in ended)]:
            held.remove(pair)
            job, default = pair
            why = _same_as_default(job, root, default)
            if why:
                on_event(SurveyEvent(job, len(job.cases), same_as_default=why))
            else:
                started.add(start(job))
        return started

    try:
        for job in jobs:
            if not job.repeats:
                start(job)
        pending = set(futures) | decide([None])  # no default job here: what is on disk says
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                event = fut.result()
                gaps.extend(event.gaps)
                on_event(event)
            pending |= decide([futures[f] for f in done])
    except BaseException:  # Ctrl-C, SIGTERM: stop the probes now, keep what is written
        stop_all()
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
        else:  # the caller's pool: only these jobs are ours to cancel (the caller shuts it)
            for fut in futures:
                fut.cancel()
        raise
    if own:
        pool.shutdown()
    return gaps


def _default_folder(job: Job) -> str:
    return replace(job, variant="default").folder


def _same_as_default(job: Job, root: Path, default: Job | None) -> str:
    """Why ``job`` (a variant marked :attr:`Job.repeats`) need not be probed: the default
    path's traces on this machine record its switch on (``default_on.recorded_as``);
    "" where they do not, or no trace of it can be read."""
    rule = job.framework.variants[job.variant].default_on
    if rule is None:
        return ""
    folder = root / "traces" / _default_folder(job)
    paths = [case_path(root, default, spec) for spec in default.cases] if default is not None \
        else sorted(folder.glob("*.json"))

    def recorded() -> Iterator[Any]:
        for path in paths:
            if path.is_file() and not path.name.endswith(GAP_SUFFIX):
                try:
                    yield load(path).meta.get(rule.recorded_as)
                except TraceFormatError:
                    continue

    if not rule.confirmed(recorded()):
        return ""
    return (f"{job.framework.name}'s default path on this CPU ({job.repeats}): its {_default_folder(job)} "
            f"traces record {rule.recorded_as}: true")


def import_references(frameworks: Iterable[Framework], root: Path, fresh: bool = False,
                      on_file: Callable[[str, int, str], None] = lambda folder, n, error: None) -> list[Gap]:
    """Import each framework's reference profiles (frameworks.yaml ``imported``: real
    GPU traces recorded elsewhere) into ``traces/<framework>/gpu-<source>/``, once:
    a folder that has its traces is reused unless ``fresh``. A file that cannot be
    imported is a gap; the survey goes on."""
    gaps: list[Gap] = []
    for fw in frameworks:
        for path in fw.imported:
            folder = root / "traces" / fw.name / f"gpu-{short_name(path.name, file_suffixes(fw))}"
            name = f"{fw.name}/{folder.name}"
            done = list(folder.glob(f"*{SUFFIX}"))
            if done and not fresh:
                on_file(name, len(done), "")
                continue
            try:
                imported = import_file(path, fw.name, command="dltrace survey")
            except ImportFailed as exc:
                gap = Gap(fw.name, "gpu", folder.name[4:], "", "imported", str(exc), "import")
                write_gap(folder / "import.json", gap)
                gaps.append(gap)
                on_file(name, 0, str(exc))
                continue
            folder.mkdir(parents=True, exist_ok=True)
            for r in imported:
                save(r.trace, imported_path(folder, r.primitive))
            on_file(name, len(imported), "")
    return gaps


def ready_frameworks(frameworks: Iterable[Framework]) -> tuple[list[Framework], list[Framework]]:
    ready: list[Framework] = []
    missing: list[Framework] = []
    for fw in frameworks:
        (ready if envs.status(fw).ready else missing).append(fw)
    return ready, missing


# ----------------------------------------------------------------------------- reading back


def trace_files(folders: Iterable[Path]) -> Iterator[Path]:
    for folder in folders:
        folder = Path(folder)
        if folder.is_file():
            yield folder
            continue
        for dirpath, _, files in os.walk(folder):
            for name in sorted(files):
                if (name.endswith(".json") or name.endswith(".json.gz")) and not name.endswith(GAP_SUFFIX):
                    yield Path(dirpath, name)


#: Where a survey keeps the traces it read from outside its folder (the package's recorded
#: GPU traces, --with-traces), so that its report is rendered from its folder alone.
INPUTS = "inputs"


def _publishable(path: Path, inside: Path) -> bytes | None:
    """The bytes of ``path`` when they may go into a report's published inputs: a
    regular file (never a link: a folder someone else filled may hold ``x.json ->
    /etc/shadow``) under ``inside``, that loads as what its name says (a trace, a gap
    record); None otherwise. The bytes checked are the bytes copied."""
    try:
        if path.is_symlink() or not path.resolve().is_relative_to(inside):
            return None
        data = read_regular(path, limit_from_env("DLTRACE_MAX_TRACE_MB", MAX_TRACE_MIB))
    except (OSError, NotRegular, TooLarge, RuntimeError):
        return None
    try:
        if path.name.endswith(GAP_SUFFIX):
            load_gap(path)
        else:
            load(path)
    except (ValueError, TraceFormatError):
        return None
    return data


def published_source(folder: Path) -> str:
    """Where an input came from, as a report made to be published says it: inside the
    tracer package, its path there (``tracer/reference/recorded/...``); elsewhere, the
    folder's own name alone (its absolute path names this machine's users and folders)."""
    try:
        return f"tracer/{folder.resolve().relative_to(PACKAGE).as_posix()}"
    except ValueError:
        return folder.name or "."


def keep_inputs(folders: Iterable[tuple[str, Path]], root: Path) -> list[dict[str, Any]]:
    """Copy each (name, folder)'s traces and gap records, bytes unchanged, into
    ``root/traces/inputs/NAME/``, and return what was kept: the same ``dltrace report
    root/traces`` then gives the report the survey wrote. A file already there with the
    same bytes is not copied again. Only regular files inside the folder given that
    load as traces or gaps are kept (that folder is made to be published); what was
    left out is counted (``skipped``)."""
    kept = []
    for name, folder in folders:
        dest = root / "traces" / INPUTS / name
        n = skipped = 0
        inside = folder.resolve() if folder.is_dir() else folder.resolve().parent
        files = [*trace_files([folder]), *(sorted(folder.rglob(f"*{GAP_SUFFIX}")) if folder.is_dir() else [])]
        for path in files:
            data = _publishable(path, inside)
            if data is None:
                skipped += 1
                continue
            target = dest / (path.relative_to(folder) if folder.is_dir() else path.name)
            if not (target.is_file() and not target.is_symlink() and target.read_bytes() == data):
                target.parent.mkdir(parents=True, exist_ok=True)
                write_bytes(target, data)
            n += 1
        kept.append({"name": name, "source": published_source(folder), "files": n,
                     **({"skipped": skipped} if skipped else {})})
    return kept


def read_folders(folders: Iterable[Path]) -> tuple[list[Trace], list[Gap], list[str]]:
    """Every trace and gap under ``folders``; unreadable files are reported, not fatal.
    A trace or gap met twice (a folder given twice, ``--with-traces`` at the survey's
    own traces, a copy) counts once: the same content is the same evidence.

    The cyclic GC is off while they are read, and what they made is frozen after
    (gc.freeze): a survey's 600 traces are millions of objects without a cycle among
    them, which each full collection walked again, 20 of the 25 s their loading took,
    and 12 s at each full collection after it. They live as long as the command does."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        found = _read_folders(folders)
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return found


def _read_folders(folders: Iterable[Path]) -> tuple[list[Trace], list[Gap], list[str]]:
    traces, gaps, problems = [], [], []
    seen_traces: set[str] = set()
    seen_gaps: set[tuple[str, ...]] = set()
    for folder in folders:
        for path in trace_files([folder]):
            try:
                trace = load(path)
            except TraceFormatError as exc:
                problems.append(str(exc))
                continue
            digest = _content_digest(path)
            if digest not in seen_traces:
                seen_traces.add(digest)
                traces.append(trace)
        if Path(folder).is_dir():
            for path in sorted(Path(folder).rglob(f"*{GAP_SUFFIX}")):
                try:
                    g = load_gap(path)
                except (OSError, ValueError) as exc:
                    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                    problems.append(f"{path}: unreadable gap record ({str(why)[:200]})")
                    continue
                key = tuple(str(v) for v in g.__dict__.values())
                if key not in seen_gaps:
                    seen_gaps.add(key)
                    gaps.append(g)
    return traces, gaps, problems


def _content_digest(path: Path) -> str:
    """The SHA-256 of a file just loaded (so a regular file, of bounded size)."""
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return str(path.resolve())


@dataclass
class SurveyRecord:
    """What ``survey.json`` holds beside the report's figures (its ``report`` key): the
    command, the machine, what was planned and lost, and the seconds of each stage
    (probing, importing the reference profiles, deriving the GPU evidence, rendering the
    report) and of the whole command."""

    command: str
    started: str  # UTC, ISO 8601
    machine: dict[str, object]
    frameworks: list[str]
    jobs: int
    cases: int
    gaps: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    #: each job's wall time where it ran here, by its folder (framework/device-variant), with
    #: the workload's name after it for a workload's own job (torch/aarch64-a64fx-default resnet18)
    job_seconds: dict[str, float] = field(default_factory=dict)
    #: where those seconds went, per job, by phase: the framework's import, each layer's
    #: steps, the native capture... (tracer.collect.harness.Spent; what the probe process
    #: measured of its cases; the job's seconds beyond them are its start and its end)
    job_phases: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the jobs not probed because their variant's path is the default's on this CPU, and why
    same_as_default: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, "version": 1, "tool_version": __version__, **self.__dict__},
                          indent=1)


def write_record(root: Path, record: SurveyRecord) -> Path:
    """``root/survey.json``, written atomically (a survey interrupted before it leaves the
    previous record, never half of one)."""
    path = root / RECORD
    doc = json.loads(record.to_json())
    report = read_json_object(path).get(REPORT_KEY)
    if report is not None:  # the report's figures, written beside the record when the report was rendered
        doc[REPORT_KEY] = report
    write_text(path, json.dumps(doc, indent=1))
    return path




