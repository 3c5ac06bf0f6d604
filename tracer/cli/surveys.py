"""Commands on folders of traces: survey (probe everything, keep every trace), report and
audit (from traces alone), import (traces recorded elsewhere, by other tools)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from pathlib import Path

import click

from tracer import fleet, pipeline
from tracer import survey as sv
from tracer.cli.common import (CPU_MODEL, DEVICE_LIST, FRAMEWORK, FRAMEWORKS, MODEL_LIST, PRIMITIVE_LIST, WORKLOAD,
                               OutPath, Seconds, command_line, err, flat, frameworks, main, out)
from tracer import tempdirs
from tracer.cli.doors import audit_compiled, check_door, door_option
from tracer.cli.workloads import distinct, equip, parse, verbose_failure, workload_options
from tracer.contract import MODELS, PASSES, USER_API, UserWorkload, workload_passes
from tracer.errors import UsageError
from tracer.files import ensure_file_parent
from tracer.render import coverage_export
from tracer.render.audit_console import print_workload_audit
from tracer.registry_entries import Framework
from tracer.runner import CaseSpec, check, check_workload
from tracer.workload_record import record as record_workload
from tracer.errors import DltraceError
from tracer.files import ensure_dir, write_text
from tracer.importers import ImportFailed, file_suffixes, import_file, importable, imported_path
from tracer.importers.source import short_name
from tracer.render.audit_console import print_audit, print_pass_needs
from tracer.render.terminal import clip, message
from tracer.runner import DEFAULT_TIMEOUT
from tracer.survey import SurveyEvent
from tracer.trace import save

def tls_options(role: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The TLS files of a fleet's ``role`` (client: a survey; worker), Dask's own names
    for them; without them Dask's settings (distributed.comm.tls.*) are read."""
    def add(f: Callable[..., None]) -> Callable[..., None]:
        for opt, what in (("--tls-key", f"this {role}'s private key"),
                          ("--tls-cert", f"this {role}'s certificate, signed by the CA"),
                          ("--tls-ca-file", "the CA certificate every side of the fleet trusts")):
            f = click.option(opt, type=click.Path(exists=True, dir_okay=False), default=None,
                             help=f"TLS: {what} (for a tls:// scheduler).")(f)
        f = click.option("--trust-local-users", is_flag=True,
                         help="Use a plain tcp:// scheduler on loopback though this machine has other users "
                              "(each could reach it and run code here; default: refused, docs/fleet.md).")(f)
        return f
    return add


# --------------------------------------------------------------------------- survey / report

#: A survey's probe runs a whole job (every case of a framework, device and variant, the
#: examples and native stacks among them) in one process: its time limit is the job's.
SURVEY_TIMEOUT = 2 * DEFAULT_TIMEOUT

@main.command()
@click.argument("names", type=FRAMEWORK, nargs=-1)
@click.option("--primitives", type=PRIMITIVE_LIST, multiple=True,
              help="Comma-separated primitives (default: all).")
@click.option("--models", type=MODEL_LIST, multiple=True,
              help="Comma-separated models whose training step is probed (default: all; see --no-models).")
@click.option("--no-models", is_flag=True, help="No models, nor examples: the primitives only (and --workload's).")
@click.option("--workload", "workloads", metavar="[FRAMEWORK=]FILE.py[:FUNCTION]", multiple=True,
              help="Your own training step (docs/workloads.md), on the models page beside the built-in networks; "
                   "FRAMEWORK= says which framework runs it (needed when several are surveyed). Repeatable.")
@click.option("--examples/--no-examples", default=True, show_default=True,
              help="Run each framework's examples (real models from its own model zoo, frameworks.yaml examples) "
                   "as workloads.")
@click.option("--devices", type=DEVICE_LIST, multiple=True, default=("cpu,standin",), show_default=True,
              help="Comma-separated devices (a framework is probed on those it declares: standin is torch's and "
                   "JAX's stand-in backend).")
