"""Running a reader inside one of dltrace's framework environments.

Some profile formats are protobufs whose classes only a framework or its profiler
package ships (XPlane, op-stats). dltrace's own process imports no framework, so
such a file is read by a small module of the framework's probes (its registry entry
names it: ``profile_vocab.FORMAT.reader``) run with that environment's interpreter,
which writes what it read as JSON; this module runs it and reads the JSON back,
each failure one ImportFailed line naming the file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tracer import tempdirs
from tracer.contract import Exit
from tracer.errors import DltraceError
from tracer.importers import ImportFailed
from tracer.importers.source import MAX_BYTES, MAX_OBJECTS, clip


def read_in_env(path: Path, framework: str, reader: str, what: str, timeout_s: float) -> Any:
    """``python -m READER IN OUT`` run with ``framework``'s interpreter; its JSON
    output. ``what`` names the reader in errors ("jax's XPlane reader"); the reader
    exits Exit.NOT_ITS_KIND when the file is not of its kind, with the reason as its
    last stderr line. It gets the package alone on its path, as probes do, never this
    process's site-packages."""
    from tracer import envs, registry
    from tracer.paths import code_path

    if not reader:
        raise ImportFailed(f"{path}: {what}: frameworks.yaml names none for {framework} (profile_vocab's reader)")

    try:
        python = envs.python_for(registry.load()[framework])
    except (DltraceError, KeyError) as exc:
        raise ImportFailed(f"{path}: {what} runs in dltrace's {framework} environment: {exc}") from None
    with tempdirs.owned("dltrace-reader-") as tmp:
        out = tmp / "read.json"
        try:
            proc = subprocess.run([str(python), "-m", reader, str(path.resolve()), str(out)], capture_output=True,
                                  text=True, errors="replace", timeout=timeout_s, stdin=subprocess.DEVNULL, cwd=tmp,
                                  env={**os.environ, "PYTHONPATH": str(code_path(Path(tmp)))})
        except subprocess.TimeoutExpired:
            raise ImportFailed(f"{path}: {what} did not finish within {timeout_s:g} s") from None
        except OSError as exc:
            raise ImportFailed(f"{path}: cannot run the {framework} environment's python ({exc.strerror or exc})") \
                from None
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            kind = "not a file it can read" if proc.returncode == Exit.NOT_ITS_KIND else "it failed"
            raise ImportFailed(f"{path}: {what}: {kind} ({clip(last, 160)})")
        try:
            if out.stat().st_size > MAX_BYTES:
                raise ImportFailed(f"{path}: {what} wrote more than {MAX_BYTES >> 20} MiB; not imported")
            data = out.read_bytes()
            if data.count(b"{") > MAX_OBJECTS:  # the bound a JSON profile has, for what a reader wrote of one
                raise ImportFailed(f"{path}: {what} wrote more than the {MAX_OBJECTS:,} records an import reads; "
                                   "not imported")
            return json.loads(data)
        except (OSError, ValueError, RecursionError) as exc:
            raise ImportFailed(f"{path}: {what} wrote no readable result ({type(exc).__name__})") from None
