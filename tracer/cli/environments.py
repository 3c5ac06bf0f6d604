"""Commands on the registry and the framework environments: list, env setup/list/use."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from tracer import envs
from tracer.cli import main
from tracer.cli.common import err, frameworks, out
from tracer.contract import PASSES, PRIMITIVES
from tracer.errors import DltraceError
from tracer.render.terminal import message
from tracer.runner import check


# --------------------------------------------------------------------------- list
@main.command("list")
def list_cmd() -> None:
    """Frameworks, primitives, devices, variants, and which environments are ready."""
    table = Table(title="frameworks (frameworks.yaml)")
    for col in ("framework", "version", "devices", "variants", "APIs", "environment"):
        table.add_column(col)
    for fw in frameworks().values():
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
    fws = frameworks()
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
    for fw in frameworks().values():
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
    fw = check(frameworks(), name)
    st = envs.use(fw, python)
    out.print(f"{name}: {'using ' + str(st.python) + ' (' + st.version + ')' if python else 'back to the dltrace environment'}")
