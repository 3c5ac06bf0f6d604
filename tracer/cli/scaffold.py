"""The scaffold command: a backend skeleton registering exactly what a new device must
implement for a model's training step or some primitives, and its check."""

from __future__ import annotations

from pathlib import Path

import click

from tracer import envs
from tracer import scaffold as sc
from tracer.cli.common import API, FRAMEWORK, MODEL_LIST, PRIMITIVE_LIST, OutPath, Seconds, command_line, err, \
    frameworks, main, out
from tracer.errors import DltraceError, UsageError
from tracer.cli.doors import check_door, door_option
from tracer.cli.workloads import WORKLOAD_HELP, distinct, equip, parse
from tracer.runner import DEFAULT_TIMEOUT, check_workload


@main.command()
@click.argument("framework", type=FRAMEWORK)
@click.option("--model", "models", type=MODEL_LIST, default=(), help="The model(s) whose training step the backend "
              "must run: lenet, cifar, transformer (comma-separated).")
@click.option("--primitives", type=PRIMITIVE_LIST, default=(),
              help="The primitives the backend must run forward and backward (comma-separated).")
@click.option("--workload", "workloads", metavar="FILE.py[:FUNCTION]", multiple=True,
              help=WORKLOAD_HELP + " Repeatable.")
@click.option("--api", type=API, default=None, help="One API level (default: every level each is written at).")
@click.option("-o", "--output", "folder", type=OutPath(file_okay=False, path_type=Path), required=True,
              help="The folder to write the skeleton in (with --check alone: the skeleton to check).")
@click.option("--check", "run_check", is_flag=True,
              help="Run the steps on the skeleton: exit 0 only when they match the CPU, no op outside the list is "
                   "reached and each op on it is needed.")
@click.option("--name", default="mydevice", show_default=True,
              help="The backend's name (torch: PrivateUse1 renamed; its package's name).")
@click.option("--force", is_flag=True, help="Write into a folder that is not empty.")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds before the stand-in run, or the check, is stopped.")
@door_option
def scaffold(framework: str, models: tuple[str, ...], primitives: tuple[str, ...], workloads: tuple[str, ...],
             api: str | None, folder: Path, run_check: bool, name: str, force: bool, timeout: float,
             door: str) -> None:
    """Write a minimal backend that holds exactly the ops the stand-in device says a
    backend must implement for MODEL's training step (or PRIMITIVES, or your
    workload), each computing on the CPU, every other op refused; with --check, prove
    it. torch: a PrivateUse1 backend in Python; tensorflow: a PluggableDevice in C++
    (its kernel registrations and its device, built by the check); jax: the op table
    of the StableHLO ops a PJRT plugin must execute, run by dltrace's consumer. With
    --check and neither --model nor --primitives: check the skeleton already in the
    folder (after editing its kernels). With --door compiled (torch): a torch.compile
    backend lowering the ops of AOTAutograd's graphs, each graph node run through its
    table, every other op refused."""
    check_door(framework, door)
    writer = sc.COMPILED_WRITERS[framework] if door == "compiled" else sc.check_framework(framework)
    fw = frameworks()[framework]
    users = distinct([check_workload(parse(w)) for w in workloads], framework)
    equip(fw, users)
    cases = [*models, *primitives]
    if not cases and not users and not run_check:
        raise UsageError("give --model, --primitives or --workload (or --check alone to check the skeleton in the "
                         "folder)")
    if cases or users:
        sc.check_name(name, framework)
        specs = sc.plan(fw, cases, api, users)
        running = ", ".join([*cases, *(u.name for u in users)])
        made = not folder.exists()
        sc.prepare(folder, force)  # before the run: its result must not be lost to a bad folder
        try:
            envs.python_for(fw)
            where = "under torch.compile" if door == "compiled" else f"on {framework}'s stand-in device"
            with err.status(f"running {running} {where}…"):
                traces = sc.stand_in(fw, specs, timeout, command_line(), door=door)
        except BaseException:  # a run that could not start or failed leaves no folder it made
            if made and not any(folder.iterdir()):
                folder.rmdir()
            raise
        ks = writer.write(folder, name, specs, traces, command_line())
        what = writer.summary.format(name=name, n=len(ks))
        passes = {p: sum(p in k.passes for k in ks) for p in ("setup", "forward", "backward")}
        out.print(f"{folder}: {what} "
                  f"({', '.join(f'{p} {n}' for p, n in passes.items() if n or p != 'setup')}; ops.txt lists them)",
                  markup=False, highlight=False, soft_wrap=True)
    elif api is not None or force or name != "mydevice":
        raise UsageError("--api, --name and --force shape a skeleton being written: give --model, --primitives or "
                         "--workload")
    if run_check:
        with err.status("checking the skeleton…"):
            result = sc.check(fw, folder, timeout)
        for line in result.lines:
            out.print(line, markup=False, highlight=False, soft_wrap=True)
        if not result.ok:
            raise DltraceError(f"check failed: {result.reason}")