@click.option("-o", "--output", type=OutPath(file_okay=False, path_type=Path), default=Path("reports/survey"),
              show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Probe subprocesses at a time.")
@click.option("--with-traces", "with_traces", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Add traces recorded elsewhere (a GPU or ARM machine); repeatable.")
@click.option("--fresh", is_flag=True, help="Probe again even where a trace exists.")
@click.option("--no-variants", is_flag=True, help="Only the default variant.")
@click.option("--native/--no-native", default=True, show_default=True,
              help="Sample native stacks (py-spy) of each framework's functional cases: the libraries and "
                   "ISA-specific code each primitive reaches (seconds per case).")
@click.option("--arm/--no-arm", default=True, show_default=True,
              help="Also probe each framework on the emulated aarch64 CPUs its registry entry names (frameworks.yaml "
                   "aarch64: A64FX, Neoverse-N1...), for the ARM audit.")
@click.option("--arm-all", is_flag=True,
              help="The whole emulated part (slow under QEMU): every primitive (the transformer family too, and "
                   "all of those of frameworks whose aarch64 entry lists a few: JAX), and every variant (JAX's nojit).")
@click.option("--all-variants", is_flag=True,
              help="Every case in every CPU variant: by default a library or compilation switch (oneDNN off, "
                   "nojit) runs the CNN primitives and a reduced-precision variant (bf16, fp16) every primitive at "
                   "the first API level, without native stacks (about twice the survey's time).")
@click.option("--imports/--no-imports", default=True, show_default=True,
              help="Set the CPU path against each framework's reference GPU paths: the profiles recorded on real "
                   "GPUs by others (frameworks.yaml: imported), imported, and dltrace's own traces recorded on a "
                   "GPU machine (frameworks.yaml: recorded).")
@click.option("--derive/--no-derive", "derived", default=True, show_default=True,
              help="Derive each framework's GPU path without a GPU (dltrace derive: TensorFlow's and torch's "
                   "registered GPU kernels, JAX's cuda/rocm lowering, Chainer's forward_gpu source), "
                   "beside the traces.")
@click.option("--timeout", type=Seconds(), default=SURVEY_TIMEOUT, show_default=True,
              help="Seconds per probe subprocess (one runs every case of a framework, device and variant: on a "
                   "busy 2-core machine JAX's CPU job with its examples and native stacks took 10 minutes).")
@click.option("--door", "door", type=click.Choice(["both", "eager"]), default="both", show_default=True,
              help="both: each torch model's and example's compiled door (torch.compile's graphs) is recorded beside "
                   "its stand-in run, and the models page shows the two lists; eager: the stand-in only.")
@click.option("--scheduler", default=None, metavar="tls://HOST:PORT",
              help="Run the jobs on the workers of this Dask scheduler (dltrace worker) instead of here: "
                   "tls:// with certificates, or tcp:// on this machine only (docs/fleet.md).")
@tls_options("client")
def survey(names: tuple[str, ...], primitives: tuple[tuple[str, ...], ...], models: tuple[tuple[str, ...], ...],
           no_models: bool, workloads: tuple[str, ...], examples: bool, devices: tuple[tuple[str, ...], ...],
           output: Path, jobs: int, with_traces: tuple[Path, ...], fresh: bool, no_variants: bool, native: bool,
           arm: bool, arm_all: bool, all_variants: bool, imports: bool, derived: bool, timeout: float,
           door: str, scheduler: str | None,
           tls_ca_file: str | None, tls_cert: str | None, tls_key: str | None, trust_local_users: bool) -> None:
    """Probe every primitive of NAMES (default: all frameworks) on every device and
    variant, diff the pairs, and write the HTML report to OUTPUT; OUTPUT/survey.json
    records what ran and how long each stage took."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    fleet_at = None
    if scheduler is not None:  # checked before any work; '' is a bad address, never "run here"
        fleet_at = fleet.scheduler(scheduler, "client", tls_ca_file, tls_cert, tls_key, trust_local_users)
        fleet.check_reachable(fleet_at, "client")
    fws = frameworks()
    prims = list(flat(primitives)) or None
    devs = list(flat(devices))
    chosen = [fws[n] for n in (dict.fromkeys(names) or fws)]
    ensure_dir(output / "traces")  # before probing: results must have somewhere to go
    ready, missing = sv.ready_frameworks(chosen)
    for fw in missing:
        err.print(message("!", "yellow",
                          f"{fw.name}: environment not set up (dltrace env setup {fw.name}); marked as a gap"),
                  highlight=False, soft_wrap=True)
    nets = [] if no_models else list(flat(models)) or list(MODELS)
    users = _survey_workloads(chosen, workloads, examples and not no_models)
    for fw in chosen:
        if fw in ready and users.get(fw.name):
            try:
                equip(fw, users[fw.name], emulated=arm and fw.aarch64 is not None)
            except DltraceError as exc:  # its workloads' cases then say what is missing: a gap each
                err.print(message("!", "yellow", f"{fw.name}: {exc}"), highlight=False, soft_wrap=True)
    jobs_list = sv.plan(chosen, prims, devs, variants=not no_variants, native=native, arm=arm,
                        arm_all=arm_all, models=nets, all_variants=all_variants, workloads=users,
                        doors=door == "both", isa=() if fleet_at is not None else None)
    plan = pipeline.SurveyPlan(chosen, jobs_list, output, command_line(), ready, prims, nets, users,
                               list(with_traces), jobs, fresh, timeout, imports, derived, fleet_at)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as progress:
        said = Said(progress, progress.add_task("survey", total=sum(len(j.cases) for j in jobs_list)))
        pipeline.survey(plan, said)


class Said:
    """The command line's account of a survey or report as it runs (tracer.pipeline's
    Progress): jobs advance the bar, results go to stdout, the rest to stderr."""

    def __init__(self, progress: Any = None, task: Any = None):
        self.progress, self.task = progress, task

    def stage(self, name: str) -> None:
        if name != "probing" and self.progress is not None:  # the bar is done: the other stages' lines follow
            self.progress.stop()

    def job_done(self, e: SurveyEvent) -> None:
        if self.progress is None:
            return
        self.progress.advance(self.task, e.done)
        if e.same_as_default:
            self.progress.console.print(f"  {e.job.folder}: not probed, the same path as the default "
                                        f"({e.same_as_default})", style="dim", highlight=False)
            return
        note = f", {len(e.gaps)} gaps" if e.gaps else ""
        reused = f", {e.reused} reused" if e.reused else ""
        self.progress.console.print(f"  {e.job.folder}: {e.done} cases{reused}{note}", style="dim", highlight=False)

    def note(self, text: str, kind: str = "detail") -> None:
        if kind == "result":
            out.print(text, markup=False, highlight=False)
        elif kind == "warning":
            err.print(message("!", "yellow", text), highlight=False, soft_wrap=True)
        else:
            err.print(text, style="yellow" if kind == "problem" else "dim", highlight=False, markup=False)


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", type=OutPath(file_okay=False, path_type=Path), required=True)
def report(traces: tuple[Path, ...], output: Path) -> None:
    """Render the HTML report from TRACES folders alone (no framework needed)."""
    pipeline.report(list(traces), output, Said())


def _survey_workloads(chosen: list[Framework], given: tuple[str, ...], examples: bool) -> dict[str, list[UserWorkload]]:
    """framework -> the workloads a survey runs under it: each framework's examples
    (frameworks.yaml) and the user's own (``[FRAMEWORK=]FILE.py[:FUNCTION]``), each
    checked before anything runs."""
    names = [fw.name for fw in chosen]
    out: dict[str, list[UserWorkload]] = {n: [] for n in names}
    for text in given:
        fw_name, sep, ref = text.partition("=")
        if not sep or "/" in fw_name or fw_name.endswith(".py") or (fw_name not in frameworks()
                                                                   and Path(text).is_file()):
            fw_name, ref = "", text  # a file whose name holds "=" (a=b.py) is a file, not framework a
        if not fw_name:
            if len(names) != 1:
                raise UsageError(f"--workload {text}: say which framework runs it, FRAMEWORK={text} (this survey "
                                 f"has {', '.join(names)})")
            fw_name = names[0]
        if fw_name not in out:
            raise UsageError(f"--workload {text}: {fw_name} is not one of this survey's frameworks "
                             f"({', '.join(names)}); for a file of that name, write FRAMEWORK={text} or ./{text}")
        out[fw_name].append(check_workload(parse(ref)))
    if examples:
        for fw in chosen:
            for ex in fw.examples.values():
                if ex.path.is_file():
                    out[fw.name].append(UserWorkload.parse(str(ex.path)))
    return {fw_name: distinct(ws, fw_name) for fw_name, ws in out.items()}


@main.command()
@click.argument("framework", type=FRAMEWORK)
@click.option("--traces", "folders", multiple=True, type=click.Path(path_type=Path),
              default=(Path("reports/survey/traces"),), show_default=True,
              help="Trace folders (a survey's, a GPU machine's...); with --workload, the built-in cases' traces its "
                   "ops are set against (where there are none, it is said).")
@workload_options
@click.option("-o", "--output", type=OutPath(dir_okay=False, path_type=Path), default=None,
              help="With --workload: write its per-op table here too (.csv or .json).")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT, show_default=True,
              help="With --workload: seconds per probe subprocess.")
@door_option
@click.option("--case", "case", type=WORKLOAD, default=None,
              help="With --door compiled: a built-in case (a model or primitive) run through both doors.")
@click.option("--cpu", "cpus", type=CPU_MODEL, multiple=True,
              help="With --workload: run it on this emulated ARM CPU too (repeat for more: --cpu a64fx --cpu "
                   "neoverse-n1), and say per op what computed it there and what a port must replace.")
def audit(framework: str, folders: tuple[Path, ...], workload: str | None, name: str | None, verbose: bool,
          output: Path | None, timeout: float, door: str, case: str | None, cpus: tuple[str, ...]) -> None:
    """The porting audit of FRAMEWORK from its traces: the dispatch points a new
    backend must hook into, and what each primitive needs from it. With --workload:
    your own training step, run here (the CPU, the stand-in device, the GPU path
    derived), its must-implement list and decision sites, op by op. With --door
    compiled (torch): the step (--workload or --case) through both doors, what a
    torch.compile backend must lower beside what an eager backend must implement."""
    check_door(framework, door)
    if door == "compiled":
        _audit_doors(framework, workload, name, case, verbose, output, timeout)
        return
    if case is not None:
        raise UsageError("--case goes with --door compiled (the eager door's built-in cases are read from --traces)")
    if workload is not None:
        _audit_workload(framework, list(folders), parse(workload, name), verbose, output, timeout,
                        tuple(dict.fromkeys(cpus)))
        return
    if output is not None or name is not None or cpus:
        raise UsageError("-o, --name and --cpu go with --workload (a survey's traces already hold its ARM CPUs)")
    rep = pipeline.audit(framework, list(folders), progress=Said())
    print_audit(rep, out)
    print_pass_needs(rep, out)


def _audit_doors(framework: str, workload: str | None, name: str | None, case: str | None, verbose: bool,
                 output: Path | None, timeout: float) -> None:
    """``audit --door compiled``: one step (a workload or a built-in case) through both doors."""
    if (workload is None) == (case is None):
        raise UsageError("--door compiled audits one step: give --workload FILE.py or --case NAME")
    if output is not None and output.suffix not in (".csv", ".json"):
        raise UsageError(f"-o {output}: name a .csv or .json file")
    user = parse(workload, name) if workload is not None else None
    primitive = user.name if user is not None else str(case)
    api = USER_API if user is not None else (MODELS[primitive].apis[0] if primitive in MODELS else "functional")
    fw = check(frameworks(), framework, None if user else primitive, "cpu", None, None if user else api, user)
    if user is not None:
        equip(fw, [user])
    if output is not None:
        ensure_file_parent(output)
    spec = CaseSpec(primitive, api, (), PASSES if user else workload_passes(primitive), user=user)
    with verbose_failure(verbose):
        audit_compiled(fw, spec, primitive, output, timeout)


def _audit_workload(framework: str, folders: list[Path], user: UserWorkload, verbose: bool, output: Path | None,
                    timeout: float, cpus: tuple[str, ...] = ()) -> None:
    """The audit of one user workload: recorded here (and on the emulated ``cpus``), set
    against the built-in cases' traces in ``folders`` where there are any."""
    fw = check(frameworks(), framework, device="cpu", user=user)
    if cpus and (fw.aarch64 is None or fw.aarch64.unavailable):
        why = fw.aarch64.unavailable if fw.aarch64 is not None else "no aarch64 entry in frameworks.yaml"
        raise UsageError(f"{framework} cannot run on {', '.join(cpus)} (emulated): {why}")
    equip(fw, [user], emulated=bool(cpus))
    if output is not None:
        if output.suffix not in (".csv", ".json"):
            raise UsageError(f"-o {output}: name a .csv or .json file")
        ensure_file_parent(output)  # before running: a result must not be lost to a bad path
    with tempdirs.owned("dltrace-audit-") as tmp, verbose_failure(verbose):
        with err.status(f"running {user.name} under {framework}…") as status:
            traces, gaps = record_workload(fw, user, tmp, timeout, command_line(), lambda s: status.update(s + "…"),
                                           cpus)
    for g in gaps:
        err.print(message("!", "yellow", f"{g.device}: {g.error}"), highlight=False, soft_wrap=True)
    audited = pipeline.audit_workload(framework, user.name, traces, gaps, folders, progress=Said())
    print_workload_audit(audited, out)
    cov = audited.row.coverage
    if cov is None:
        raise DltraceError(f"{user.name}: no list was recorded in {framework}")
    if cov.incomplete:  # printed, as what ran; never written or passed as the list
        raise DltraceError(f"{user.name}: no must-implement list: {clip(cov.incomplete, 400)}")
    if output is not None:
        write_text(output, coverage_export.to_csv(cov) if output.suffix == ".csv"
                   else json.dumps(coverage_export.to_json(cov), indent=1) + "\n")
        err.print(f"table written to {output}", style="dim", highlight=False, markup=False)


# --------------------------------------------------------------------------- import
@main.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE...")
@click.option("--framework", type=FRAMEWORK, required=True,
              help="The framework that recorded the files; they are read as the profiler formats "
                   "its frameworks.yaml entry declares (profiles: torch's Kineto JSON, JAX's XPlane...).")
@click.option("-o", "--output", type=OutPath(file_okay=False, path_type=Path),
              help="Folder for the traces (default: ./imported/<source name>/; "
                   "with several files, one subfolder each).")
def import_(files: tuple[Path, ...], framework: str, output: Path | None) -> None:
    """Turn GPU profiler files recorded elsewhere into dltrace traces: one trace per
    primitive found, <primitive>-imported.json, its op layer shaped like the CPU probe's
    and the GPU kernels under the ops that launched them."""
    fw = importable(framework)  # a framework with no formats is a usage error before anything is written
    names = [short_name(f.name, file_suffixes(fw)) for f in files]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise DltraceError(f"two files would be written to the same folder ({dup}); import them one at a time with -o")
    base = output if output is not None else Path("imported")
    folders = [base if len(files) == 1 and output is not None else base / n for n in names]
    ensure_dir(base)  # an unwritable output is found first
    failed = 0
    for f, folder in zip(files, folders):  # each file stands alone: a bad one costs only itself
        try:
            results = import_file(f, framework, command=command_line())
        except ImportFailed as exc:
            failed += 1
            err.print(message("dltrace: error:", "red", str(exc)), highlight=False, soft_wrap=True)
            continue
        ensure_dir(folder)
        for r in results:
            path = imported_path(folder, r.primitive)
            save(r.trace, path)
            kernels = (f"{r.kernels} kernel{'s' * (r.kernels != 1)} ({r.launches} launch{'es' * (r.launches != 1)})"
                       if r.kernels else f"{r.launches} operator record{'s' * (r.launches != 1)}, no kernel names")
            out.print(f"{r.primitive}  {'+'.join(r.passes)}  {r.gpu}  {kernels}  -> {path}", markup=False,
                      highlight=False, soft_wrap=True)
    if failed:
        raise click.exceptions.Exit(1)


@main.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8786, show_default=True,
              help="The port on 127.0.0.1 (0: any free one).")
