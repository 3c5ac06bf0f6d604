"""The shared Debian bookworm arm64 root with python3, built on the host.

debootstrap's second stage and apt under emulation take over ten minutes.
Downloading the .debs (``debootstrap --download-only``: no root needed, signatures
checked against the Debian archive keyring) and unpacking them on the host takes
well under a minute, and Python runs without any maintainer script having run;
what those scripts would have done that Python needs is done here (user and group
files, compiled standard library). The root is the same for every framework, so it
is built once (layout.py says where).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from tracer import envs
from tracer.emulation.layout import (
    GUEST_PYTHON,
    GUEST_SITE,
    HOST_PACKAGES,
    MARKER,
    PYTHON_VERSION,
    SUITE,
    Log,
    base_dir,
    base_root,
    fresh,
    install,
    read_marker,
    spec_hash,
    tool,
)
from tracer.envs import dir_size
from tracer.errors import DltraceError
from tracer.files import write_text

#: what the guest needs beyond minbase; python3 brings libpython3.11-stdlib; the
#: headers are for the C collector the host cross-compiles for the guest (core.py)
PACKAGES = ("python3", f"libpython{PYTHON_VERSION}-dev")
#: bump when the way the base is assembled changes: existing bases are rebuilt
BASE_RECIPE = 2
FALLBACK_MIRROR = "http://deb.debian.org/debian"


def debian_mirror(sources: list[Path] | None = None) -> str:
    """The Debian archive apt already uses on this machine (a local or nearby mirror,
    proxy or snapshot service), else deb.debian.org. Read from one-line ``deb URI
    SUITE ...`` files and deb822 ``URIs:`` stanzas; security and non-Debian archives
    (Ubuntu, vendors) are skipped: the guest is Debian bookworm whatever the host.
    ``$DLTRACE_DEBIAN_MIRROR`` overrides it."""
    if os.environ.get("DLTRACE_DEBIAN_MIRROR"):
        return os.environ["DLTRACE_DEBIAN_MIRROR"].rstrip("/")
    if sources is None:
        sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list")),
                   *sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    for path in sources:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            uris = []
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.MULTILINE))
                if fields.get("Enabled", "yes").lower() != "no" and "deb" in fields.get("Types", "").split():
                    uris += fields.get("URIs", "").split()
        else:
            uris = [m.group(1) for m in re.finditer(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.MULTILINE)]
        for uri in uris:
            if re.search(r"/debian/?$", uri) and uri.startswith(("http://", "https://", "file:/")):
                return uri.rstrip("/")
    return FALLBACK_MIRROR


def base_spec() -> str:
    return spec_hash(["base", BASE_RECIPE, SUITE, "arm64", "minbase", list(PACKAGES)])


def base_ready() -> bool:
    marker = read_marker(base_dir())
    if not marker:
        return False
    return marker.get("spec") == base_spec() and (base_root() / "usr/bin/python3").exists()


def ensure_base(log: Log = lambda s: None) -> Path:
    """The shared Debian arm64 root with python3 (built if missing or stale)."""
    if base_ready():
        return base_root()
    for command in HOST_PACKAGES:
        tool(command)
    logs = envs.log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    tmp = fresh(base_dir())
    try:
        _build_base(tmp, mirror, log)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed build leaves nothing behind
        raise
    install(tmp, base_dir())
    return base_root()


def _build_base(tmp: Path, mirror: str, log: Log) -> None:
    logs = envs.log_dir()
    root = tmp / "root"
    started = time.monotonic()
    log(f"emulated base: downloading Debian {SUITE} arm64 ({', '.join(PACKAGES)}) from {mirror}")
    envs.run_logged(f"emulated base: debootstrap --download-only from {mirror}",
                    [tool("debootstrap"), "--download-only", "--arch=arm64", "--variant=minbase",
                     f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror],
                    logs / "emulated-base-debootstrap.log",
                    env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"})
    debs = sorted(glob.glob(str(root / "var/cache/apt/archives/*.deb")))
    if not debs:
        raise DltraceError(f"emulated base: debootstrap downloaded no packages (full log: "
                           f"{logs / 'emulated-base-debootstrap.log'})")
    log(f"emulated base: unpacking {len(debs)} packages")
    # merged /usr, as debootstrap makes bookworm: /bin, /lib and /sbin are links into /usr
    for top in ("bin", "lib", "sbin"):
        (root / "usr" / top).mkdir(parents=True, exist_ok=True)
        if (root / top).is_dir() and not (root / top).is_symlink():
            (root / top).rmdir()  # empty after a download: an OSError here means it is not
        (root / top).symlink_to(f"usr/{top}")
    unpack = ('root=$1; shift; for deb; do echo "$deb"; '
              'dpkg-deb --fsys-tarfile "$deb" | tar -C "$root" --keep-directory-symlink -xf - || exit 1; done')
    envs.run_logged("emulated base: unpacking the packages (dpkg-deb --fsys-tarfile | tar -x)",
                    ["sh", "-c", unpack, "sh", str(root), *debs], logs / "emulated-base-unpack.log")
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    shutil.rmtree(root / "debootstrap", ignore_errors=True)
    _finish_root(root)
    if sys.version_info[:2] == GUEST_PYTHON:
        # Debian compiles its Python modules in maintainer scripts, which did not run:
        # the host's 3.11 does it now, or each first run compiles them under emulation
        stdlib = root / f"usr/lib/python{PYTHON_VERSION}"
        log("emulated base: compiling the Python standard library")
        envs.run_logged("emulated base: compiling the standard library (compileall)",
                        [sys.executable, "-m", "compileall", "-q", "-j", "0", "-s", str(root), "-p", "/", str(stdlib),
                         str(root / "usr/lib/python3/dist-packages")], logs / "emulated-base-compileall.log")
    write_text(tmp / MARKER, json.dumps({
        "spec": base_spec(), "suite": SUITE, "packages": list(PACKAGES), "mirror": mirror, "debs": len(debs),
        "python": _guest_python_version(root), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "seconds": round(time.monotonic() - started, 1), "size_bytes": dir_size(root)}, indent=1))
    log(f"emulated base: ready in {time.monotonic() - started:.0f} s")


def _finish_root(root: Path) -> None:
    """What maintainer scripts would have done that Python needs: user and group
    databases (getpass, pwd), and the site directory the wheels are bound over."""
    etc = root / "etc"
    if not (etc / "passwd").exists():
        write_text(etc / "passwd", "root:x:0:0:root:/root:/bin/sh\n"
                                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    if not (etc / "group").exists():
        write_text(etc / "group", "root:x:0:\nnogroup:x:65534:\n")
    (root / GUEST_SITE.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)


def _guest_python_version(root: Path) -> str:
    found = sorted(p.name for p in (root / "usr/bin").glob("python3.*") if re.fullmatch(r"python3\.\d+", p.name))
    if f"python{PYTHON_VERSION}" not in found:
        raise DltraceError(f"emulated base: Debian {SUITE} gave no python{PYTHON_VERSION} (found: {found or 'none'})")
    return PYTHON_VERSION
