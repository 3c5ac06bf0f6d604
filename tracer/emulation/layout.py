"""Where the emulated environments live, and the few rules every build follows.

Layout under ``$DLTRACE_HOME/emulated``::

    _base/root/            Debian bookworm arm64 (minbase + python3), shared by all (debian.py)
    _base/dltrace-emulated.json
    NAME/site-packages/    one framework's aarch64 wheels, pip --target (wheels.py)
    NAME/dltrace-emulated.json
    _cpus/MODEL-.../       the /proc/cpuinfo and /sys files of each CPU model (guest.py)

Each folder is built under a temporary name and renamed when complete, so a reader
never sees half of one; its marker records what it was built from (a hash), so a
changed requirement list or recipe rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracer import envs
from tracer.errors import DltraceError, UsageError

MARKER = "dltrace-emulated.json"
SUITE = "bookworm"  # its python3 is 3.11, the version the wheels are chosen for
PYTHON_VERSION = "3.11"
PYTHON_FULL = "3.11.2"  # bookworm's python3.11, for the markers pip evaluates
GUEST_PYTHON = tuple(map(int, PYTHON_VERSION.split(".")))
#: the guest's site directory the framework's wheels are bound over
GUEST_SITE = f"/usr/local/lib/python{PYTHON_VERSION}/dist-packages"
#: the Debian packages the set-up needs on the host (the Makefile's system step)
HOST_PACKAGES = {"debootstrap": "debootstrap", "dpkg-deb": "dpkg", "proot": "proot",
                 "qemu-aarch64-static": "qemu-user-static"}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")

Log = Callable[[str], None]


def emulated_home() -> Path:
    return envs.home() / "emulated"


def bindable(path: Path | str) -> str:
    """``path`` as proot's ``-b HOST:GUEST`` can name it: a ``:`` in it would be read as
    the separator and bind another folder (the guest then misses its packages, and
    says "No module named ..."), so it is refused, naming the setting that put it there."""
    text = str(path)
    if ":" not in text:
        return text
    import tempfile

    where = ("DLTRACE_HOME" if Path(text).is_relative_to(envs.home()) else
             "TMPDIR" if Path(text).is_relative_to(tempfile.gettempdir()) else "the folder")
    raise DltraceError(f"the emulated aarch64 path cannot see {text}: proot binds folders as HOST:GUEST, so a ':' "
                       f"in a path breaks it; set {where} to a path without ':'")


def base_dir() -> Path:
    return emulated_home() / "_base"


def base_root() -> Path:
    return base_dir() / "root"


def env_dir(name: str) -> Path:
    if not _NAME.match(name or ""):
        raise UsageError(f"emulated environment name {name[:60]!r} must be a short name of letters, digits, ., - and _")
    return emulated_home() / name


def site_dir(name: str) -> Path:
    return env_dir(name) / "site-packages"


def tool(command: str) -> str:
    """The host program, or a one-line error naming the Debian package to install.
    /usr/sbin is searched too: debootstrap is there and a user's PATH may lack it."""
    found = shutil.which(command) or shutil.which(command, path="/usr/sbin:/sbin")
    if not found:
        need = " ".join(sorted(set(HOST_PACKAGES.values())))
        raise DltraceError(f"emulation needs '{command}' (Debian package {HOST_PACKAGES.get(command, command)}); "
                           f"install: apt-get install -y {need}")
    return found


def read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def spec_hash(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def fresh(path: Path) -> Path:
    """A temporary sibling of ``path`` to build in, emptied first."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def install(tmp: Path, final: Path) -> None:
    """Put a complete build in place: a concurrent builder that finished first wins."""
    shutil.rmtree(final, ignore_errors=True)
    try:
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if read_marker(final) is None:
            raise
