"""Commands on the registry and the framework environments: list, env setup/list/use."""

from __future__ import annotations

import time
from typing import Callable

import click
from rich.markup import escape

from tracer import emulation, env_add, envs
from tracer.collect import cbuild
from tracer.registry_entries import Framework, gpu_build_env
from tracer.cli.common import err, frameworks, main, out
from tracer.contract import GPU_BUILD, MODELS, PASSES, PRIMITIVES
from tracer.errors import DltraceError
from tracer.render.terminal import message, table_or_records
from tracer.runner import check


# --------------------------------------------------------------------------- list
def _statuses(fws: list[Framework], sizes: bool = False) -> list[envs.EnvStatus]:
    """Each framework's environment status, asked at once: an external interpreter
    that hangs costs its version look-up's bound (envs.VERSION_TIMEOUT_S) once, not
    once per framework."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(8, len(fws)))) as pool:
        return list(pool.map(lambda fw: envs.status(fw, sizes=sizes), fws))


@main.command("list")
def list_cmd() -> None:
    """Frameworks, primitives, models, examples, devices, variants, and which environments are ready."""
    rows = []
    fws = list(frameworks().values())
    for fw, st in zip(fws, _statuses(fws)):
        env = f"[green]ready[/] {escape(st.version)}" if st.ready else f"[yellow]{escape(st.note)}[/]"
        rows.append([escape(fw.name), escape(fw.version), escape(", ".join(fw.devices)),
                     escape(", ".join(["default", *fw.variants])), escape(", ".join(fw.apis)), env])
    out.print(table_or_records("frameworks (frameworks.yaml)", ["framework", "version", "devices", "variants", "APIs",
                                                                  "environment"], rows, out.width))
    out.print(f"primitives: {', '.join(PRIMITIVES)}")
    nets = ", ".join(f"{n} ({m.title}; {'/'.join(m.apis)})" for n, m in MODELS.items())
    out.print(escape(f"models (built-in networks' training steps): {nets}"))
    out.print(f"passes: {', '.join(PASSES)}  (each primitive is traced forward and backward, cold and warm)")
    examples = [[escape(fw.name), escape(name), escape(ex.file), escape(", ".join(ex.extras) or "none"),
                 escape(ex.about)] for fw in fws for name, ex in fw.examples.items()]
    if examples:
        out.print(table_or_records("examples: real models from each framework's own zoo (dltrace probe FRAMEWORK "
                                   "--workload FILE)", ["framework", "example", "file", "extras", "what"], examples,
                                   out.width))
    out.print("your own workload: --workload FILE.py[:FUNCTION] on probe, audit, scaffold and survey "
              "(docs/workloads.md)")


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
    builds = {b.name: b for b in map(gpu_build_env, fws.values()) if b is not None}
    for name in names:
        if name not in builds:
            check(fws, name)
    log = lambda s: err.print(f"  {s}", style="dim", highlight=False, markup=False)  # noqa: E731
    chosen = [builds.get(name) or fws[name] for name in names or (*fws, *builds)]
    x86 = [fw for fw in chosen if arch in ("all", "x86_64")]
    emulated = [fw for fw in chosen if arch in ("all", "aarch64")]
    failed = _in_two_lanes(x86, emulated, lambda fw: _setup_x86(fw, force, log),
                           lambda fw: _setup_emulated(fw, arch, force, bool(names), log))
    if failed:
        raise DltraceError(f"environment set-up failed for: {', '.join(failed)}")


def _in_two_lanes(x86: list[Framework], emulated: list[Framework], x86_step: Callable[[Framework], bool],
                  emulated_step: Callable[[Framework], bool]) -> list[str]:
    """Run the set-up steps two at a time; return the names of those that failed.

    Why two lanes: each step is one pip (unpacking and compiling wheels) on one core,
    and a fresh machine has eleven of them; the x86 environments follow each other
    in one lane, the emulated ones (their shared Debian root first) in the other,
    and whichever lane ends first takes the other's next environment. The emulated
    steps never run side by side: they share the root the first one builds."""
    import threading
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    queues = {"x86": deque(x86), "aarch64": deque(emulated)}
    guard, one_emulated = threading.Lock(), threading.Lock()
    running: list[str] = []
    failed: list[str] = []

    def take(lane: str) -> tuple[str, Framework] | None:
        with guard:
            for kind in (lane, *(k for k in queues if k != lane)):
                if queues[kind] and (kind == "x86" or not one_emulated.locked()):
                    return kind, queues[kind].popleft()
            return None

    def work(lane: str) -> None:
        while (job := take(lane)) is not None:
            kind, fw = job
            label = fw.name if kind == "x86" else f"{fw.name} (aarch64)"
            with guard:
                running.append(label)
                status.update(f"setting up {', '.join(running)}…")
            try:
                if kind == "x86":
                    ok = x86_step(fw)
                else:
                    with one_emulated:
                        ok = emulated_step(fw)
            finally:
                with guard:
                    running.remove(label)
            if not ok:
                with guard:
                    failed.append(label)

    with err.status("setting up…") as status, ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(work, lane) for lane in queues]
        try:
            for future in futures:
                future.result()
        except BaseException:  # Ctrl-C: the step running ends with its pip, no other starts
            with guard:
                for queue in queues.values():
                    queue.clear()
            raise
    return failed


def _setup_x86(fw: Framework, force: bool, log: Callable[[str], None]) -> bool:
    """fw's environment on this machine (and what `env add` gave the framework); False
    if that failed (said on one line)."""
    started = time.monotonic()
    try:
        st = envs.setup(fw, force=force, log=log)
        env_add.reapply(fw, fw.name.removesuffix(GPU_BUILD), log)
    except DltraceError as exc:
        err.print(message("✗", "red", str(exc)), highlight=False, soft_wrap=True)
        return False
    out.print(message("✓", "green", f"{fw.name} {st.version} ready in {_took(started)}"), highlight=False)
    return True


def _took(started: float) -> str:
    """The seconds one environment's set-up took, beside its ✓: where a fresh set-up's
    minutes go, per environment (each lane's steps follow each other)."""
    return f"{time.monotonic() - started:.0f} s"


def _setup_emulated(fw: Framework, arch: str, force: bool, named: bool, log: Callable[[str], None]) -> bool:
    """The framework's emulated aarch64 environment, where its registry entry has one;
    False if that failed (said on one line)."""
    name, spec = fw.name, fw.aarch64
    started = time.monotonic()
    if spec is None and not (named and arch == "aarch64"):
        return True  # asked for all: the frameworks without an aarch64 entry are not asked for
    try:
        if spec is None:
            raise DltraceError(f"{name} has no aarch64 entry in the registry")
        if spec.unavailable:
            if named and arch == "aarch64":
                raise DltraceError(f"{name} has no aarch64 build: {spec.unavailable}")
            out.print(message("–", "yellow", f"{name}: no aarch64 environment ({spec.unavailable})"), highlight=False)
            return True

        emulation.setup(name, list(spec.requirements), log=log, force=force, sdists=list(spec.sdists),
                        build=list(spec.build))
        env_add.equip_emulated(fw, tuple(fw.extras), log)  # the examples run there as on x86
        try:
            log(f"{name} (aarch64): C collector ready: {emulation.build_core(force)}")
        except cbuild.Unavailable as exc:  # the guest's probes run the Python collector and say why
            log(f"{name} (aarch64): C collector not built, the Python collector will run: {exc}")
        versions = (emulation.status(name) or {}).get("versions", {})
        out.print(message("✓", "green", f"{name} {versions.get(fw.import_name, '')} ready in {_took(started)} "
                                         f"(aarch64, emulated: {', '.join(spec.cpus)})"), highlight=False)
        return True
    except DltraceError as exc:
        err.print(message("✗", "red", str(exc)), highlight=False, soft_wrap=True)
        return False


@env.command("add")
@click.argument("name")
@click.argument("requirements", nargs=-1, required=True)
def env_add_cmd(name: str, requirements: tuple[str, ...]) -> None:
    """Add REQUIREMENTS (pip's form, pinned: transformers==5.23.0) to every environment of
    framework NAME (x86_64, its GPU build, its emulated aarch64 one), with what each has
    pinned so that nothing the framework brought is replaced; kept for rebuilt ones."""
    fw = check(frameworks(), name)
    reqs = env_add.parse(fw, requirements)
    log = lambda s: err.print(f"  {s}", style="dim", highlight=False, markup=False)  # noqa: E731
    with err.status(f"adding {' '.join(reqs)} to {name}'s environments…"):
        done = env_add.add(fw, reqs, log)
    out.print(message("✓", "green", f"{' '.join(reqs)} in {', '.join(done)}"), highlight=False, soft_wrap=True)


@env.command("list")
def env_list() -> None:
    """Which environments are ready, their versions and sizes."""
    rows = []
    fws = list(frameworks().values())
    for fw, st in zip(fws, _statuses(fws, sizes=True)):
        state = "[green]ready[/]" if st.ready else f"[yellow]{escape(st.note)}[/]"
        if st.ready and st.note:
            state += f" ({escape(st.note)})"
        size = f"{st.size_bytes / 2**20:.0f} MiB" if st.size_bytes else ""
        rows.append([escape(fw.name), state, escape(st.version), size, escape(str(st.python or ""))])
    out.print(table_or_records("", ["framework", "state", "version", "size", "python"], rows, out.width))


@env.command("use")
@click.argument("name")
@click.argument("python", required=False)
def env_use(name: str, python: str | None) -> None:
    """Run NAME's probes with an existing PYTHON that has the framework (e.g. a CUDA
    environment); without PYTHON, go back to dltrace's own environment."""
    fw = check(frameworks(), name)
    st = envs.use(fw, python)
    out.print(f"{name}: "
              f"{'using ' + str(st.python) + ' (' + st.version + ')' if python else 'back to the dltrace environment'}")
