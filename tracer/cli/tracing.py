"""Commands on one trace or two: probe (record one), diff (where two part), export."""

from __future__ import annotations

from pathlib import Path

import click

from tracer import pipeline
from tracer.cli.common import (API, CPU_MODEL, DEVICE, FRAMEWORK, LAYER_LIST, LAYERS_HELP, WORKLOAD, OutPath,
                               Seconds, Shape, command_line, err, flat, frameworks, layers_in_order, main, out)
from tracer.cli.doors import check_door, door_option
from tracer.cli.workloads import equip, user_workload, verbose_failure, workload_options
from tracer.contract import LAYERS, MODELS, PASSES, PHASES, USER_API, workload_passes
from tracer.contract import check_shape
from tracer.derive import derive as run_derive
from tracer.errors import DltraceError, UsageError
from tracer.files import ensure_file_parent, replacing
from tracer.knowledge import knowledge
from tracer.processing.candidates import find_candidates
from tracer.processing.diff import DiffError, describe, diff_traces
from tracer.processing.ran_kernels import split_kernels
from tracer.processing.sampling import DEFAULT_THRESHOLD
from tracer.processing.standin_record import lost_passes
from tracer.render import EXPORTS
from tracer.render.compiled_console import print_compiled
from tracer.render.console import print_trace
from tracer.render.diff_console import print_candidates, print_diff
from tracer.render.export import select_trees
from tracer.render.terminal import STDOUT, TerminalSafe, clip, safe
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, check, probe_one
from tracer.trace import Trace, load, save


# --------------------------------------------------------------------------- probe
@main.command()
@click.argument("framework", type=FRAMEWORK)
@click.argument("primitive", type=WORKLOAD, required=False)
@workload_options
@click.option("--device", type=DEVICE, default="cpu", show_default=True,
              help="cpu, gpu, or standin (torch's and JAX's stand-in backend); the framework must declare it.")
@door_option
@click.option("--variant", default="default", show_default=True,
              help="A variant from frameworks.yaml (see dltrace list).")
@click.option("--pass", "pass_", type=click.Choice([*PASSES, "both"]), default="both", show_default=True)
@click.option("--api", type=API, default=None,
              help="The API level the probe calls (default: functional, or a model's first level).")
@click.option("--shape", type=Shape(), default=None,
              help="Input shape, e.g. 8x64x112x112 (NCHW; NxF for dense and activations).")
@click.option("--phase", type=click.Choice(list(PHASES)), default="warm", show_default=True,
              help="Which call to print.")
@click.option("-o", "--output", type=OutPath(dir_okay=False, path_type=Path),
              help="Write the trace (JSON; .gz compresses).")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds before the probe is stopped.")
@click.option("--max-depth", type=click.IntRange(min=1), default=40, show_default=True,
              help="Print the call tree this many frames deep (the trace keeps all).")
@click.option("--max-nodes", type=click.IntRange(min=1), default=400, show_default=True,
              help="Print at most this many frames of the call tree (the trace keeps all).")
@click.option("--layers", "--layer", "layers", type=LAYER_LIST, multiple=True,
              help=f"Layers to record and print (default: all; python is always recorded): {LAYERS_HELP}.")
@click.option("--cpu", type=CPU_MODEL, default=None,
              help="Run on this emulated aarch64 CPU (see dltrace list): the framework's aarch64 wheels under QEMU; "
                   "no native layer there.")
