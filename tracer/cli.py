"""The `dltrace` command line. Each command is thin: it validates, calls the engine,
and hands the result to a renderer. User errors are one line, never a traceback."""

from __future__ import annotations

import math
import shlex
import signal
import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from tracer import envs, registry
from tracer.errors import DltraceError
from tracer.files import describe, ensure_dir, ensure_file_parent, replacing
from tracer.registry import APIS, PASSES, PRIMITIVES, RegistryError
from tracer.render.terminal import TerminalSafe, message, safe_console
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, check, probe_one, stop_all
from tracer.trace import TraceFormatError

out = safe_console()
err = safe_console(stderr=True)


class Group(click.Group):
    """Turns the tool's own errors into `dltrace: error: ...` and exit status 1."""

    def invoke(self, ctx: click.Context):
        signal.signal(signal.SIGTERM, _interrupt)  # `kill dltrace`: stop its probes, as Ctrl-C does
        try:
            return super().invoke(ctx)
        except (DltraceError, TraceFormatError, RegistryError, ValueError) as exc:
            err.print(message("dltrace: error:", "red", str(exc)), highlight=False, soft_wrap=True)
            ctx.exit(1)
        except OSError as exc:  # a full disk, a folder that vanished: said in one line
            err.print(message("dltrace: error:", "red", describe(exc, "")), highlight=False, soft_wrap=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            stop_all()
            err.print("dltrace: interrupted", markup=False)
            ctx.exit(130)


def _interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt


class Seconds(click.ParamType):
    """A positive, finite number of seconds: 0 or a negative timeout would stop every
    probe at once, and nan would compare false with everything, i.e. never time out."""

    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return seconds


def _frameworks() -> dict[str, registry.Framework]:
    return registry.load()


def _command_line() -> str:
    return "dltrace " + shlex.join(sys.argv[1:])


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dltrace")
def main() -> None:
    """Trace where deep-learning frameworks choose their CPU or GPU code."""


# --------------------------------------------------------------------------- list
@main.command("list")
def list_cmd() -> None:
    """Frameworks, primitives, devices, variants, and which environments are ready."""
    table = Table(title="frameworks (frameworks.yaml)")
    for col in ("framework", "version", "devices", "variants", "APIs", "environment"):
        table.add_column(col)
    for fw in _frameworks().values():
        st = envs.status(fw)
        env = f"[green]ready[/] {escape(st.version)}" if st.ready else f"[yellow]{escape(st.note)}[/]"
        table.add_row(fw.name, fw.version, ", ".join(fw.devices), ", ".join(["default", *fw.variants]), ", ".join(fw.apis), env)
    out.print(table)
    out.print(f"primitives: {', '.join(PRIMITIVES)}")
    out.print(f"passes: {', '.join(PASSES)}  (each primitive is traced forward and backward, cold and warm)")


# --------------------------------------------------------------------------- env
@main.group()
def env() -> None:
    """Create and inspect the per-framework environments."""


@env.command("setup")
@click.argument("names", nargs=-1)
@click.option("--force", is_flag=True, help="Re-create even if ready.")
def env_setup(names: tuple[str, ...], force: bool) -> None:
    """Create the environments of NAMES (default: all frameworks)."""
    fws = _frameworks()
    for name in names:
        check(fws, name)
    failed = []
    for name in names or tuple(fws):
        try:
            with err.status(f"setting up {name}…"):
                st = envs.setup(fws[name], force=force, log=lambda s: err.print(f"  {s}", style="dim", highlight=False, markup=False))
            out.print(message("✓", "green", f"{name} {st.version} ready"), highlight=False)
        except DltraceError as exc:
            failed.append(name)
            err.print(message("✗", "red", str(exc)), highlight=False, soft_wrap=True)
    if failed:
        raise DltraceError(f"environment set-up failed for: {', '.join(failed)}")


@env.command("list")
def env_list() -> None:
    """Which environments are ready, their versions and sizes."""
    table = Table()
    for col in ("framework", "state", "version", "size", "python"):
        table.add_column(col)
    for fw in _frameworks().values():
        st = envs.status(fw, sizes=True)
        state = "[green]ready[/]" if st.ready else f"[yellow]{escape(st.note)}[/]"
        if st.ready and st.note:
            state += f" ({escape(st.note)})"
        size = f"{st.size_bytes / 2**20:.0f} MiB" if st.size_bytes else ""
        table.add_row(fw.name, state, escape(st.version), size, escape(str(st.python or "")))
    out.print(table)


@env.command("use")
@click.argument("name")
@click.argument("python", required=False)
def env_use(name: str, python: str | None) -> None:
    """Run NAME's probes with an existing PYTHON that has the framework (e.g. a CUDA
    environment); without PYTHON, go back to dltrace's own environment."""
    fw = check(_frameworks(), name)
    st = envs.use(fw, python)
    out.print(f"{name}: {'using ' + str(st.python) + ' (' + st.version + ')' if python else 'back to the dltrace environment'}")


# --------------------------------------------------------------------------- probe
def _layer_list(text: str) -> list[str]:
    """'python,native' -> ['python', 'native']; an unknown layer is a UsageError naming the choices."""
    from tracer.errors import UsageError

    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        if name not in registry.LAYERS:
            raise UsageError(f"unknown layer '{name}' (choose from: {', '.join(registry.LAYERS)})")
    if not names:
        raise UsageError(f"no layer given (choose from: {', '.join(registry.LAYERS)})")
    return names


@main.command()
@click.argument("framework")
@click.argument("primitive")
@click.option("--device", default="cpu", show_default=True, help="cpu or gpu.")
@click.option("--variant", default="default", show_default=True, help="A variant from frameworks.yaml (see dltrace list).")
@click.option("--pass", "pass_", type=click.Choice([*PASSES, "both"]), default="both", show_default=True)
@click.option("--api", default="functional", show_default=True, help=f"{' or '.join(APIS)}.")
@click.option("--shape", default=None, help="Input shape, e.g. 8x64x112x112 (NCHW; NxF for dense and activations).")
@click.option("--phase", type=click.Choice(["warm", "cold"]), default="warm", show_default=True, help="Which call to print.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the trace (JSON; .gz compresses).")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT, show_default=True, help="Seconds before the probe is stopped.")
@click.option("--max-depth", type=click.IntRange(min=1), default=40, show_default=True)
@click.option("--max-nodes", type=click.IntRange(min=1), default=400, show_default=True)
@click.option("--layers", default=",".join(registry.LAYERS), show_default=True,
              help="Layers to record and print, comma-separated: python (always recorded), op (the framework's "
                   "own op records), native (py-spy native stacks, warm runs; takes a few seconds).")
