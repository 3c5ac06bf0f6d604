"""What every command that takes the user's own workload shares: the options
(``--workload FILE.py[:FUNCTION]``, ``--name``, ``--verbose``), their reading into a
tracer.contract.UserWorkload, and ``--verbose``'s account of a workload that failed
(the user's own frames, never dltrace's)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import click

from tracer import env_add, envs
from tracer.cli.common import err
from tracer.contract import UserWorkload, WorkloadError
from tracer.errors import ProbeFailed, UsageError
from tracer.registry_entries import Framework, gpu_build_env

WORKLOAD_HELP = ("Your own training step: a Python file whose function (default: workload) takes the device and "
                 "returns (forward, backward) (docs/workloads.md); FILE.py:FUNCTION names another function.")


def workload_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--workload, --name and --verbose, in that order on the command's help."""
    f = click.option("--verbose", is_flag=True,
                     help="When your workload fails: its own frames (never dltrace's) after the one line.")(f)
    f = click.option("--name", default=None,
                     help="What your workload's traces and pages are called (default: the file's name).")(f)
    return click.option("--workload", metavar="FILE.py[:FUNCTION]", default=None, help=WORKLOAD_HELP)(f)


def parse(text: str, name: str | None = None) -> UserWorkload:
    """``FILE.py[:FUNCTION]`` -> the workload; a wrong one is a usage error in one line."""
    try:
        return UserWorkload.parse(text, name)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None


def user_workload(primitive: str | None, workload: str | None, name: str | None, api: str | None,
                  shape: tuple[int, ...] | None) -> UserWorkload | None:
    """The workload a command was pointed at, or None; what cannot go with it is refused."""
    if workload is None:
        if name is not None:
            raise UsageError("--name names a workload: give --workload FILE.py")
        return None
    if primitive is not None:
        raise UsageError(f"give {primitive} or --workload, not both")
    if api is not None:
        raise UsageError("--api is a built-in case's level: a workload is written at its own")
    if shape is not None:
        raise UsageError("--shape is a built-in case's input: a workload makes its own inputs")
    return parse(workload, name)


def distinct(users: list[UserWorkload], framework: str) -> list[UserWorkload]:
    """``users``, refused when two share a name (their traces and pages would be one)."""
    names = [u.name for u in users]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UsageError(f"two {framework} workloads are named {dup}: give each file a name of its own")
    return users


def equip(fw: Framework, users: list[UserWorkload], emulated: bool = False) -> None:
    """Install the extras the workloads need (an example's, frameworks.yaml) where missing:
    in the framework's environment, in its GPU build's where that is set up (the GPU
    path of a workload is derived there), and with ``emulated`` in its aarch64 one."""
    needed = tuple(dict.fromkeys(x for u in users for x in fw.extras_for(u.file)))
    build = gpu_build_env(fw)
    for target in (fw, *([build] if build is not None and envs.status(build).ready else [])):
        missing = envs.missing_extras(target, needed) if needed else []
        if missing:
            with err.status(f"installing {target.name}'s {', '.join(missing)} (the examples' extras)…"):
                envs.install_extras(target, tuple(missing))
    if emulated and env_add.emulated_ready(fw):
        with err.status(f"equipping {fw.name}'s aarch64 environment…"):
            env_add.equip_emulated(fw, needed)


@contextlib.contextmanager
def verbose_failure(verbose: bool) -> Iterator[None]:
    """With ``verbose``, a probe that failed in the user's workload shows the user's own
    frames before its one line (the line is said last, as every error is)."""
    try:
        yield
    except ProbeFailed as exc:
        if verbose and exc.detail:
            err.print(exc.detail.rstrip(), markup=False, highlight=False, soft_wrap=True)
        raise
