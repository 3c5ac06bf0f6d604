"""Commands on the registry and the framework environments: list, env setup/list/use."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from tracer import envs, registry
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
@click.option("--arch", type=click.Choice(["all", "x86_64", "aarch64"]), default="all", show_default=True,
              help="x86_64: the environments this machine runs; aarch64: the emulated ones (frameworks.yaml "
                   "aarch64: the framework's own aarch64 wheels, run under QEMU); all: both.")
def env_setup(names: tuple[str, ...], force: bool, arch: str) -> None:
    """Create the environments of NAMES (default: all frameworks, and their GPU builds: NAME-gpu-build)."""
    fws = frameworks()
    # the frameworks' GPU builds (frameworks.yaml gpu_build): environments of their own
    builds = {b.name: b for b in map(registry.gpu_build_env, fws.values()) if b is not None}
    for name in names:
        if name not in builds:
            check(fws, name)
    failed = []
    log = lambda s: err.print(f"  {s}", style="dim", highlight=False, markup=False)  # noqa: E731
    for name in names or (*fws, *builds):
        fw = builds.get(name) or fws[name]
        if arch in ("all", "x86_64"):
            try:
                with err.status(f"setting up {name}…"):
                    st = envs.setup(fw, force=force, log=log)
                out.print(message("✓", "green", f"{name} {st.version} ready"), highlight=False)
            except DltraceError as exc:
                failed.append(name)
                err.print(message("✗", "red", str(exc)), highlight=False, soft_wrap=True)
        if arch in ("all", "aarch64") and (fw.aarch64 is not None or arch == "aarch64"):
            try:
                if fw.aarch64 is None:
                    raise DltraceError(f"{name} has no aarch64 entry in the registry")
                from tracer import emulation

                with err.status(f"setting up {name} (aarch64, emulated)…"):
                    emulation.setup(name, list(fw.aarch64.requirements), log=log, force=force)
                versions = (emulation.status(name) or {}).get("versions", {})
                out.print(message("✓", "green", f"{name} {versions.get(fw.import_name, '')} ready (aarch64, emulated: "
                                                 f"{', '.join(fw.aarch64.cpus)})"), highlight=False)
            except DltraceError as exc:
                failed.append(f"{name} (aarch64)")
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
