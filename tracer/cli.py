"""The `dltrace` command line. Each command is thin: it validates, calls the engine,
and hands the result to a renderer. User errors are one line, never a traceback."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from tracer import envs, registry
from tracer.errors import DltraceError
from tracer.registry import APIS, PASSES, PRIMITIVES, RegistryError
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, check, probe_one
from tracer.trace import TraceFormatError

out = Console()
err = Console(stderr=True)


class Group(click.Group):
    """Turns the tool's own errors into `dltrace: error: ...` and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (DltraceError, TraceFormatError, RegistryError, ValueError) as exc:
            err.print(f"[red]dltrace: error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            err.print("dltrace: interrupted")
            ctx.exit(130)


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
        env = f"[green]ready[/] {st.version}" if st.ready else f"[yellow]{st.note}[/]"
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
                st = envs.setup(fws[name], force=force, log=lambda s: err.print(f"  {s}", style="dim", highlight=False))
            out.print(f"[green]✓[/] {name} {st.version} ready")
        except DltraceError as exc:
            failed.append(name)
            err.print(f"[red]✗[/] {exc}", highlight=False)
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
        state = "[green]ready[/]" if st.ready else f"[yellow]{st.note}[/]"
        if st.ready and st.note:
            state += f" ({st.note})"
        size = f"{st.size_bytes / 2**20:.0f} MiB" if st.size_bytes else ""
        table.add_row(fw.name, state, st.version, size, str(st.python or ""))
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
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, help="Seconds before the probe is stopped.")
@click.option("--max-depth", type=int, default=40, show_default=True)
@click.option("--max-nodes", type=int, default=400, show_default=True)
def probe(framework, primitive, device, variant, pass_, api, shape, phase, output, timeout, max_depth, max_nodes) -> None:
    """Trace PRIMITIVE under FRAMEWORK and print the call tree of its warm path."""
    fw = check(_frameworks(), framework, primitive, device, variant, api)
    spec = CaseSpec(primitive, api, registry.parse_shape(shape) if shape else (), PASSES if pass_ == "both" else (pass_,))
    with err.status(f"tracing {framework} {primitive} ({api}, {device}, {variant})…"):
        trace = probe_one(fw, spec, device, variant, timeout, output, _command_line())
    from tracer.render.console import print_trace

    print_trace(trace, out, phase=phase, max_depth=max_depth, max_nodes=max_nodes)
    if output:
        err.print(f"trace written to {output}", style="dim", highlight=False)


if __name__ == "__main__":
    main()
