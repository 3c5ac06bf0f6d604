"""Packages added to an emulated aarch64 environment after its framework: the examples'
extras (torchvision, keras) and a user's own (`dltrace env add`).

The environment is a ``pip --target`` folder, and pip does not see what such a folder
holds: asked for torchvision, it would fetch torch again (4.6 GB of aarch64 wheels) and
could fetch another release of it. So pip resolves first (``--dry-run --report``) with
every installed distribution pinned as a constraint; what the report names that the
folder lacks is then installed alone (``--no-deps``) and merged in. A requirement that
needs another version of anything installed, or has no aarch64 wheel for the guest's
Python, is refused by the resolution, in one line naming it and the environment, and
nothing is changed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

from tracer import envs
from tracer.emulation.layout import PYTHON_VERSION, Log, site_dir
from tracer.emulation.wheels import installed_versions, pip_command, status
from tracer.errors import DltraceError
from tracer.files import read_json_object, write_text

#: requirement -> the distributions (name==version) it added, in the environment's folder
MARKER = "dltrace-added.json"


def _installed(site: Path) -> dict[str, str]:
    return {canonicalize_name(n): v for n, v in installed_versions(site).items()}


def _marker(name: str) -> dict[str, list[str]]:
    return read_json_object(site_dir(name).parent / MARKER)


def missing(name: str, requirements: list[str]) -> list[str]:
    """Of ``requirements``, those the environment ``name`` was not given yet."""
    done = _marker(name)
    return [r for r in requirements if r not in done]


def _pip(name: str, what: str, cmd: list[str], log_name: str) -> None:
    log_path = envs.log_dir() / log_name
    try:
        envs.run_logged(f"{name} (aarch64): {what}", cmd, log_path)
    except DltraceError:
        why = envs.refusal(log_path)
        if "(from versions: none)" in why:  # pip was told the guest's platform: no wheel matched it
            why = f"no aarch64 wheel of it for CPython {PYTHON_VERSION} (manylinux) on the index (full log: {log_path})"
        raise DltraceError(f"cannot add {what} to {name}'s aarch64 environment: {why}") from None


def _resolve(name: str, requirements: list[str], have: dict[str, str], work: Path) -> dict[str, str]:
    """name -> version of every distribution ``requirements`` need, resolved for the guest
    with what is installed pinned."""
    constraints = work / "installed.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(have.items())))
    report = work / "report.json"
    cmd = pip_command(work / "unused", requirements)
    at = cmd.index("install") + 1
    cmd[at:at] = ["--dry-run", "--ignore-installed", "--report", str(report), "-c", str(constraints)]
    _pip(name, " ".join(requirements), cmd, f"emulated-{name}-add-resolve.log")
    try:
        items = json.loads(report.read_text()).get("install", [])
        return {canonicalize_name(i["metadata"]["name"]): str(i["metadata"]["version"]) for i in items}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DltraceError(f"{name} (aarch64): pip's resolution report is unreadable ({exc})") from None


def _merge(src: Path, site: Path) -> None:
    """Move what pip put in ``src`` into the site folder; folders that are namespaces
    shared with installed packages (nvidia/) are merged, never replaced."""
    for entry in src.iterdir():
        if entry.name == "bin":
            continue  # console scripts: x86 paths in their shebangs, nothing the guest runs
        target = site / entry.name
        if entry.is_dir() and target.is_dir():
            shutil.copytree(entry, target, dirs_exist_ok=True)
        elif not target.exists():
            shutil.move(str(entry), str(target))


def add(name: str, requirements: list[str], log: Log = lambda s: None) -> list[str]:
    """Add ``requirements`` to the emulated environment ``name`` (set up before); returns
    the distributions installed (name==version), none where all were there."""
    todo = missing(name, requirements)
    if not todo:
        return []
    if status(name) is None:
        raise DltraceError(f"{name}'s aarch64 environment is not set up: dltrace env setup {name} --arch aarch64")
    site = site_dir(name)
    have = _installed(site)
    envs.log_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dltrace-add-", dir=site.parent) as tmp:
        work = Path(tmp)
        wanted = _resolve(name, todo, have, work)
        replaced = [f"{n} {have[n]} -> {v}" for n, v in wanted.items() if n in have and have[n] != v]
        if replaced:  # the constraints forbid it; said rather than trusted
            raise DltraceError(f"cannot add {' '.join(todo)} to {name}'s aarch64 environment: it would replace "
                               f"{', '.join(replaced)}")
        new = sorted(f"{n}=={v}" for n, v in wanted.items() if n not in have)
        if new:
            log(f"{name} (aarch64): adding {' '.join(new)}")
            cmd = pip_command(work / "site", new)
            cmd.insert(cmd.index("install") + 1, "--no-deps")
            _pip(name, " ".join(todo), cmd, f"emulated-{name}-add.log")
            _merge(work / "site", site)
    done = _marker(name)
    done.update({r: new for r in todo})
    write_text(site.parent / MARKER, json.dumps(done, indent=1))
    return new

