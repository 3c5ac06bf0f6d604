"""What every command shares: the consoles (made terminal-safe), one-line errors
and interrupts (Group), option types, and reading the registry and trace folders.

Every error is one line, ``dltrace: error: ...``. A command line that asks for what
does not exist (an unknown name, option or value, from click's own checks or from
the registry's) exits Exit.USAGE; a failure of the work itself exits Exit.ERROR. A
bug in dltrace is a bug: it is not caught here, so its traceback reaches the report."""

from __future__ import annotations

import math
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

import click
from click.shell_completion import CompletionItem

from tracer import registry, tempdirs
from tracer.contract import APIS, DEVICES, LAYERS, MODELS, PRIMITIVES, WORKLOADS, Exit
from tracer.emulation.cpus import MODELS as CPU_MODELS
from tracer.errors import DltraceError, UsageError
from tracer.files import describe
from tracer.data_file import RegistryError
from tracer.registry_entries import Framework
from tracer.render.terminal import STDOUT, message, safe_console, tolerant_streams
from tracer.runner import stop_all
from tracer.trace import TraceFormatError

if TYPE_CHECKING:
    # click types ParamType by the value it converts to since 8.4; setup.cfg accepts
    # click 8.1, whose ParamType is no generic: the subscripts are for mypy only.
    _NamesType = click.ParamType[str | tuple[str, ...]]
    _ShapeType = click.ParamType[tuple[int, ...]]
    _SecondsType = click.ParamType[float]
else:
    _NamesType = _ShapeType = _SecondsType = click.ParamType

out = safe_console(file=STDOUT)
err = safe_console(stderr=True)


def _say(text: str) -> None:
    err.print(message("dltrace: error:", "red", text), highlight=False, soft_wrap=True)


def _fail(text: str, code: Exit) -> NoReturn:
    _say(text)
    sys.exit(code)


class Group(click.Group):
    """Turns the tool's own errors, and click's usage errors, into one line
    `dltrace: error: ...` with a named exit status (Exit)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        # (click overloads main on a Literal standalone_mode; this one keeps both behaviours)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:  # unknown command, option, or a value its type refuses
            # a refused value names its choices; a missing or unknown option points to the help
            hint = (f" (see: {exc.ctx.command_path} --help)"
                    if exc.ctx is not None and (not isinstance(exc, click.BadParameter)
                                                or isinstance(exc, click.MissingParameter)) else "")
            _fail(exc.format_message() + hint, Exit.USAGE)
        except click.ClickException as exc:  # a file option click could not open
            _fail(exc.format_message(), Exit.ERROR)
        except click.Abort:  # Ctrl-C while click itself was reading the command line
            err.print("dltrace: interrupted", markup=False)
            sys.exit(Exit.INTERRUPTED)
        sys.exit(status if isinstance(status, int) else Exit.OK)

    def invoke(self, ctx: click.Context) -> Any:
        signal.signal(signal.SIGTERM, _interrupt)  # `kill dltrace`: stop its probes, as Ctrl-C does
        tolerant_streams()
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `dltrace list | head -1`: the reader has gone; end quietly
            _silence_stdout()
            ctx.exit(Exit.BROKEN_PIPE)
        except MemoryError:
            stop_all()
            err.print("dltrace: error: out of memory (a trace or profile too large for this machine?)", markup=False)
            ctx.exit(Exit.ERROR)
        except (DltraceError, TraceFormatError, RegistryError) as exc:
            _say(str(exc))
            # a UsageError: what the registry says does not exist (a device this framework lacks...)
            ctx.exit(Exit.USAGE if isinstance(exc, UsageError) else Exit.ERROR)
        except OSError as exc:  # a full disk, a folder that vanished: said in one line
            _say(describe(exc, ""))
            ctx.exit(Exit.ERROR)
        except KeyboardInterrupt:
            stop_all()
            err.print("dltrace: interrupted", markup=False)
            ctx.exit(Exit.INTERRUPTED)


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null, so that the interpreter's last flush of a closed pipe
    does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class Names(_NamesType):
    """One name, or with ``csv`` a comma-separated list of names, from a list that the
    contract or the registry holds. The list is read when a value is converted, not at
    import, so that a broken registry is its own one-line error; an unknown name is a
    usage error naming the choices, as every other value click refuses."""

    def __init__(self, kind: str, choices: Callable[[], Iterable[str]], csv: bool = False) -> None:
        self.kind, self.choices, self.csv = kind, choices, csv
        self.name = f"{kind}s" if csv else kind

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str | tuple[str, ...]:
        if not isinstance(value, str):  # a default given as a tuple is already converted
            return cast("tuple[str, ...]", value)
        valid = list(self.choices())
        names = [v.strip() for v in value.split(",") if v.strip()] if self.csv else [value]
        if not names:
            self.fail(f"no {self.kind} given (choose from: {', '.join(valid)})", param, ctx)
        for name in names:
            if name not in valid:
                self.fail(f"unknown {self.kind} '{name}' (choose from: {', '.join(valid)})", param, ctx)
        return tuple(names) if self.csv else value

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        return [CompletionItem(c) for c in self.choices() if c.startswith(incomplete.rsplit(",", 1)[-1])]


def _framework_names() -> list[str]:
    return list(registry.load())


FRAMEWORK = Names("framework", _framework_names)
FRAMEWORKS = Names("framework", _framework_names, csv=True)
PRIMITIVE = Names("primitive", lambda: PRIMITIVES)
PRIMITIVE_LIST = Names("primitive", lambda: PRIMITIVES, csv=True)
#: What `dltrace probe` runs: a primitive, or a model's training step.
WORKLOAD = Names("primitive or model", lambda: WORKLOADS)
MODEL_LIST = Names("model", lambda: MODELS, csv=True)
API = Names("API level", lambda: APIS)
DEVICE = Names("device", lambda: DEVICES)
DEVICE_LIST = Names("device", lambda: DEVICES, csv=True)


def _cpu_models() -> list[str]:
    return list(CPU_MODELS)


CPU_MODEL = Names("emulated CPU", _cpu_models)
#: One shape for every layer option (probe, diff, export): ``--layers python,op``,
#: repeatable, ``--layer`` accepted as its other spelling.
LAYER_LIST = Names("layer", lambda: LAYERS, csv=True)
LAYERS_HELP = ("python (Python frames and C hand-offs), op (the framework's own op records), library (what "
               "oneDNN and MKL report they ran), native (py-spy native stacks, warm runs); comma-separated or "
               "repeated")


def flat(values: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """The names of a repeatable comma-separated option, in order, each once."""
    return tuple(dict.fromkeys(name for group in values for name in group))


def layers_in_order(values: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """The layers a --layers option asked for, in the trace's order; all when none."""
    asked = flat(values)
    return tuple(layer for layer in LAYERS if layer in asked) if asked else LAYERS


