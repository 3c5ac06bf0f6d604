"""JAX's XPlane reader (frameworks.yaml: jax ``profile_vocab.xplane.reader``). Runs
inside dltrace's JAX environment (never imported by dltrace itself): reads an
XPlane file with JAX's own reader, ``jax.profiler.ProfileData``, and writes what it
holds as plain JSON for :mod:`tracer.importers.xplane`.

An XPlane (``*.xplane.pb``, what ``jax.profiler`` and TensorBoard write) is a
protobuf. No package on PyPI short of a framework ships its definition
(xprof and tensorboard-plugin-profile stopped shipping ``xplane_pb2``; TensorFlow
has it inside its tsl tree), and a hand-written protobuf parser would be a second,
unmaintained reader of a format that changes. JAX reads its own files, so the
reading happens where JAX is: in the JAX environment dltrace already keeps for its
probes, as a subprocess, so that dltrace's process imports no framework.

Usage: python -m tracer.probes.jax_xplane IN.xplane.pb OUT.json
Exit status Exit.NOT_ITS_KIND: the file is not an XPlane JAX can read (the reason on
stderr). Standard library, jax and the package's contract only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from tracer.contract import Exit

if TYPE_CHECKING:  # the annotations only (jax is Any to mypy: not installed where it runs)
    from jax.profiler import ProfileEvent, ProfilePlane

#: The most events written: a real profile of one step has thousands; a file with
#: millions (hostile, or hours of profiling) is cut, and the cut is said.
MAX_EVENTS = 2_000_000


def _value(v: object) -> bool | int | float | str | None:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float, str)):
        return v
    return None  # bytes, protos: not needed


def _stats(obj: ProfilePlane | ProfileEvent) -> dict[str, bool | int | float | str]:
    out = {}
    try:
        for key, value in obj.stats:
            v = _value(value)
            if isinstance(key, str) and v is not None:
                out[key] = v
    except Exception:  # a stat the reader cannot convert is left out, not fatal
        pass
    return out


def main(argv: list[str]) -> Exit:
    if len(argv) != 3:
        print("usage: python -m tracer.probes.jax_xplane IN OUT", file=sys.stderr)
        return Exit.USAGE
    os.environ["JAX_PLATFORMS"] = "cpu"  # reading a file needs no accelerator, and none is looked for
    try:
        from jax.profiler import ProfileData
    except Exception as exc:  # noqa: BLE001 - any import failure is the answer
        print(f"jax.profiler.ProfileData is not available here ({type(exc).__name__}: {exc})", file=sys.stderr)
        return Exit.IMPORT
    try:
        with open(argv[1], "rb") as fh:
            data = ProfileData.from_serialized_xspace(fh.read())
        planes, total, cut = [], 0, False
        for plane in data.planes:
            lines = []
            for line in plane.lines:
                events = []
                for e in line.events:
                    if total >= MAX_EVENTS:
                        cut = True
                        break
                    events.append([e.name, e.start_ns, e.duration_ns, _stats(e)])
                    total += 1
                lines.append({"name": line.name, "events": events})
            planes.append({"name": plane.name, "stats": _stats(plane), "lines": lines})
    except Exception as exc:  # noqa: BLE001 - JAX's reader raises various types for a bad file
        print(f"{type(exc).__name__}: {exc}"[:300], file=sys.stderr)
        return Exit.NOT_ITS_KIND
    with open(argv[2], "w", encoding="utf-8") as fh:
        json.dump({"reader": f"jax.profiler.ProfileData (jax {_jax_version()[:20]})", "planes": planes,
                   "events": total, "cut": cut}, fh)
    return Exit.OK


def _jax_version() -> str:
    try:
        import jax

        return str(jax.__version__)
    except Exception:  # noqa: BLE001
        return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv))