@click.option("--scheduler-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the address here, as Dask's scheduler file (JSON).")
def scheduler(port: int, scheduler_file: Path | None) -> None:
    """Serve a Dask scheduler for a fleet on this machine: on loopback only, over mutual
    TLS with certificates dltrace makes for you (once, under $DLTRACE_HOME), so no other
    local user can run code in its workers. Workers and surveys on this machine reach it
    as tls://127.0.0.1:PORT with no certificate options. Across machines, see docs/fleet.md."""
    def announce(address: str) -> None:
        click.echo(f"scheduler at {address}  (dltrace worker {address}; dltrace survey --scheduler {address})")

    fleet.start_scheduler(port, scheduler_file, announce)


@main.command()
@click.argument("address")
@tls_options("worker")
@click.option("--nthreads", type=click.IntRange(min=1), default=2, show_default=True, help="Jobs at a time.")
@click.option("--name", default=None, help="The name traces record this worker by (meta recorded_by; "
                                           "default: Dask's, the worker's address).")
@click.option("--frameworks", "only", type=FRAMEWORKS, multiple=True,
              help="Comma-separated frameworks to offer (default: every one whose environment is ready).")
@click.option("--emulation/--no-emulation", default=True, show_default=True,
              help="Offer the emulated aarch64 CPUs (the ARM-audit jobs) where their environments are built.")