def probe(framework, primitive, device, variant, pass_, api, shape, phase, output, timeout, max_depth, max_nodes,
          layers) -> None:
    """Trace PRIMITIVE under FRAMEWORK and print the call tree of its warm path."""
    fw = check(_frameworks(), framework, primitive, device, variant, api)
    chosen = tuple(l for l in registry.LAYERS if l in _layer_list(layers))
    spec = CaseSpec(primitive, api, registry.parse_shape(shape) if shape else (), PASSES if pass_ == "both" else (pass_,),
                    layers=("python", *(l for l in chosen if l != "python")))
    if output:
        ensure_file_parent(output)  # before probing: a probe's result must not be lost to a bad path
    with err.status(f"tracing {framework} {primitive} ({api}, {device}, {variant})…"):
        trace = probe_one(fw, spec, device, variant, timeout, command=_command_line())
    from tracer.render.console import print_trace
    from tracer.trace import save

    print_trace(trace, out, phase=phase, layers=chosen, max_depth=max_depth, max_nodes=max_nodes)
    if output:
        save(trace, output)
        err.print(f"trace written to {output}", style="dim", highlight=False, markup=False)


# --------------------------------------------------------------------------- diff
@main.command()
@click.argument("trace_a", metavar="A.json")
@click.argument("trace_b", metavar="[B.json]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--layer", type=click.Choice(["python", "op", "native", "all"]), default="all", show_default=True)
@click.option("--pass", "pass_", type=click.Choice(list(PASSES)), default="forward", show_default=True)
@click.option("--phase", type=click.Choice(["warm", "cold"]), default="warm", show_default=True)
@click.option("--threshold", type=float, default=0.02, show_default=True,
              help="Sampled layers: a frame counts only when in at least this share of the samples.")