def probe(framework: str, primitive: str | None, workload: str | None, name: str | None, verbose: bool,
          device: str, door: str, variant: str, pass_: str, api: str | None,
          shape: tuple[int, ...] | None, phase: str, output: Path | None, timeout: float, max_depth: int,
          max_nodes: int, layers: tuple[tuple[str, ...], ...], cpu: str | None) -> None:
    """Trace PRIMITIVE (or a model's training step: lenet, cifar, transformer), or your
    own training step (--workload FILE.py[:FUNCTION], docs/workloads.md), under
    FRAMEWORK and print the call tree of its warm path. With --door compiled (torch):
    the step under torch.compile, and what its backend must lower."""
    check_door(framework, door)
    if door == "compiled" and device != "cpu":
        raise UsageError("--door compiled runs the graphs on the cpu device (it is the backend's list, not a "
                         "device's): leave --device out")
    user = user_workload(primitive, workload, name, api, shape)
    if user is not None:
        primitive, api = user.name, USER_API
    if primitive is None:
        raise UsageError("give a PRIMITIVE or model, or --workload FILE.py (see: dltrace list)")
    api = api or (MODELS[primitive].apis[0] if primitive in MODELS else "functional")
    if primitive in MODELS and api not in MODELS[primitive].apis:
        raise UsageError(f"{primitive} is written at the {' and '.join(MODELS[primitive].apis)} level only, not {api}")
    fw = check(frameworks(), framework, None if user else primitive, device, variant, None if user else api, user)
    if user is not None:
        equip(fw, [user], emulated=cpu is not None)
    if shape:  # the rank before anything: a wrong one must not first meet the file system (the trace's name)

        wrong = check_shape(primitive, shape)
        if wrong:
            raise UsageError(wrong)
    chosen = layers_in_order(layers)
    if cpu and "native" in chosen:
        if layers:
            raise UsageError("the native layer cannot be recorded on an emulated CPU: py-spy cannot attach under QEMU")
        chosen = tuple(layer for layer in chosen if layer != "native")
    if device == "standin" and set(chosen) - {"python", "op"}:
        # below the op layer is the stand-in's own CPU computation, not what a backend runs
        if layers:
            raise UsageError("the standin device records the python and op layers only: its library calls and "
                             "native stacks are the CPU computation it stands in with")
        chosen = tuple(layer for layer in chosen if layer in ("python", "op"))
    passes = PASSES if user else workload_passes(primitive)
    if pass_ != "both" and pass_ not in passes:
        raise UsageError(f"{primitive} has no {pass_} pass (it has: {', '.join(passes)})")
    spec = CaseSpec(primitive, api, shape or (),
                    passes if pass_ == "both" else (pass_,),
                    layers=("python", *(layer for layer in chosen if layer != "python")), user=user)
    if output:
        ensure_file_parent(output)  # before probing: a probe's result must not be lost to a bad path
    with err.status(f"tracing {framework} {primitive} ({api}, {device}, {variant})…"), verbose_failure(verbose):
        trace = probe_one(fw, spec, device, variant, timeout, command=command_line(), cpu=cpu or "", door=door)
    if user is not None and nothing_on_device(trace):
        raise DltraceError(f"workload {Path(user.file).name}: its step put nothing on the {device} device (no op "
                           f"reached it): it computes elsewhere, so there is no list of what a backend needs; move "
                           f"its model and inputs to the device its function is given")

    print_trace(trace, out, phase=phase, layers=chosen, max_depth=max_depth, max_nodes=max_nodes, k=knowledge())
    if output:
        save(trace, output)
        err.print(f"trace written to {output}", style="dim", highlight=False, markup=False)
    if door == "compiled":
        show_compiled([trace], primitive)
    lost = lost_passes(trace) if trace.info.standin is not None else {}
    if lost:  # the trace is kept (it says what was lost); the list it holds is no must-implement list
        what, why = next(iter(lost.items()))
        raise DltraceError(f"the {device} device's list is incomplete, not a must-implement list: {what} did not "
                           f"run whole there: {clip(why, 300)}")


def show_compiled(traces: list[Trace], title: str) -> None:
    """Print the compiled door's list of ``traces``; a compile that failed or made no
    graph is then one line (after what was printed: the eager run is still there)."""
    _, needs = pipeline.doors(traces)
    if needs is None:
        raise DltraceError(f"{title}: the trace holds no compiled door's record")
    print_compiled(needs, out, title)
    problem = needs.problem()
    if problem:
        raise DltraceError(f"{title}: {clip(problem, 400)}")


def nothing_on_device(trace: Trace) -> bool:
    """A stand-in run whose step sent the device nothing (its setup, its passes and
    their first calls all empty): an empty list would read as a backend that needs
    nothing, when the workload ran on the CPU."""
    standin = trace.info.standin
    if standin is None:
        return False
    first = trace.meta.get("standin", {}).get("first_step") or {}
    lists = [*standin.reached.values(), *(first.values() if isinstance(first, dict) else ())]
    return not any(lists)


# --------------------------------------------------------------------------- diff
@main.command()
@click.argument("trace_a", metavar="A.json")
@click.argument("trace_b", metavar="[B.json]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--layers", "--layer", "layers", type=LAYER_LIST, multiple=True,
              help=f"Layers to diff (default: all): {LAYERS_HELP}.")
@click.option("--pass", "pass_", type=click.Choice(list(PASSES)), default="forward", show_default=True)
@click.option("--phase", type=click.Choice(list(PHASES)), default="warm", show_default=True)
@click.option("--threshold", type=float, default=DEFAULT_THRESHOLD, show_default=True,
              help="Sampled layers: a frame counts only when in at least this share of the samples.")
