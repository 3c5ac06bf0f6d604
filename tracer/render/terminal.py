"""Text that reaches a terminal. Frame names, file names and a probe's stderr come
from traces recorded elsewhere and from other people's code: an ESC sequence in one
could retitle the window, clear the screen or hide output, a lone surrogate would
stop the output half way, and a 100,000-character symbol floods the console.

Every Console the CLI prints through is made safe here, once, by a render hook
(rich's public extension point), so no renderer has to remember it: control
characters in printed text are shown as escapes (``\\x1b``) while rich's own
styling still reaches the terminal.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Protocol, TextIO

from rich.console import (Console, ConsoleOptions, ConsoleRenderable, Group, RenderableType, RenderHook,
                          RenderResult)
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from tracer.files import OutputError

#: C0 controls but newline and tab, DEL, C1 controls, bidirectional overrides and
#: isolates (they reorder what is shown), and lone surrogates (not encodable).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The most characters of one name a terminal line shows.
NAME_WIDTH = 400


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    """``text`` with every character that would act on the terminal shown as an escape."""
    return _UNSAFE.sub(_escape, text)


def clip(text: str, width: int = NAME_WIDTH) -> str:
    """A name cut to ``width`` characters, saying how much was left out."""
    if len(text) <= width:
        return text
    return f"{text[: width - 20]}… (+{len(text) - width + 20} chars)"


class _Safe:
    """A renderable whose text segments are made safe; control segments (cursor
    moves of a progress bar, rich's own) pass through."""

    def __init__(self, inner: RenderableType):
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.inner, options):
            if seg.control or not _UNSAFE.search(seg.text):
                yield seg
            else:
                yield Segment(safe(seg.text), seg.style)


class _SafeHook(RenderHook):
    """rich's RenderHook: every printed renderable is wrapped in :class:`_Safe`."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Safe(r) for r in renderables]


class TextSink(Protocol):
    """Where an export writes: a file, standard output, or a terminal-safe wrapper."""

    def write(self, text: str, /) -> int: ...


class TerminalSafe:
    """A text stream for data written straight to a terminal (an export to stdout):
    what :func:`safe` would escape is escaped on the way."""

    def __init__(self, stream: TextSink):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(safe(text))


class StandardOutput:
    """``sys.stdout`` as the commands write to it: output that cannot be written (fd 1
    closed at start, a full device) is one :class:`tracer.files.OutputError` naming
    standard output, not a traceback or a silent exit 0. A closed pipe (``| head -1``)
    raises BrokenPipeError, which the command line ends quietly, as other Unix tools do."""

    def _stream(self) -> TextIO:
        stream = sys.stdout
        if stream is None:
            raise OutputError("cannot write to standard output: it is closed")
        return stream

    def _failed(self, exc: OSError) -> OutputError:
        return OutputError(f"cannot write to standard output: {exc.strerror or exc}")

    def _call(self, method: str, *args: str) -> Any:
        try:
            return getattr(self._stream(), method)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def write(self, text: str) -> int:
        written: int = self._call("write", text)  # TextIO.write: the characters written
        return written

    def flush(self) -> None:
        self._call("flush")

    def isatty(self) -> bool:
        try:
            return sys.stdout is not None and sys.stdout.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"


def tolerant_streams() -> None:
    """Characters the output encoding cannot carry (``PYTHONIOENCODING=ascii``, a C
    locale) are written as escapes instead of stopping the output half way."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


STDOUT = StandardOutput()

#: The narrowest a table column may be squeezed before the table is shown as records.
MIN_COLUMN = 10


def table_or_records(title: str, headers: list[str], rows: list[list[str]], width: int) -> RenderableType:
    """A table where the console is wide enough for every column to show some of its
    text; else one record per row (``header: value`` lines), so that a narrow
    terminal (``COLUMNS=20``) squeezes nothing into empty cells. Cells are rich markup."""
    needed = sum(min(MIN_COLUMN, max(len(Text.from_markup(c).plain) for c in [h, *col]))
                 for h, *col in zip(headers, *rows)) + 3 * len(headers) + 1 if rows else 0
    if width >= needed:
        table = Table(title=title or None)
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            table.add_row(*row)
        return table
    lines = [Text(title, style="bold")] if title else []
    for row in rows:
        lines.append(Text.from_markup(row[0], style="bold"))
        lines += [Text.assemble(f"  {h}: ", Text.from_markup(c)) for h, c in zip(headers[1:], row[1:])]
    return Group(*lines)


class _PipedConsole(Console):
    def on_broken_pipe(self) -> None:
        """rich would exit with status 1, as if dltrace had failed; the command-line
        group ends a closed pipe (``dltrace list | head -1``) with Exit.BROKEN_PIPE."""
        self.quiet = True
        raise BrokenPipeError


def safe_console(**kwargs: Any) -> Console:
    """A rich Console whose output cannot carry control sequences from the data it prints."""
    console = _PipedConsole(**kwargs)
    console.push_render_hook(_SafeHook())
    return console


def message(prefix: str, style: str, text: str) -> Text:
    """``prefix`` in ``style`` then ``text`` as it is: no rich markup is read in ``text``
    (an error that quotes ``[/x]`` from the user's input must not be parsed)."""
    return Text.assemble((prefix, style), " ", clip(text, 4 * NAME_WIDTH))

