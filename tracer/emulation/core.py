"""The C core of the Python-level collector, cross-compiled on the host for the
emulated guest's python3.

The guest has no compiler, and one run under QEMU would take minutes; without the
core, the guest's probes record their Python layer with the pure-Python collector,
which costs two to three times what the core costs, and under emulation that was a
third of an ARM job's time. Debian's own build of the guest's Python names the
compiler it was built with (its sysconfig's ``CC``: ``aarch64-linux-gnu-gcc``, the
cross compiler Debian ships for the host), and the base root holds its headers
(``libpython3.11-dev``, debian.py), so the host compiles the same sources the x86
environments compile, for the guest's exact version and extension suffix, into the
same cache (tracer.collect.cbuild). The guest sees that cache at the same path
(runner binds it) and loads the core as any probe does; where it is missing, the
guest's trace says why and the pure-Python collector runs.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
from pathlib import Path

from tracer.collect import cbuild
from tracer.emulation.layout import PYTHON_VERSION


def guest_config(root: Path) -> dict[str, str]:
    """The guest's own build settings (``CC``, ``EXT_SUFFIX``) and exact version, read
    from its files, not by running it (seconds under QEMU): the build-time variables
    Debian wrote as a Python literal, and the headers' PY_VERSION."""
    lib = root / f"usr/lib/python{PYTHON_VERSION}"
    data = sorted(lib.glob("_sysconfigdata__*aarch64*.py"))
    if not data:
        raise cbuild.Unavailable(f"the guest's build settings are missing (no _sysconfigdata__*.py in {lib})")
    try:
        tree = ast.parse(data[0].read_text())
        found = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "build_time_vars" for t in node.targets))
    except (OSError, SyntaxError, ValueError, StopIteration) as exc:
        raise cbuild.Unavailable(f"cannot read the guest's build settings in {data[0].name}: {exc}") from None
    patch = root / f"usr/include/python{PYTHON_VERSION}/patchlevel.h"
    try:
        version = re.search(r'#define\s+PY_VERSION\s+"([0-9.]+)', patch.read_text())
    except OSError:
        version = None
    if version is None:
        raise cbuild.Unavailable(f"no Python headers for the guest (no PY_VERSION in {patch}: libpython"
                                 f"{PYTHON_VERSION}-dev not in the base root)")
    return {"CC": str(found.get("CC") or ""), "EXT_SUFFIX": str(found.get("EXT_SUFFIX") or ""),
            "version": version.group(1)}


def build(root: Path, force: bool = False) -> Path:
    """Cross-compile the core for the guest in ``root`` (nothing to do when it is
    built); its path, or :class:`tracer.collect.cbuild.Unavailable` saying why not."""
    cfg = guest_config(root)
    out = cbuild.target(cfg["version"], cfg["EXT_SUFFIX"])
    if out.exists() and not force:
        return out
    cc = shlex.split(cfg["CC"])
    if not cc or shutil.which(cc[0]) is None:
        raise cbuild.Unavailable(f"no cross compiler for the guest: {cc[0] if cc else 'CC'} not found "
                                 f"(Debian package gcc-aarch64-linux-gnu)")
    include = root / "usr/include"
    # Debian's Python.h includes its multiarch pyconfig.h as <aarch64-linux-gnu/python3.11/pyconfig.h>
    return cbuild.compile_core(cc, [str(include / f"python{PYTHON_VERSION}"), str(include)], out)
