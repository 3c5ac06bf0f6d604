"""Where the tracer package is, and how a probe process gets it: the one leaf every
floor may import (standard library only, no import of the tool's own modules).

The package is found here, once: the registry reads its relative ``imported`` paths
against it, the runner and the environments' set-up put it alone on a probe's
PYTHONPATH, and an emulated guest gets it bound into its file system. Kept out of the
runner so that a module below the runner (the environments, the emulation) never has
to import it."""

from __future__ import annotations

from pathlib import Path

#: the tracer package itself: the probe process runs its harness and probes, and the
#: real GPU profiles the registry names ship in it (an installed wheel's survey has them)
PACKAGE = Path(__file__).resolve().parent
#: the project the package is part of (its examples/ folder: real models run as workloads)
PROJECT = PACKAGE.parent


def code_path(folder: Path, link: bool = True) -> Path:
    """A new folder in ``folder`` that holds the tracer package alone (a link to
    it): what the probe process gets on its PYTHONPATH. The folder the package is
    in may be a site-packages (an installed wheel) whose other packages (numpy,
    typing_extensions, ...) must not shadow the framework environment's own.

    ``link=False`` leaves an empty ``tracer`` folder instead, for an emulated guest
    that gets the package bound there (:func:`package_bind`): a guest resolving a
    host symlink through proot once failed to find a package folder the host saw."""
    code = folder / "dltrace-code"  # no module name: the probe runs in ``folder``
    code.mkdir()
    if link:
        (code / "tracer").symlink_to(PACKAGE, target_is_directory=True)
    else:
        (code / "tracer").mkdir()
    return code


def package_bind(code: Path) -> tuple[Path, Path]:
    """The (host, guest) bind that puts the tracer package into ``code`` (made by
    ``code_path(folder, link=False)``) for an emulated guest."""
    return PACKAGE, code / "tracer"