@click.option("--force", is_flag=True, help="Diff traces of different frameworks or primitives anyway.")
def diff(trace_a: str, trace_b: str | None, as_json: bool, layers: tuple[tuple[str, ...], ...], pass_: str,
         phase: str, threshold: float, force: bool) -> None:
    """Where the paths of two traces split (A.json B.json), or, with one trace, the
    branches on the device or backend that could split it (candidate split points)."""
    import json

    a = load(trace_a)
    wanted = layers_in_order(layers)
    if trace_b is None:
        if "python" not in wanted:
            raise DiffError(f"single-trace mode reads the python layer, not the {'/'.join(wanted)} layer; "
                            "give a second trace")
        if a.run(pass_, phase) is None:
            raise DiffError(f"{trace_a}: no {phase} {pass_} run")
        candidates = find_candidates(a, pass_, phase)
        if as_json:
            STDOUT.write(json.dumps({"mode": "candidates", "trace": trace_a, "pass": pass_, "phase": phase,
                                     "candidates": [c.to_json() for c in candidates]}, indent=2) + "\n")
        else:
            print_candidates(candidates, out, describe(a), pass_, phase)
        return
    b = load(trace_b)
    k = knowledge()  # loaded once, handed to each stage
    result = diff_traces(a, b, pass_, phase, wanted, threshold, force, k=k)

    ran = split_kernels(a, b, pass_, k)  # the framework's own kernels only one side ran
    if as_json:
        STDOUT.write(json.dumps({"mode": "diff", "a_file": trace_a, "b_file": trace_b, **result.to_json(),
                                 "kernels": {"A": ran[0], "B": ran[1]}}, indent=2) + "\n")
    else:
        print_diff(result, out, (trace_a, trace_b))
        if ran[0] or ran[1]:
            out.print(safe(f"what the framework ran: A {', '.join(ran[0]) or '—'} · B {', '.join(ran[1]) or '—'}"),
                      markup=False, highlight=False)


# --------------------------------------------------------------------------- export
@main.command()
@click.argument("trace_file", metavar="TRACE")
@click.option("--format", "fmt", type=click.Choice(list(EXPORTS)), required=True,
              help="; ".join(f"{name}: {what}" for name, (_, what) in EXPORTS.items()) + ".")
@click.option("-o", "--output", type=OutPath(dir_okay=False, path_type=Path), help="Write here (default: stdout).")
@click.option("--layers", "--layer", "layers", type=LAYER_LIST, multiple=True,
              help=f"Layers to write (default: all in the trace): {LAYERS_HELP}.")
@click.option("--pass", "pass_", type=click.Choice([*PASSES, "both"]), default="both", show_default=True)
@click.option("--phase", type=click.Choice(list(PHASES)), default="warm", show_default=True)
def export(trace_file: str, fmt: str, output: Path | None, layers: tuple[tuple[str, ...], ...], pass_: str,
           phase: str) -> None:
    """Write TRACE's call trees in a format other tools read: native layers as samples,
    python and op layers weighted by time (nanoseconds) or, without times, by calls."""
    trace = load(trace_file)
    wanted = flat(layers) or LAYERS
    trees = select_trees(trace, wanted, PASSES if pass_ == "both" else (pass_,), phase)
    if not trees:
        have = sorted({f"{r.phase} {r.pass_}: {', '.join(r.layers)}" for r in trace.runs})
        raise DltraceError(f"{trace_file}: no {'/'.join(wanted)} layer in the {phase} runs asked for "
                           f"(it has: {'; '.join(have) or 'no runs'})")
    write = EXPORTS[fmt][0]
    if output:
        ensure_file_parent(output)
        with replacing(output, "w") as fh:
            write(trace, trees, fh)
        err.print(f"{fmt} written to {output} ({len(trees)} trees)", style="dim", highlight=False, markup=False)
    else:
        write(trace, trees, TerminalSafe(STDOUT) if STDOUT.isatty() else STDOUT)
        STDOUT.flush()


# --------------------------------------------------------------------------- derive
@main.command()
@click.argument("framework", type=FRAMEWORK)
@click.argument("primitives", type=WORKLOAD, nargs=-1)
@click.option("--api", type=API, default=None, help="The API level (default: every API level the framework has, "
                                                    "or a model's own levels).")
@click.option("-o", "--output", "out_dir", type=OutPath(file_okay=False, path_type=Path), required=True,
              help="Folder for the traces (SLUG-gpu-evidence.json).")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds before the probe is stopped.")
def derive(framework: str, primitives: tuple[str, ...], api: str | None, out_dir: Path, timeout: float) -> None:
    """Derive FRAMEWORK's GPU path for PRIMITIVES (default: all; a model's name derives
    its training step) without a GPU: the GPU
    build's kernel registry (tensorflow, torch: registered), JAX's lowering for cuda and
    rocm (lowered), Chainer's forward_gpu source (source). Each trace says device gpu,
    its evidence class and what was read."""
    fws = frameworks()
    fw = check(fws, framework, None, "cpu", None, api)
    if not fw.gpu_evidence:
        raise UsageError(f"{framework} derives no GPU evidence here (frameworks that do: "
                         f"{', '.join(n for n, f in fws.items() if f.gpu_evidence)})")
    with err.status(f"deriving {framework}'s GPU evidence…"):
        results = run_derive(fw, [p for p in primitives if p not in MODELS], out_dir, (api,) if api else None, timeout,
                             command_line(), models=[p for p in primitives if p in MODELS])
    for r in results:
        if r.error:
            err.print(f"✗ {r.spec.primitive} {r.spec.api}: {r.error}", markup=False, highlight=False)
        else:
            out.print(f"✓ {r.spec.primitive} {r.spec.api} ({fw.gpu_evidence}): {r.path}", markup=False, highlight=False)
    if all(r.error for r in results):
        raise DltraceError(f"no GPU evidence derived for {framework}")