@click.option("--gpu/--no-gpu", default=True, show_default=True, help="Offer the GPUs nvidia-smi lists.")
@click.option("--workloads", "workload_dirs", multiple=True, type=click.Path(exists=True, file_okay=False,
              path_type=Path), help="Run users' workloads (--workload) whose files are under this folder, on this "
              "machine: a workload is code, run with this worker's rights (default: none). Repeatable.")
def worker(address: str, tls_ca_file: str | None, tls_cert: str | None, tls_key: str | None,
           trust_local_users: bool, nthreads: int,
           name: str | None, only: tuple[tuple[str, ...], ...], emulation: bool, gpu: bool,
           workload_dirs: tuple[Path, ...]) -> None:
    """Serve the Dask scheduler at ADDRESS (tls://HOST:PORT with certificates, or
    tcp://127.0.0.1:PORT on this machine; docs/fleet.md) as a survey worker, declaring
    this machine's architecture, GPUs, ready framework environments and emulated CPUs;
    the options narrow that, so that two workers on one machine can differ."""
    # a bad address: usage, before all
    sched = fleet.scheduler(address, "worker", tls_ca_file, tls_cert, tls_key, trust_local_users)
    fws = frameworks()
    names = flat(only)
    fleet.start_worker(sched, [fws[n] for n in names] if names else fws.values(), nthreads=nthreads, name=name,
                       emulation=emulation, gpu=gpu, workloads=workload_dirs)



