"""Per-framework virtual environments, created and cached by dltrace.

The frameworks cannot share one numpy, so each gets its own venv under
$DLTRACE_HOME/envs (default ~/.cache/dltrace). A marker file records the hash of
the install steps it was made from: when frameworks.yaml changes, the env is stale.
An existing interpreter (e.g. a CUDA machine's) can be used instead: `env use`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tracer import tempdirs
from tracer.errors import DltraceError, EnvNotReady
from tracer.files import write_text
from tracer.paths import code_path
from tracer.registry_entries import Framework

MARKER = "dltrace-env.json"


def home() -> Path:
    """$DLTRACE_HOME (default ~/.cache/dltrace), made absolute: a relative one would
    name another folder in a probe, which runs in a folder of its own."""
    return Path(os.environ.get("DLTRACE_HOME") or Path.home() / ".cache" / "dltrace").absolute()


def env_dir(fw: Framework) -> Path:
    return home() / "envs" / fw.name


def _external_file() -> Path:
    return home() / "external.json"


def _externals() -> dict[str, str]:
    """framework -> interpreter recorded by `env use`; a damaged file is an error that
    says how to mend it, not a silent loss of the user's choices."""
    path = _external_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DltraceError(f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise DltraceError(f"{path} is damaged (it must map framework names to interpreter paths); "
                           f"delete it and run `dltrace env use` again")
    return doc


def spec_hash(fw: Framework) -> str:
    spec = [[list(s.requirements), list(s.options)] for s in fw.install]
    text = json.dumps([spec, f"{sys.version_info.major}.{sys.version_info.minor}"])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class EnvStatus:
    name: str
    ready: bool
    python: Path | None
    version: str = ""
    size_bytes: int = 0
    note: str = ""  # why not ready, or "external"


def dir_size(path: Path) -> int:
    """Bytes in the files under ``path`` (links not followed): what an environment takes."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def status(fw: Framework, sizes: bool = False) -> EnvStatus:
    external = _externals().get(fw.name)
    if external:
        return EnvStatus(fw.name, Path(external).exists(), Path(external), _external_version(fw, external), 0,
                         "external interpreter")
    d = env_dir(fw)
    python = d / "bin" / "python"
    try:
        marker = json.loads((d / MARKER).read_text())
    except (OSError, ValueError, RecursionError):
        marker = None
    if not isinstance(marker, dict):
        return EnvStatus(fw.name, False, None, note="not set up")
    if marker.get("spec") != spec_hash(fw):
        return EnvStatus(fw.name, False, python, marker.get("version", ""), note="stale: frameworks.yaml changed")
    if not python.exists():
        return EnvStatus(fw.name, False, None, note="interpreter missing")
    return EnvStatus(fw.name, True, python, marker.get("version", ""), dir_size(d) if sizes else 0)


def _external_version(fw: Framework, python: str) -> str:
    try:
        return _import_version(fw, Path(python), VERSION_TIMEOUT_S)
    except DltraceError:
        return "?"


def python_for(fw: Framework) -> Path:
    """The interpreter to run fw's probe with, or a one-line error saying how to get one."""
    st = status(fw)
    if not st.ready or st.python is None:
        raise EnvNotReady(f"{fw.name}: environment {st.note or 'not ready'}; run: dltrace env setup {fw.name}")
    return st.python


#: Seconds an interpreter has to import its framework when one is set up or chosen
#: (`env use`: a first import compiles caches), and when only its version is shown
#: (`dltrace list`, a worker's resources): one that hangs costs that, not 300 s each.
IMPORT_TIMEOUT_S = 300
VERSION_TIMEOUT_S = 15
#: The most output kept of such an interpreter: one that never stops writing is
#: stopped there, instead of filling memory.
MAX_OUTPUT = 1 << 20


def _run_bounded(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``argv``; TimeoutError after ``timeout``
    seconds, OverflowError once it wrote more than MAX_OUTPUT bytes (killed either way)."""
    import selectors

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    out_fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            for f in (proc.stdout, proc.stderr):
                sel.register(f, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    streams[key.fd] += chunk
                    if sum(map(len, streams.values())) > MAX_OUTPUT:
                        raise OverflowError
        rc = proc.wait(max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise TimeoutError from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    text = {fd: bytes(data).decode(errors="replace") for fd, data in streams.items()}
    return rc, text.pop(out_fd), next(iter(text.values()))


def _import_version(fw: Framework, python: Path, timeout: float = IMPORT_TIMEOUT_S) -> str:
    env = {**os.environ, **fw.env}
    code = f"import {fw.import_name} as m; print(getattr(m, '__version__', 'unknown'))"
    try:
        rc, stdout, stderr = _run_bounded([str(python), "-c", code], env, timeout)
    except TimeoutError:
        raise DltraceError(f"{fw.name}: '{python}' did not import {fw.import_name} within {timeout:g} s") from None
    except OverflowError:
        raise DltraceError(f"{fw.name}: '{python}' wrote more than {MAX_OUTPUT >> 20} MiB while importing "
                           f"{fw.import_name}; stopped") from None
    except OSError as exc:
        raise DltraceError(f"{fw.name}: cannot run '{python}': {exc.strerror or exc}") from None
    lines = stdout.strip().splitlines()
    if rc != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DltraceError(f"{fw.name}: '{python}' cannot import {fw.import_name}: {tail[:300]}")
    return lines[-1][:200]


def log_dir() -> Path:
    """Where the full output of each set-up step is kept: a failed step's message
    names its file, because pip's own last line ("See above for details") does not
    say what went wrong."""
    return home() / "logs"


def setup(fw: Framework, force: bool = False, log: Callable[[str], None] = lambda s: None) -> EnvStatus:
    """Create (or reuse) fw's venv, install its steps in order, check the import, and
    build the C collector for its interpreter (also for an environment that was ready)."""
    st = status(fw)
    if st.ready and not force:
        if st.python is not None and not st.note:
            build_collector(fw, st.python, log)
            build_parts(fw, st.python, log)
            install_extras(fw, tuple(fw.extras), log)
        return st
    d = env_dir(fw)
    if d.exists():
        shutil.rmtree(d)
    d.parent.mkdir(parents=True, exist_ok=True)
    log_dir().mkdir(parents=True, exist_ok=True)
    log(f"{fw.name}: creating {d}")
    run_logged(f"{fw.name}: venv", [sys.executable, "-m", "venv", str(d)], log_dir() / f"{fw.name}-venv.log")
    python = d / "bin" / "python"
    for i, step in enumerate(fw.install, start=1):
        args = [*step.options, *step.requirements]
        log(f"{fw.name}: pip install {' '.join(args)}")
        cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
        run_logged(f"{fw.name}: install step {i} of {len(fw.install)} (pip install {' '.join(args)})", cmd,
                   log_dir() / f"{fw.name}-step{i}.log")
    version = _import_version(fw, python)
    if version.split("+")[0] != fw.version:
        raise DltraceError(f"{fw.name}: installed version {version}, frameworks.yaml declares {fw.version}")
    marker = {"spec": spec_hash(fw), "version": version, "python": sys.version.split()[0],
              "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_text(d / MARKER, json.dumps(marker, indent=1))
    build_collector(fw, python, log)
    build_parts(fw, python, log)
    install_extras(fw, tuple(fw.extras), log)
    return status(fw)


#: The extras installed into an environment, each with the hash of its install step.
EXTRAS_MARKER = "dltrace-extras.json"


def _extra_hash(fw: Framework, name: str) -> str:
    step = fw.extras[name]
    return hashlib.sha256(json.dumps([list(step.requirements), list(step.options)]).encode()).hexdigest()[:16]


def missing_extras(fw: Framework, names: tuple[str, ...]) -> list[str]:
    """Of ``names`` (frameworks.yaml ``extras``), those fw's environment lacks."""
    try:
        done = json.loads((env_dir(fw) / EXTRAS_MARKER).read_text())
    except (OSError, ValueError, RecursionError):
        done = {}
    done = done if isinstance(done, dict) else {}
    return [n for n in names if n in fw.extras and done.get(n) != _extra_hash(fw, n)]


def install_extras(fw: Framework, names: tuple[str, ...], log: Callable[[str], None] = lambda s: None) -> None:
    """Install the extras ``names`` into fw's environment where missing (the examples'
    torchvision, keras...): pinned to the framework's build, so that nothing it has is
    replaced (a check after each step says so if it was). An external interpreter (`env
    use`) is the user's to equip: it is left alone."""
    todo = missing_extras(fw, names)
    st = status(fw)
    if not todo or st.note == "external interpreter":
        return
    python = python_for(fw)
    d = env_dir(fw)
    log_dir().mkdir(parents=True, exist_ok=True)
    for name in todo:
        step = fw.extras[name]
        args = [*step.options, *step.requirements]
        log(f"{fw.name}: extra {name}: pip install {' '.join(args)}")
        run_logged(f"{fw.name}: extra {name} (pip install {' '.join(args)})",
                   [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args],
                   log_dir() / f"{fw.name}-extra-{name}.log")
        version = _import_version(fw, python)
        if version.split("+")[0] != fw.version:
            raise DltraceError(f"{fw.name}: extra {name} replaced the framework ({version} now, frameworks.yaml "
                               f"declares {fw.version}); pin the extra to the framework's release")
        try:
            done = json.loads((d / EXTRAS_MARKER).read_text())
        except (OSError, ValueError, RecursionError):
            done = {}
        done = done if isinstance(done, dict) else {}
        done[name] = _extra_hash(fw, name)
        write_text(d / EXTRAS_MARKER, json.dumps(done, indent=1))


def build_collector(fw: Framework, python: Path, log: Callable[[str], None] = lambda s: None) -> bool:
    """Build the C core of the Python collector with ``python`` (tracer.collect.cbuild,
    run in the environment: its own headers and compiler settings) into the shared
    cache under home()/ext; nothing to do where it is built. Not an error when it
    cannot be built: the probes run the pure-Python collector then, and their traces
    say so (meta.collector). The install steps, and so the spec hash, are untouched."""
    try:
        # the package alone on the path, as a probe gets it (never an installed wheel's site-packages)
        with tempdirs.owned("dltrace-cbuild-") as tmp:
            path = os.pathsep.join([str(code_path(Path(tmp))), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            proc = subprocess.run([str(python), "-m", "tracer.collect.cbuild"], capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": path}, timeout=300, stdin=subprocess.DEVNULL,
                                  errors="replace", cwd=tmp)
        said = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        ok = proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        said, ok = str(exc), False
    log(f"{fw.name}: C collector {'ready' if ok else 'not built, the Python collector will run'}: {said}")
    return ok


def build_parts(fw: Framework, python: Path, log: Callable[[str], None] = lambda s: None) -> None:
    """Run fw's ``builds`` modules in its environment (each keeps what it builds there,
    once per framework version and source: a second run finds it built). A part that
    cannot be built fails the set-up with its one line and log: its probe needs it."""
    for module in fw.builds:
        log(f"{fw.name}: building {module}")
        with tempdirs.owned("dltrace-build-") as tmp:
            path = os.pathsep.join([str(code_path(Path(tmp))), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            run_logged(f"{fw.name}: building {module}", [str(python), "-m", module],
                       log_dir() / f"{fw.name}-build-{module.rsplit('.', 1)[-1]}.log",
                       env={**os.environ, "PYTHONPATH": path, **fw.env})


def run_logged(what: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
    """Run one set-up command with its whole output in ``log_path``; a failure is one
    line: what was being done, the lines of the output that say what went wrong, and
    where the full log is."""
    with open(log_path, "w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env).returncode
        except OSError as exc:
            raise DltraceError(f"{what} could not start: {exc.strerror or exc}") from None
    if rc != 0:
        why = " | ".join(error_lines(log_path.read_text(errors="replace"))) or f"exit status {rc}"
        raise DltraceError(f"{what} failed: {why} (full log: {log_path})")


#: pip's own framing around a build failure: true, but nothing a user can act on.
_GENERIC = re.compile(r"subprocess-exited-with-error|See above for|^hint:|^note: |failed-wheel-build|"
                      r"Failed to build installable wheels|^exit code: \d+|legacy-install-failure|"
                      r"metadata-generation-failed|^ERROR: Could not build wheels|^ERROR: Failed building wheel|"
                      r"^error: subprocess|Running setup\.py", re.I)
_ERROR = re.compile(r"^(?:error|ERROR|fatal error|E)\b:|\b(?:No matching distribution|Could not find a version|"
                    r"ResolutionImpossible|No space left|invalid command)\b|^\w+(?:Error|Exception): ")


def error_lines(output: str, most: int = 3) -> list[str]:
    """The few lines of a failed pip (or apt) run that say what went wrong
    (``error: invalid command 'bdist_wheel'``), without pip's generic framing; the
    last lines of the output if none looks like an error."""
    lines = [line.strip().lstrip("│║╰╭─ ").strip() for line in output.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("WARNING: Location", "$ "))]
    found = [line for line in lines if _ERROR.search(line) and not _GENERIC.search(line)]
    keep = list(dict.fromkeys(found))[:most] or [line for line in lines if not _GENERIC.search(line)][-most:]
    return [line if len(line) <= 300 else line[:299] + "…" for line in keep]


def refusal(log_path: Path) -> str:
    """Why pip would not add a package, in words a user acts on: the dependency that
    would replace something installed (pip's "conflict is caused by" lines: ``The user
    requested (constraint) torch==2.13.0; torchvision 0.27.0 depends on torch==2.12.0``),
    or pip's error lines, and where the full log is."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    _, found, rest = text.partition("The conflict is caused by:")
    conflicts = [line.strip() for line in rest.strip().split("\n\n")[0].splitlines() if found and line.strip()]
    why = (f"it needs another release of what is installed ({'; '.join(conflicts[:4])})" if conflicts else
           " | ".join(error_lines(text)) or "pip failed")
    return f"{why} (full log: {log_path})"


def use(fw: Framework, python: str | None) -> EnvStatus:
    """Run fw from an existing interpreter (None: go back to dltrace's own env)."""
    ext = _externals()
    if python is None:
        ext.pop(fw.name, None)
    else:
        path = Path(python).expanduser()
        if not path.exists():
            raise DltraceError(f"{fw.name}: no interpreter at {path}")
        if not path.is_file() or not os.access(path, os.X_OK):
            raise DltraceError(f"{fw.name}: {path} is not an executable Python interpreter")
        _import_version(fw, path)
        ext[fw.name] = str(path.absolute())
    home().mkdir(parents=True, exist_ok=True)
    write_text(_external_file(), json.dumps(ext, indent=1))
    return status(fw)