@click.option("--force", is_flag=True, help="Diff traces of different frameworks or primitives anyway.")
def diff(trace_a, trace_b, as_json, layer, pass_, phase, threshold, force) -> None:
    """Where the paths of two traces split (A.json B.json), or, with one trace, the
    branches on the device or backend that could split it (candidate split points)."""
    import json

    from tracer.process.candidates import find_candidates
    from tracer.process.diff import LAYERS, DiffError, diff_traces
    from tracer.render.diff_console import print_candidates, print_diff
    from tracer.trace import load

    a = load(trace_a)
    if trace_b is None:
        if layer not in ("python", "all"):
            raise DiffError(f"single-trace mode reads the python layer, not the {layer} layer; give a second trace")
        if a.run(pass_, phase) is None:
            raise DiffError(f"{trace_a}: no {phase} {pass_} run")
        candidates = find_candidates(a, pass_, phase)
        if as_json:
            click.echo(json.dumps({"mode": "candidates", "trace": trace_a, "pass": pass_, "phase": phase,
                                   "candidates": [c.to_json() for c in candidates]}, indent=2))
        else:
            from tracer.process.diff import describe

            print_candidates(candidates, out, describe(a), pass_, phase)
        return
    b = load(trace_b)
    result = diff_traces(a, b, pass_, phase, LAYERS if layer == "all" else (layer,), threshold, force)
    if as_json:
        click.echo(json.dumps({"mode": "diff", "a_file": trace_a, "b_file": trace_b, **result.to_json()}, indent=2))
    else:
        print_diff(result, out, (trace_a, trace_b))


# --------------------------------------------------------------------------- survey / report
def _split_csv(values: tuple[str, ...]) -> list[str]:
    return [v for item in values for v in item.split(",") if v]


@main.command()
@click.argument("names", nargs=-1)
@click.option("--primitives", multiple=True, help="Comma-separated primitives (default: all).")
@click.option("--devices", multiple=True, default=("cpu",), show_default=True, help="Comma-separated devices.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/survey"), show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Probe subprocesses at a time.")
@click.option("--with-traces", "with_traces", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Add traces recorded elsewhere (a GPU or ARM machine); repeatable.")
@click.option("--fresh", is_flag=True, help="Probe again even where a trace exists.")
@click.option("--no-variants", is_flag=True, help="Only the default variant.")
@click.option("--native/--no-native", default=True, show_default=True,
              help="Sample native stacks (py-spy) of each framework's functional cases: the libraries and "
                   "ISA-specific code each primitive reaches (seconds per case).")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT, show_default=True, help="Seconds per probe subprocess.")
