"""dltrace's temporary folders, and the sweep of those their owner left behind.

A probe, a fleet job or a reader works in a ``dltrace-*`` folder of the temporary
folder, removed when the work ends. A dltrace killed by SIGKILL (or a machine
that lost power) cannot remove it, nor the perf map (``/tmp/perf-PID.map``) oneDNN
wrote for a probe it ran. So each folder holds a lock (``flock``) for as long as its
owner lives, and the perf maps its probes were asked to write are listed in it; the
next dltrace to start removes every folder whose lock nobody holds, with the maps
it lists. Another dltrace's live folder is never touched (its lock is held), and
a folder of a dltrace that predates the lock is removed only once it is a day old.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

PREFIX = "dltrace-"
LOCK = ".dltrace-owner"
PERFMAPS = ".dltrace-perfmaps"
#: A folder without a lock (an older dltrace's) is left this long: it may be live.
UNLOCKED_AGE_S = 24 * 3600


@contextlib.contextmanager
def owned(prefix: str = PREFIX) -> Iterator[Path]:
    """A new temporary folder, locked for as long as the block runs, then removed."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    # locked under another name, then renamed: a sweep never finds the lock unheld
    fd = os.open(folder / f"{LOCK}.new", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(folder / f"{LOCK}.new", folder / LOCK)
        yield folder
    finally:
        _remove_perfmaps(folder)
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def note_perfmap(folder: Path, path: str) -> None:
    """Record that a probe of ``folder``'s owner was asked to write the perf map
    ``path``: removed with the folder, or by the sweep if the owner is killed first."""
    with open(folder / PERFMAPS, "a", encoding="utf-8") as fh:
        fh.write(path + "\n")


def _remove_perfmaps(folder: Path) -> None:
    try:
        listed = (folder / PERFMAPS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in listed:
        name = Path(line)
        if name.parent == Path("/tmp") and name.name.startswith("perf-") and name.name.endswith(".map"):
            name.unlink(missing_ok=True)


def sweep(root: str | None = None) -> int:
    """Remove the ``dltrace-*`` folders under ``root`` (the temporary folder) whose
    owner is gone, and the perf maps they list; how many folders were removed.
    Never raises: a sweep is housekeeping."""
    removed = 0
    base = Path(root or tempfile.gettempdir())
    try:
        entries = [p for p in base.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return 0
    for folder in entries:
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            lock = folder / LOCK
            if not lock.exists():
                if time.time() - folder.stat().st_mtime > UNLOCKED_AGE_S:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += 1
                continue
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its owner is alive
            _remove_perfmaps(folder)
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed
