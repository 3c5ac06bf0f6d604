"""Builds and loads the C core of the Python-level collector (the C sources in
``tracer/collect/ctrace/``, one extension module ``_ctrace``; ``ctrace.h`` there says
which file does what, ``_ctrace.pyi`` beside this module types it).

The core must be compiled for each interpreter that runs a probe: the framework
environments' (all CPython 3.11 here, possibly from different builds) or one given
with ``dltrace env use`` (a GPU machine's CPython 3.12, say: from 3.12 on, the core
takes its events from sys.monitoring). So it is built with that interpreter's own compiler
settings and headers (sysconfig), standard library only, into a cache shared by
every environment: ``$DLTRACE_HOME/ext/_ctrace-SOURCEHASH-VERSION.EXT_SUFFIX``. The
name changes with any source file (the hash covers every file of the folder, names
and contents), the exact Python version and the ABI (EXT_SUFFIX names the platform),
so an interpreter never loads a build made for another one or for older sources.

``dltrace env setup`` builds it for each environment (``python -m
tracer.collect.cbuild``); a probe builds it on first use where it is missing. Where
it cannot be built (no compiler, no headers, an emulated aarch64 guest) or loaded,
:class:`Unavailable` says why, and the pure-Python collector runs instead
(tracer/collect/collector.py chooses).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from tracer.contract import EMULATED_ENV, Exit

#: The C core's sources: every ``*.c`` there is compiled, with the headers beside them.
SOURCES = Path(__file__).with_name("ctrace")
#: The module's name: the stub ``_ctrace.pyi`` beside this file types it as such.
MODULE = "tracer.collect._ctrace"
#: The compiler's diagnostics kept in a failure's reason, at most.
_REASON_CHARS = 300
_BUILD_TIMEOUT_S = 180


class Unavailable(Exception):
    """The C core cannot be used in this interpreter; the message says why."""


def home() -> Path:
    """dltrace's cache folder (tracer.envs.home, repeated here: this module runs in
    framework environments, which have only the standard library and the framework)."""
    return Path(os.environ.get("DLTRACE_HOME") or Path.home() / ".cache" / "dltrace")


def cache_dir() -> Path:
    """The folder of every interpreter's build (an emulated guest sees it bound)."""
    return home() / "ext"


def target(version: str | None = None, suffix: str | None = None) -> Path:
    """Where an interpreter's build of the current source lives: this one's, or (a
    cross build) the one of that exact version and extension suffix."""
    digest = _digest()
    suffix = suffix or sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    version = version or ".".join(map(str, sys.version_info[:3]))
    return cache_dir() / f"_ctrace-{digest}-py{version}{suffix}"


def _files() -> list[Path]:
    """The source folder's files (not its subfolders), in a fixed order."""
    try:
        return sorted(p for p in SOURCES.iterdir() if p.is_file())
    except OSError as exc:
        raise Unavailable(f"cannot read the C sources in {SOURCES}: {exc.strerror or exc}") from None


def _digest() -> str:
    """A hash of every source file's name and contents: a changed header rebuilds too."""
    h = hashlib.sha256()
    for path in _files():
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:12]


def _supported() -> None:
    if sys.implementation.name != "cpython" or sys.version_info[:2] < (3, 11):
        raise Unavailable(f"the C core is written for CPython 3.11 and newer, this is "
                          f"{sys.implementation.name} {sys.version.split()[0]}")


def _compiler() -> list[str]:
    """The compiler this interpreter was built with (``CC``, as distutils reads it)."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        raise Unavailable(f"no C compiler: {' '.join(cc) or 'CC is empty'} not found")
    return cc


def build(force: bool = False) -> Path:
    """Compile the core for this interpreter (nothing to do when it is there);
    returns its path or raises :class:`Unavailable`. Written under a temporary name
    and renamed, so two probes building at once never load half a file."""
    _supported()
    out = target()
    if out.exists() and not force:
        return out
    return compile_core(_compiler(), [sysconfig.get_paths()["include"]], out)


def compile_core(cc: list[str], includes: list[str], out: Path) -> Path:
    """Compile the sources with ``cc`` against the Python headers in ``includes`` (the
    first holds Python.h) into ``out``; shared by :func:`build` and the cross build
    for an emulated guest (tracer.emulation.core). Raises :class:`Unavailable`."""
    if not includes or not (Path(includes[0]) / "Python.h").exists():
        raise Unavailable(f"no Python headers (Python.h) in {includes[0] if includes else '(none given)'}")
    sources = [str(p) for p in _files() if p.suffix == ".c"]
    if not sources:
        raise Unavailable(f"no C sources in {SOURCES}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ctrace-", suffix=".so", dir=out.parent)
        os.close(fd)
    except OSError as exc:
        raise Unavailable(f"cannot write to {out.parent}: {exc.strerror or exc}") from None
    # only PyInit__ctrace is exported (PyMODINIT_FUNC): the files' shared functions stay inside
    cmd = [*cc, "-shared", "-fPIC", "-O2", "-fno-strict-aliasing", "-fwrapv", "-fvisibility=hidden",
           *(arg for folder in includes for arg in ("-I", folder)), "-I", str(SOURCES), *sources, "-o", tmp]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=_BUILD_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _discard(tmp)
        raise Unavailable(f"the C compiler did not run: {exc}") from None
    if proc.returncode != 0:
        _discard(tmp)
        errors = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.strip().splitlines()[-1:]
        raise Unavailable(f"compiling {SOURCES.name}/ failed (into {out.parent}): "
                          f"{' | '.join(errors)[:_REASON_CHARS]}")
    try:
        os.replace(tmp, out)
    except OSError as exc:
        _discard(tmp)
        raise Unavailable(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def _discard(tmp: str) -> None:
    """A failed build's temporary file, removed if it can be: a full disk or a folder
    gone read-only must still end in :class:`Unavailable` (the probe falls back to the
    Python collector), not in an OSError of the clean-up."""
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def load(build_missing: bool = True) -> ModuleType:
    """The compiled core for this interpreter, built first if missing (and asked);
    raises :class:`Unavailable` with the reason when it cannot be had."""
    _supported()
    path = target()
    if not path.exists():
        if os.environ.get(EMULATED_ENV):  # the guest has no compiler: the host cross-builds it
            raise Unavailable(f"not built for this emulated guest ({path.name}); dltrace env setup FRAMEWORK "
                              f"--arch aarch64 cross-compiles it (tracer.emulation.core)")
        if not build_missing:
            raise Unavailable(f"not built for this interpreter ({path.name}); dltrace env setup builds it")
        path = build()
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    if spec is None:
        raise Unavailable(f"cannot load {path}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as exc:
        raise Unavailable(f"cannot load {path.name}: {exc}") from None
    return module


def main() -> int:
    """``python -m tracer.collect.cbuild [--force]``: build for this interpreter; one
    line on standard output, the path or why not; exit OK or ERROR."""
    try:
        print(build(force="--force" in sys.argv[1:]))
    except Unavailable as exc:
        print(exc)
        return Exit.ERROR
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
