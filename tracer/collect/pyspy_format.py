"""py-spy's output, parsed: its raw (collapsed) stacks and its timestamped warnings.

Apart from running py-spy (tracer.collect.sampler), so that the parser is tested on
captured text alone (tests/data/pyspy_*). Stdlib only.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z\s+WARN\s+py_spy\]\s+(.*)$")
#: an env_logger line (RUST_LOG), not py-spy's own message
ANY_LOG = re.compile(r"^\[\d{4}-\d\d-\d\dT")
#: py-spy's lines while it loads a library's symbols (RUST_LOG=remoteprocess=info)
LOADING = re.compile(r"(?:loading symbols|loading debug info|loading file|opening \S+ for symbols)")
#: py-spy's summary when it stops
TOTALS = re.compile(r"Samples: (\d+) Errors: (\d+)")


@dataclass(frozen=True)
class RawFrame:
    """One frame of py-spy's raw (collapsed) output: ``name (where)``.

    ``where`` is ``file:line`` for Python frames, the shared object for native ones
    (or their source ``file:line`` when the library has debug info), ``?`` where
    py-spy could not place the address."""

    name: str
    where: str
    python: bool
    line: int = 0


_PY_WHERE = re.compile(r"^(.*):(\d+)$")


def parse_frame(text: str) -> RawFrame:
    """Split ``name (where)``; the *last* `` (`` starts ``where``, because C++ symbols
    contain parentheses (``{lambda(int, int)#1}``, ``void (int, int)``)."""
    cut = text.rfind(" (")
    if cut < 0 or not text.endswith(")"):
        return RawFrame(text, "", False)
    name, where = text[:cut], text[cut + 2 : -1]
    m = _PY_WHERE.match(where)  # shared objects never end in ":<digits>"
    if m:
        path = m.group(1)
        # Python source, or a native function py-spy found debug info for (``_ctypes.c:4201``)
        python = path.endswith((".py", ".pyw")) or path.startswith("<")
        return RawFrame(name, path, python, int(m.group(2)))
    return RawFrame(name, where, False)


def parse_raw(text: str) -> list[tuple[tuple[RawFrame, ...], int]]:
    """py-spy ``--format raw``: one stack per line, outermost frame first, frames
    separated by ``;``, then a space and the sample count."""
    out: list[tuple[tuple[RawFrame, ...], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out.append((tuple(parse_frame(f) for f in stack.split(";")), int(count)))
    return out


def parse_warnings(log: str) -> list[tuple[float, str]]:
    """(epoch seconds, message) of py-spy's ``WARN`` lines: the samples it failed to take."""
    out = []
    for line in log.splitlines():
        m = _LOG_TIME.match(line.strip())
        if m:  # nanosecond fractions: parsed by hand, fromisoformat takes at most 6 digits before 3.11
            stamp = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
            out.append((stamp.timestamp() + float(m.group(2) or 0), m.group(3)))
    return out


def error_kind(message: str) -> str:
    """A short, stable name for an unwinding failure ("UNW_EBADREG", "merge", ...)."""
    m = re.search(r"\b(UNW_E[A-Z]+)\b", message)
    if m:
        return m.group(1)
    if "merge native and python" in message:
        return "merge"
    return re.sub(r"\d+", "N", message.split(":", 1)[-1].strip())[:60] or "other"

