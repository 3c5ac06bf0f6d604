"""What every command shares: the consoles (made terminal-safe), one-line errors
and interrupts (Group), option types, and reading the registry and trace folders."""

from __future__ import annotations

import math
import os
import shlex
import signal
import sys
from pathlib import Path

import click

from tracer import registry
from tracer.contract import LAYERS
from tracer.errors import DltraceError, UsageError
from tracer.files import describe
from tracer.registry import RegistryError
from tracer.render.terminal import STDOUT, message, safe_console, tolerant_streams
from tracer.runner import stop_all
from tracer.trace import TraceFormatError

out = safe_console(file=STDOUT)
err = safe_console(stderr=True)


class Group(click.Group):
    """Turns the tool's own errors into `dltrace: error: ...` and exit status 1."""

    def invoke(self, ctx: click.Context):
        signal.signal(signal.SIGTERM, _interrupt)  # `kill dltrace`: stop its probes, as Ctrl-C does
        tolerant_streams()
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `dltrace list | head -1`: the reader has gone; end quietly
            _silence_stdout()
            ctx.exit(141)
        except MemoryError:
            stop_all()
            err.print("dltrace: error: out of memory (a trace or profile too large for this machine?)", markup=False)
            ctx.exit(1)
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


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null, so that the interpreter's last flush of a closed pipe
    does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


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


def frameworks() -> dict[str, registry.Framework]:
    return registry.load()


def command_line() -> str:
    return "dltrace " + shlex.join(sys.argv[1:])


def layer_list(text: str) -> list[str]:
    """'python,native' -> ['python', 'native']; an unknown layer is a UsageError naming the choices."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        if name not in LAYERS:
            raise UsageError(f"unknown layer '{name}' (choose from: {', '.join(LAYERS)})")
    if not names:
        raise UsageError(f"no layer given (choose from: {', '.join(LAYERS)})")
    return names


def split_csv(values: tuple[str, ...]) -> list[str]:
    return [v for item in values for v in item.split(",") if v]


def collect(folders: list[Path]) -> tuple[list, list]:
    """The traces and gaps under ``folders``; each unreadable file is one line, skipped."""
    from tracer import survey as sv

    traces, gaps, problems = sv.collect(folders)
    for p in problems:
        err.print(message("!", "yellow", f"skipped {p}"), highlight=False, soft_wrap=True)
    return traces, gaps