def survey(names, primitives, devices, output, jobs, with_traces, fresh, no_variants, native, timeout) -> None:
    """Probe every primitive of NAMES (default: all frameworks) on every device and
    variant, diff the pairs, and write the HTML report to OUTPUT."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tracer import survey as sv

    fws = _frameworks()
    for name in names:
        check(fws, name)
    prims = _split_csv(primitives) or None
    for p in prims or ():
        check(fws, next(iter(fws)), primitive=p)
    devs = _split_csv(devices)
    for d in devs:
        if d not in registry.DEVICES:
            raise DltraceError(f"unknown device '{d}' (choose from: {', '.join(registry.DEVICES)})")
    chosen = [fws[n] for n in (names or fws)]
    ensure_dir(output / "traces")  # before probing: results must have somewhere to go
    ready, missing = sv.ready_frameworks(chosen)
    for fw in missing:
        err.print(message("!", "yellow", f"{fw.name}: environment not set up (dltrace env setup {fw.name}); marked as a gap"),
                  highlight=False, soft_wrap=True)
    jobs_list = sv.plan(chosen, prims, devs, variants=not no_variants, native=native)
    t0 = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err) as progress:
        total = progress.add_task("survey", total=sum(len(j.cases) for j in jobs_list))

        def on_event(e) -> None:
            progress.advance(total, e.done)
            note = f", {len(e.gaps)} gaps" if e.gaps else ""
            reused = f", {e.reused} reused" if e.reused else ""
            progress.console.print(f"  {e.job.folder}: {e.done} cases{reused}{note}", style="dim", highlight=False)

        gaps = sv.run(jobs_list, output, workers=jobs, fresh=fresh, timeout=timeout, on_event=on_event)
    out.print(f"probed in {time.monotonic() - t0:.0f} s; {len(gaps)} gaps")
    _render([output / "traces", *with_traces], output)


@main.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True)
def report(traces, output) -> None:
    """Render the HTML report from TRACES folders alone (no framework needed)."""
    ensure_dir(output)
    _render(list(traces), output)


def _render(folders: list[Path], output: Path) -> None:
    from tracer import survey as sv
    from tracer.render.html import write_report

    traces, gaps, problems = sv.collect(folders)
    for p in problems:
        err.print(message("!", "yellow", f"skipped {p}"), highlight=False, soft_wrap=True)
    if not traces and not gaps:
        raise DltraceError(f"no traces found in {', '.join(map(str, folders))}")
    index = write_report(traces, gaps, output)
    out.print(f"report: {index}", markup=False, highlight=False)


# --------------------------------------------------------------------------- export
@main.command()
@click.argument("trace_file", metavar="TRACE")
@click.option("--format", "fmt", type=click.Choice(["speedscope", "collapsed"]), required=True,
              help="speedscope: JSON for https://www.speedscope.app; collapsed: 'a;b;c N' lines for flamegraph.pl.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here (default: stdout).")
@click.option("--layer", "layers", multiple=True, help="python, op or native (repeatable or comma-separated; default: all in the trace).")
@click.option("--pass", "pass_", type=click.Choice([*PASSES, "both"]), default="both", show_default=True)
@click.option("--phase", type=click.Choice(["warm", "cold"]), default="warm", show_default=True)
def export(trace_file, fmt, output, layers, pass_, phase) -> None:
    """Write TRACE's call trees in a format other tools read: native layers as samples,
    python and op layers weighted by time (nanoseconds) or, without times, by calls."""
    from tracer.render.export import select_trees
    from tracer.trace import load

    trace = load(trace_file)
    wanted = tuple(_layer_list(",".join(layers))) if layers else registry.LAYERS
    trees = select_trees(trace, wanted, PASSES if pass_ == "both" else (pass_,), phase)
    if not trees:
        have = sorted({f"{r.phase} {r.pass_}: {', '.join(r.layers)}" for r in trace.runs})
        raise DltraceError(f"{trace_file}: no {'/'.join(wanted)} layer in the {phase} runs asked for "
                           f"(it has: {'; '.join(have) or 'no runs'})")
    if fmt == "speedscope":
        from tracer.render.speedscope import write
    else:
        from tracer.render.collapsed import write
    if output:
        ensure_file_parent(output)
        with replacing(output, "w") as fh:
            write(trace, trees, fh)
        err.print(f"{fmt} written to {output} ({len(trees)} trees)", style="dim", highlight=False, markup=False)
    else:
        stream = click.get_text_stream("stdout")
        write(trace, trees, TerminalSafe(stream) if stream.isatty() else stream)


@main.command()
@click.argument("framework")
@click.option("--traces", "folders", multiple=True, type=click.Path(exists=True, path_type=Path),
              default=(Path("reports/survey/traces"),), show_default=True, help="Trace folders (a survey's, a GPU machine's...).")
def audit(framework: str, folders: tuple[Path, ...]) -> None:
    """The porting audit of FRAMEWORK from its traces: the dispatch points a new
    backend must hook into, and what each primitive needs from it."""
    from tracer import survey as sv
    from tracer.process.portability import framework_report
    from tracer.render.audit_console import print_audit

    check(_frameworks(), framework)
    traces, gaps, problems = sv.collect(folders)
    for p in problems:
        err.print(message("!", "yellow", f"skipped {p}"), highlight=False, soft_wrap=True)
    mine = [t for t in traces if t.meta.get("framework") == framework]
    if not mine:
        raise DltraceError(f"no {framework} traces in {', '.join(map(str, folders))}; run: dltrace survey {framework}")
    print_audit(framework_report(framework, mine, gaps), out)


if __name__ == "__main__":  # last: every command above is registered by now
    main()
