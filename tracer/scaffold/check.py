"""A skeleton's check: its check.py run in the framework's environment, the package on
its path as a probe's is; its verdict, or the one line why it failed."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tracer import envs, tempdirs
from tracer.contract import Exit
from tracer.errors import DltraceError
from tracer.paths import code_path
from tracer.registry_entries import Framework
from tracer.runner import DEFAULT_TIMEOUT
from tracer.scaffold.skeleton import MANIFEST


@dataclass
class Checked:
    ok: bool
    lines: list[str]
    reason: str
    seconds: float


#: Bytes of the check's output kept for its lines and its reason: it is streamed to
#: files, and only their tails are read back (a check that printed 640 MiB took
#: dltrace to 1.97 GB when its output was kept whole, twice).
OUTPUT_TAIL = 64 * 1024


def check(fw: Framework, folder: Path, timeout: float = DEFAULT_TIMEOUT) -> Checked:
    """Run the skeleton's check.py in ``fw``'s environment with the tracer package on
    its path (as a probe runs); its verdict, or the one line why it failed. Its output
    goes to files in its temporary folder, of which the last OUTPUT_TAIL bytes are read."""
    if not (folder / MANIFEST).is_file() or not (folder / "check.py").is_file():
        raise DltraceError(f"{folder} holds no skeleton (no {MANIFEST} or check.py): write one with --model "
                           "or --primitives")
    python = envs.python_for(fw)
    with tempdirs.owned("dltrace-check-") as tmp:
        env = {**os.environ, **fw.env}
        env["PYTHONPATH"] = os.pathsep.join([str(code_path(tmp)), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        t0 = time.perf_counter()
        with open(tmp / "check.out", "wb") as stdout, open(tmp / "check.err", "wb") as stderr:
            try:
                proc = subprocess.run([str(python), str(folder.resolve() / "check.py")], stdout=stdout,
                                      stderr=stderr, env=env, cwd=tmp, timeout=timeout, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return Checked(False, [], f"the check did not end in {timeout:g} s", timeout)
        seconds = time.perf_counter() - t0
        lines = [line for line in tail(tmp / "check.out").splitlines() if line.strip()]
        said = [line.strip() for line in tail(tmp / "check.err").splitlines() if line.strip()]
    if proc.returncode == Exit.OK:
        return Checked(True, lines, "", seconds)
    reason = said[-1] if said else f"exit status {proc.returncode}"
    return Checked(False, lines, reason.removeprefix("check failed: ")[:OUTPUT_TAIL // 16], seconds)


def tail(path: Path, limit: int = OUTPUT_TAIL) -> str:
    """The last ``limit`` bytes of ``path`` as text, from a line's start, a first line
    saying how much was left out before them: never the whole file in memory."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size <= limit:
            fh.seek(0)
            return fh.read().decode(errors="replace")
        fh.seek(size - limit)
        kept = fh.read().decode(errors="replace").partition("\n")[2]
    return f"[... {size - len(kept.encode(errors='replace')):,} bytes of the check's output left out]\n{kept}"
