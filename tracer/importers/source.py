"""Reading a profiler file someone else recorded: bytes, gzip and JSON, each step
bounded and each failure one line naming the file.

The files come from other machines and other people. A gzip bomb, a truncated
download, a document nested a million levels deep or a 40 GB file must end in an
:class:`ImportFailed` that says what is wrong, not in a traceback or an exhausted
machine; so sizes are capped before anything is decompressed or parsed.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tracer.bounded import GZIP_MAGIC, NotRegular, TooLarge, gunzip, read_regular
from tracer.importers import ImportFailed

#: The largest file read, and the most bytes a gzip file may decompress to. The
#: largest real Kineto trace at hand is 40 MB of JSON; a whole-model trace of many
#: steps reaches a few hundred MB; past 1 GiB the JSON alone would need ~10 GiB.
MAX_BYTES = 1 << 30
#: The most JSON objects (events, their args) a document may hold. Memory follows
#: the objects, not the bytes: 2 M tiny Kineto events took 3.1 GB to parse and
#: check, and 890 MB of them 10 to 18 GB. The largest real profile at hand (a
#: recommender step on an A100, 33 MiB) holds 193,000; counting the file's ``{``
#: before parsing (a string holding one only overcounts) bounds an import near 1.5 GB.
MAX_OBJECTS = 1_000_000
#: Name endings of profile files in any format (a framework's own, frameworks.yaml
#: ``profile_vocab``, come first: ``pt.trace`` before ``trace``).
SUFFIXES = ("gz", "json", "pb", "xplane", "kineto", "trace", "nvvp", "nvprof")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Source:
    """One file as read: its name, its hash (of the bytes on disk, so it identifies
    the very file whatever it is called), and its content (decompressed)."""

    path: Path
    sha256: str
    size: int
    compressed: bool
    data: bytes

    @property
    def name(self) -> str:
        return self.path.name


def read_source(path: str | Path) -> Source:
    """The file's bytes (gunzipped when they are gzip), or a one-line ImportFailed.
    Only a regular file is read (a named pipe would block forever)."""
    path = Path(path)
    try:
        raw = read_regular(path, MAX_BYTES)
    except OSError as exc:
        raise ImportFailed(f"{path}: cannot read ({exc.strerror or exc})") from None
    except NotRegular as exc:
        raise ImportFailed(f"{path}: is {exc}, not a profiler file") from None
    except TooLarge:
        raise ImportFailed(f"{path}: larger than {MAX_BYTES >> 20} MiB; not imported") from None
    if not raw:
        raise ImportFailed(f"{path}: empty file")
    digest = hashlib.sha256(raw).hexdigest()
    compressed = raw[:2] == GZIP_MAGIC
    data = _gunzip(path, raw) if compressed else raw
    return Source(path, digest, len(raw), compressed, data)


def _gunzip(path: Path, raw: bytes) -> bytes:
    try:
        return gunzip(raw, MAX_BYTES)
    except TooLarge:
        raise ImportFailed(f"{path}: decompresses to more than {MAX_BYTES >> 20} MiB; not imported") from None
    except (EOFError, zlib.error) as exc:
        raise ImportFailed(f"{path}: corrupt or truncated gzip ({type(exc).__name__}: {clip(str(exc), 120)})") from None


def load_json(src: Source, what: str) -> Any:
    """The file's JSON document; ``what`` names the kind of file expected in errors.
    A document of more than :data:`MAX_OBJECTS` objects is refused before parsing."""
    objects = src.data.count(b"{")
    if objects > MAX_OBJECTS:
        raise ImportFailed(f"{src.path}: holds about {objects:,} JSON objects, more than the {MAX_OBJECTS:,} an "
                           "import reads; profile fewer steps") from None
    try:
        return json.loads(src.data)
    except MemoryError:
        raise ImportFailed(f"{src.path}: too large to import in the memory available") from None
    except RecursionError:
        raise ImportFailed(f"{src.path}: not {what} (JSON nested too deeply to read)") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        if src.data.lstrip()[:1] in (b"{", b"["):
            kind = f"corrupt or truncated JSON: {clip(str(exc), 120)}"
        elif b"\x00" in src.data[:4096] or isinstance(exc, UnicodeDecodeError):
            kind = "binary data, not JSON" + (f"; an XPlane .pb is imported with --framework {_xplane_readers()}"
                                              if src.name.endswith(".pb") else "")
        else:
            kind = f"not JSON: {clip(str(exc), 120)}"
        raise ImportFailed(f"{src.path}: not {what} ({kind})") from None


def _xplane_readers() -> str:
    from tracer.importers import frameworks_reading

    return " or ".join(frameworks_reading("xplane")) or "(none reads XPlane files)"


def short_name(file_name: str, suffixes: tuple[str, ...] = ()) -> str:
    """A short, safe name for a source (the trace's variant and its output folder):
    ``alexnet-a100.kineto.json.gz`` -> ``alexnet-a100``; ``suffixes``: the framework's
    own name endings (:func:`tracer.importers.file_suffixes`)."""
    stem = _suffixes(suffixes).sub("", file_name) or file_name
    stem = _UNSAFE_NAME.sub("-", stem).strip("-.") or "imported"
    return stem[:60]


@lru_cache(maxsize=16)
def _suffixes(own: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"(?:\.(?:" + "|".join(map(re.escape, (*own, *SUFFIXES))) + r"))+$", re.I)


def clip(text: str, width: int) -> str:
    """At most ``width`` characters of a string from the file, one line."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
