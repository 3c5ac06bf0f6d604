"""A user's own packages in every environment of a framework (`dltrace env add`).

A workload that imports transformers must run where its framework runs: on x86, on
each emulated ARM CPU, and in the GPU build whose registry a GPU path is derived from.
Each environment gets the same requirement, resolved with what it already has pinned,
so nothing the framework brought is replaced; a package that cannot be added to one of
them is refused in one line naming it and that environment. What was added is kept
under ``$DLTRACE_HOME`` (``added.json``), so a rebuilt environment gets it again.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from packaging.requirements import InvalidRequirement, Requirement

from tracer import emulation, envs
from tracer.emulation import added as emulated_added
from tracer.errors import DltraceError, UsageError
from tracer.files import read_json_object, write_text
from tracer.registry_entries import Framework, gpu_build_env

Log = Callable[[str], None]
#: where the added requirements are kept, per framework
ADDED_FILE = "added.json"


def _file() -> Path:
    return envs.home() / ADDED_FILE


def recorded(framework: str) -> list[str]:
    """The requirements `env add` gave ``framework``, in the order given."""
    reqs = read_json_object(_file()).get(framework, [])
    return [r for r in reqs if isinstance(r, str)] if isinstance(reqs, list) else []


def _record(framework: str, requirements: list[str]) -> None:
    doc = read_json_object(_file())
    doc[framework] = list(dict.fromkeys([*recorded(framework), *requirements]))
    envs.home().mkdir(parents=True, exist_ok=True)
    write_text(_file(), json.dumps(doc, indent=1))


def parse(fw: Framework, requirements: tuple[str, ...]) -> list[str]:
    """The requirements as pip will read them; a malformed one, or the framework itself
    (its release is frameworks.yaml's), is refused in one line."""
    out = []
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            why = str(exc).splitlines()[0] if str(exc) else "malformed"
            raise UsageError(f"{text[:80]!r} is not a requirement pip can read: {why}") from None
        if req.url:
            raise UsageError(f"{req.name}: give a release from the package index (NAME==VERSION), not a URL")
        if req.name.lower().replace("_", "-") in {fw.import_name, fw.name}:
            raise UsageError(f"{req.name} is the framework: its release is frameworks.yaml's ({fw.version})")
        out.append(str(req))
    return out


def _frozen(python: Path) -> str:
    proc = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise DltraceError(f"cannot list what {python} has installed: {' | '.join(envs.error_lines(proc.stderr))}")
    return "".join(line + "\n" for line in proc.stdout.splitlines() if "==" in line)


def emulated_ready(fw: Framework) -> bool:
    """Whether ``fw`` has an emulated aarch64 environment here to give packages to."""
    return fw.aarch64 is not None and not fw.aarch64.unavailable and emulation.status(fw.name) is not None


def add_to_venv(target: Framework, requirements: list[str], log: Log = lambda s: None) -> None:
    """Install ``requirements`` into one x86 environment with everything it has pinned;
    its marker (the emulated one's name and shape: requirement -> what it added, here
    left to pip) says which it has."""
    marker = envs.env_dir(target) / emulated_added.MARKER
    done = read_json_object(marker)
    requirements = [r for r in requirements if r not in done]
    if not requirements:
        return
    st = envs.status(target)
    if not st.ready or st.python is None:
        raise DltraceError(f"{target.name}'s environment is {st.note or 'not ready'}: dltrace env setup {target.name}")
    if st.note == "external interpreter":
        raise DltraceError(f"{target.name} runs an interpreter of yours ({st.python}): install into it yourself")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="dltrace-pins-") as pins:
        pins.write(_frozen(st.python))
        pins.flush()
        envs.log_dir().mkdir(parents=True, exist_ok=True)
        log(f"{target.name}: pip install {' '.join(requirements)}")
        log_path = envs.log_dir() / f"{target.name}-add.log"
        try:
            envs.run_logged(f"{target.name}: pip install {' '.join(requirements)}",
                            [str(st.python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                             "-c", pins.name, *requirements], log_path)
        except DltraceError:
            raise DltraceError(f"cannot add {' '.join(requirements)} to {target.name}'s x86_64 environment: "
                               f"{envs.refusal(log_path)}") from None
    write_text(marker, json.dumps({**done, **dict.fromkeys(requirements, [])}, indent=1))


def add(fw: Framework, requirements: list[str], log: Log = lambda s: None) -> list[str]:
    """Add ``requirements`` to every environment of ``fw`` there is; returns their names.
    An environment not set up yet gets them when it is (:func:`reapply`)."""
    done = []
    # the emulated environment first: a package without an aarch64 wheel is refused
    # before any environment has changed
    if emulated_ready(fw):
        emulated_added.add(fw.name, requirements, log)
        done.append(f"{fw.name} (aarch64)")
    build = gpu_build_env(fw)
    add_to_venv(fw, requirements, log)
    done.append(f"{fw.name} (x86_64)")
    if build is not None and envs.status(build).ready:
        add_to_venv(build, requirements, log)
        done.append(f"{build.name} (x86_64)")
    _record(fw.name, requirements)
    return done


def reapply(target: Framework, framework: str, log: Log = lambda s: None) -> None:
    """Give a (re)built x86 environment the packages `env add` gave its framework."""
    reqs = recorded(framework)
    if reqs and envs.status(target).note != "external interpreter":
        add_to_venv(target, reqs, log)


def equip_emulated(fw: Framework, extras: tuple[str, ...], log: Log = lambda s: None) -> None:
    """The emulated environment's share of what the x86 one has: the extras ``extras``
    (frameworks.yaml, the examples') and what `env add` gave the framework."""
    reqs = [r for name in extras if name in fw.extras for r in fw.extras[name].requirements]
    reqs += recorded(fw.name)
    if reqs:
        emulated_added.add(fw.name, reqs, log)
