"""Each framework's aarch64 wheels, fetched and installed by the host's pip.

pip installs for the guest's platform (``--platform manylinux_2_NN_aarch64
--python-version 3.11 --abi cp311 --target``) without running anything emulated.
It evaluates the requirements' environment markers against the interpreter running
it, though (pypa/pip#11664): torch 2.9.1's ``nvidia-*; platform_machine ==
"x86_64"`` would pull 4 GB of CUDA wheels into an ARM CPU environment. pip
therefore runs with ``platform.machine()`` and the Python version answering as the
guest's. The wheels go to their own folder, which the command binds over the
guest's ``/usr/local/lib/python3.11/dist-packages`` (a site directory Debian's
python3 reads, ``.pth`` files included).

A framework published only as an sdist (Chainer 7.8) cannot be installed for
another platform: pip builds nothing with ``--platform``. When the registry names
``build`` requirements, pip first builds the requirements that have no wheel
into wheels on the host, in a throw-away virtual environment holding those build
requirements (no build isolation, as the x86 step does); only a pure-Python
(``py3-none-any``) wheel is accepted, since a compiled one would be an x86 binary.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tracer import envs
from tracer.emulation.debian import base_ready, ensure_base
from tracer.emulation.layout import (
    bindable,
    emulated_home,
    GUEST_PYTHON,
    MARKER,
    PYTHON_FULL,
    PYTHON_VERSION,
    SUITE,
    Log,
    env_dir,
    fresh,
    install,
    read_marker,
    spec_hash,
)
from tracer.envs import dir_size
from tracer.errors import UsageError
from tracer.files import write_text


def manylinux_platforms() -> list[str]:
    """pip does not expand manylinux tags when told a --platform: every glibc
    version a wheel may be tagged with is listed (bookworm has glibc 2.36)."""
    return ["manylinux2014_aarch64", *(f"manylinux_2_{v}_aarch64" for v in range(17, 37))]


def env_spec(requirements: list[str], sdists: list[str] | None = None, build: list[str] | None = None) -> str:
    """What an environment's wheels depend on: not the base's make-up (a rebuilt base
    takes the same wheels), only the Python version and platform they were chosen for
    (and the sdists built on the host, with what)."""
    extra = [list(sdists), list(build or [])] if sdists else []
    return spec_hash(["env", list(requirements), SUITE, PYTHON_VERSION, manylinux_platforms(), *extra])


#: pip run with the environment markers of the guest (see the module's docstring)
_PIP_AS_GUEST = (
    "import platform, runpy, sys\n"
    "platform.machine = lambda: 'aarch64'\n"
    f"platform.python_version = lambda: '{PYTHON_FULL}'\n"
    f"platform.python_version_tuple = lambda: tuple('{PYTHON_FULL}'.split('.'))\n"
    "sys.argv[0] = 'pip'\n"
    "runpy.run_module('pip', run_name='__main__', alter_sys=True)\n"
)


def pip_command(target: Path, requirements: list[str], find_links: Path | None = None) -> list[str]:
    platforms = [a for p in manylinux_platforms() for a in ("--platform", p)]
    # .pyc files compiled by the host are valid in the guest when both are 3.11:
    # the guest then does not compile torch's Python under emulation at first import
    compile_ = [] if sys.version_info[:2] == GUEST_PYTHON else ["--no-compile"]
    return [sys.executable, "-c", _PIP_AS_GUEST, "install", "--disable-pip-version-check", "--no-input",
            "--target", str(target), "--only-binary=:all:", "--python-version", PYTHON_VERSION,
            "--implementation", "cp", "--abi", f"cp{PYTHON_VERSION.replace('.', '')}", *platforms, *compile_,
            *(["--find-links", str(find_links)] if find_links else []), *requirements]


def build_pure_wheels(folder: Path, requirements: list[str], build: list[str], log_dir: Path, name: str) -> Path:
    """Build ``requirements`` (their own files only, no dependencies) into wheels in
    ``folder/wheels`` with a virtual environment holding ``build``; a wheel that is
    not pure Python is an error (it would be an x86 binary in an aarch64 guest)."""
    venv_dir, wheels = folder / "build-venv", folder / "wheels"
    what = f"{name} (aarch64): building the sdists on the host"
    envs.run_logged(f"{what}: python -m venv", [sys.executable, "-m", "venv", str(venv_dir)],
                    log_dir / f"emulated-{name}-build-venv.log")
    pip = [str(venv_dir / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    envs.run_logged(f"{what}: pip install {' '.join(build)}", [*pip, "install", *build],
                    log_dir / f"emulated-{name}-build-deps.log")
    envs.run_logged(f"{what}: pip wheel", [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-binary=:all:",
                                           "-w", str(wheels), *requirements], log_dir / f"emulated-{name}-build.log")
    compiled = [w.name for w in wheels.glob("*.whl") if not w.name.endswith("-none-any.whl")]
    if compiled:
        raise UsageError(f"{what}: {', '.join(compiled)} is not pure Python: it cannot run in the aarch64 guest")
    shutil.rmtree(venv_dir, ignore_errors=True)
    return wheels


def installed_versions(site: Path) -> dict[str, str]:
    """name -> version of every distribution in a site directory (its dist-info)."""
    out = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        out[name.lower().replace("_", "-")] = version
    return dict(sorted(out.items()))


def _wheels_marker(name: str) -> dict[str, Any] | None:
    """The marker of an environment whose wheels are installed and current, whatever
    the state of the shared base."""
    d = env_dir(name)
    marker = read_marker(d)
    if not marker or not (d / "site-packages").is_dir():
        return None
    req, sdists, build = (marker.get(k, []) for k in ("requirements", "sdists", "build"))
    if not all(isinstance(v, list) for v in (req, sdists, build)) or marker.get("spec") != env_spec(req, sdists, build):
        return None
    return marker


def status(name: str) -> dict[str, Any] | None:
    """The marker of a ready environment, or None (missing, stale or half-built)."""
    marker = _wheels_marker(name)
    return marker if marker is not None and base_ready() else None


def setup(name: str, requirements: list[str], log: Log = lambda s: None, force: bool = False,
          sdists: list[str] | None = None, build: list[str] | None = None) -> Path:
    """Build (or reuse) the aarch64 environment ``name`` with ``requirements``
    installed from wheels; returns its folder (``site-packages`` inside). The shared
    base is built first if needed. ``sdists`` (requirements published without a
    wheel) are first built on the host with ``build`` (:func:`build_pure_wheels`).
    A failure is one DltraceError line naming the step and pip's or debootstrap's
    reason, with the full log under $DLTRACE_HOME/logs."""
    bindable(emulated_home())  # before a long build: a ':' there would break every probe
    requirements = [str(r) for r in requirements]
    sdists, build = [str(r) for r in sdists or []], [str(r) for r in build or []]
    if not requirements:
        raise UsageError(f"emulated environment {name}: no requirements given")
    d = env_dir(name)
    marker = None if force else _wheels_marker(name)
    wheels_ready = marker is not None and marker.get("spec") == env_spec(requirements, sdists, build)
    ensure_base(log)  # a rebuilt base keeps the wheels: they depend on its Python only
    if wheels_ready:
        return d
    logs = envs.log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    tmp = fresh(d)
    started = time.monotonic()
    log(f"{name} (aarch64): pip install {' '.join(requirements)}")
    site = tmp / "site-packages"
    try:
        built = build_pure_wheels(tmp, sdists, build, logs, name) if sdists else None
        envs.run_logged(f"{name} (aarch64): pip install {' '.join(requirements)}",
                        pip_command(site, requirements, built), logs / f"emulated-{name}-pip.log")
        if built:
            shutil.rmtree(built, ignore_errors=True)
        size = dir_size(site)
        write_text(tmp / MARKER, json.dumps({
            "spec": env_spec(requirements, sdists, build), "requirements": requirements, "python": PYTHON_VERSION,
            **({"sdists": sdists, "build": build} if sdists else {}),
            "versions": installed_versions(site), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "seconds": round(time.monotonic() - started, 1), "size_bytes": size}, indent=1))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    install(tmp, d)
    log(f"{name} (aarch64): ready in {time.monotonic() - started:.0f} s ({size / 2**20:.0f} MiB)")
    return d
