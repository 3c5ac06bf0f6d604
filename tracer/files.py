"""Writing the tool's outputs so that a failure leaves nothing half-written, and
finding out before the work whether the output location can be written at all.

Stdlib only: the probe harness writes its traces with it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import IO, Any, Iterator

from tracer.bounded import NotRegular, TooLarge, read_regular
from tracer.errors import DltraceError


class OutputError(DltraceError):
    """The output location cannot be written (no such folder, read-only, a file in
    the way, full disk)."""


def describe(exc: OSError, path: str | os.PathLike[str]) -> str:
    """``cannot write PATH: No space left on device``: one line for an OSError (a
    write to an open file has no file name: then the path, else no name at all)."""
    name = os.fspath(exc.filename or path)
    return f"cannot write{' ' + name if name else ''}: {exc.strerror or exc}"


def _special(path: str) -> str:
    """What ``path`` is when it is neither a regular file, nor a link, nor absent: a
    "character device" (written into as such: /dev/null), or the kind that is refused
    (a FIFO would block with no reader, a socket or block device is no file)."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return ""
    if stat.S_ISCHR(st.st_mode):
        return "character device"
    return "FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "block device"


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """A file handle on a temporary name beside ``path``, renamed to ``path`` when the
    block ends: a reader never sees half a file, and a failure (ENOSPC, an
    interrupt) removes the temporary file and leaves ``path`` as it was. A device is
    never replaced: a character device (``-o /dev/null``) is written into as it is,
    a FIFO, socket or block device refused in one line."""
    path = os.fspath(path)
    special = _special(path)
    if special == "character device":
        with open(path, mode.replace("x", "w"), encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
        return
    if special:
        raise OutputError(f"cannot write {path}: it is a {special}, not a file")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and not exc.filename:  # a write that failed (ENOSPC): say which file
            exc.filename = path
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with replacing(path) as fh:
        fh.write(data)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def ensure_dir(folder: str | os.PathLike[str]) -> Path:
    """Create ``folder`` if needed and prove it writable (a file is created and removed
    in it): an unwritable output is found before probing, not after."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".dltrace-write-check.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(describe(exc, folder)) from None
    return folder


def own_folder(folder: str | os.PathLike[str]) -> Path:
    """``folder`` as a folder of the output's own, made if needed: a symbolic link there
    (planted to a folder elsewhere) is replaced by a folder, never followed, and so is a
    file: nothing is written through it to wherever it points."""
    folder = Path(folder)
    try:
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise OutputError(describe(exc, folder)) from None
    return folder


def ensure_file_parent(path: str | os.PathLike[str]) -> Path:
    """For an output file: its folder exists and is writable, and the path is not a folder."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder")
    special = _special(str(path))
    if special == "character device":  # written into as it is (/dev/null): its folder is not ours to check
        return path
    if special:
        raise OutputError(f"cannot write {path}: it is a {special}, not a file")
    ensure_dir(path.parent if str(path.parent) else Path("."))
    return path


#: The file beside a survey's report that both the survey's record (tracer.survey) and
#: the report's figures (tracer.render.survey_json, under :data:`REPORT_KEY`) are kept in.
SURVEY_JSON = "survey.json"
REPORT_KEY = "report"


#: The most a shared JSON file (survey.json) is read to: a survey's is a few MiB.
MAX_JSON_BYTES = 64 << 20


def read_json_object(path: Path) -> dict[str, Any]:
    """What a JSON file holds when it is an object, {} where there is none or it is not
    one (a survey interrupted before its record was written): each writer of a shared
    file keeps the other's part. Only a regular file is read, and at most
    MAX_JSON_BYTES of it (a FIFO would block, a link to /dev/zero never end); one nested
    too deeply to parse is none."""
    try:
        doc = json.loads(read_regular(path, MAX_JSON_BYTES))
    except (OSError, ValueError, RecursionError, NotRegular, TooLarge):
        return {}
    return doc if isinstance(doc, dict) else {}