class Shape(_ShapeType):
    """An input shape, 8x64x112x112."""

    name = "shape"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return registry.parse_shape(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class OutPath(click.Path):
    """An output path (``-o``): an empty one names no place (Path('') is the working
    folder), so it is refused as a usage error, not written into the working folder."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; name a folder or file (-o . for the working folder)", param, ctx)
        return super().convert(value, param, ctx)


class Seconds(_SecondsType):
    """A positive, finite number of seconds: 0 or a negative timeout would stop every
    probe at once, and nan would compare false with everything, i.e. never time out."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return seconds


def frameworks() -> dict[str, Framework]:
    return registry.load()


def command_line(argv: list[str] | None = None) -> str:
    """The command as it was run, for what a run writes (a trace's meta, survey.json, a
    skeleton's files), each path in it named by its last part: those files are made to
    be published, and where a user keeps theirs (``/home/alice/work/...``) is not theirs
    to publish. ``-o /home/alice/out`` is said ``-o out``, ``--workload
    FW=/home/alice/net.py:step`` ``--workload FW=net.py:step``."""
    def said(token: str) -> str:
        key, eq, value = token.partition("=")
        if eq and os.sep not in key:  # --option=PATH, FRAMEWORK=PATH
            return f"{key}={said(value)}" if os.sep in value else token
        return token.rstrip(os.sep).rsplit(os.sep, 1)[-1] or token if os.sep in token else token

    return "dltrace " + shlex.join(said(t) for t in (sys.argv[1:] if argv is None else argv))


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dltrace")
@click.option("--trust-registry", is_flag=True,
              help="Let the registry's install steps (DLTRACE_REGISTRY) hold pip options, paths and URLs: they "
                   "run code from wherever they point, so only for a registry you wrote.")
def main(trust_registry: bool) -> None:
    """Trace where deep-learning frameworks choose their CPU or GPU code."""
    tempdirs.sweep()  # what a killed dltrace left in the temporary folder (its lock is free)
    if os.environ.get("DLTRACE_HOME"):  # absolute for every process this one starts, whatever its folder
        os.environ["DLTRACE_HOME"] = os.path.abspath(os.environ["DLTRACE_HOME"])
    if trust_registry:
        os.environ[registry.TRUST_ENV] = "1"  # for this process and what it starts
