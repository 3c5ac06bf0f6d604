"""The gap record: a case a survey (or a derivation, an import, a fleet) could not trace,
with the reason, kept beside the traces as ``<primitive>-<api>.gap.json``.

A record beside the trace record (tracer/trace.py), on its floor: stdlib, the bounded
reader and the atomic writer only, so that every stage that reads gaps (the analysis
modules, the report) can type them without importing the survey. Versioned as traces
are: ``"version"`` says which fields its writer knew; a record without one is version 1
(every record written before the field existed), and a newer one is refused in one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tracer.bounded import NotRegular, TooLarge, read_regular
from tracer.files import write_text

GAP_SUFFIX = ".gap.json"

#: The record's versions: (version, date, what it added), as tracer.trace.HISTORY is for
#: traces. A record without ``version`` is version 1 (``cpu`` and ``arch`` were added
#: to version 1 under "older records have none" rules, which the loader keeps).
#: docs/trace-format.md lists this history (tests/test_docs.py checks that it does).
HISTORY: tuple[tuple[int, str, str], ...] = (
    (1, "2026-11-21", "the record: framework, device, variant, primitive, api, error, kind, cpu, arch"),
    (2, "2026-11-29", "version: the record says its version (absent: version 1)"),
)
VERSION = HISTORY[-1][0]
#: The field that carries the version (as a trace's ``"version"`` does).
VERSION_FIELD = "version"


@dataclass
class Gap:
    """A case the survey could not trace, with the reason, shown in the report."""

    framework: str
    device: str
    variant: str
    primitive: str
    api: str
    error: str
    kind: str = "failed"
    cpu: str = ""  # an emulated CPU model, "" for this machine
    arch: str = ""  # the architecture of the fleet worker it was to run on natively, "" for this machine's

    def __post_init__(self) -> None:
        # a record is kept and shown (models.html, survey.json): it names a file by its last
        # part, as every output does, never a folder of the machine it was made on
        self.error = _FOLDERS.sub("", self.error)


#: The folders of an absolute path in a reason (``/home/me/models/net.py:3`` -> ``net.py:3``).
_FOLDERS = re.compile(r"(?<![\w.~:/-])/(?:[^/\s:'\"(),]+/)+")


#: A gap record is a few hundred bytes (a probe's stderr tail at most a few KB).
MAX_GAP_BYTES = 1 << 20
_GAP_FIELDS = {f for f in Gap.__dataclass_fields__}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_GAP_REQUIRED = ("framework", "device", "variant", "primitive", "api", "error")


def load_gap(path: Path) -> Gap:
    """A gap record read back, checked field by field as traces are: it comes from a
    folder someone else may have filled. ValueError names what is wrong, in one line."""
    try:
        doc = json.loads(read_regular(path, MAX_GAP_BYTES))
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    except (NotRegular, TooLarge) as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    version = doc.pop(VERSION_FIELD, 1)
    if type(version) is not int:  # true is no version (bool is an int)
        raise ValueError(f"field {VERSION_FIELD!r} is {type(version).__name__}, not an int")
    if version > VERSION or version < 1:
        raise ValueError(f"gap record version {str(version)[:20]} is not supported (this dltrace reads 1..{VERSION}"
                         f"{'; a newer dltrace wrote it' if version > VERSION else ''})")
    missing = [k for k in _GAP_REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"missing field {missing[0]!r}")
    for key, value in doc.items():
        if key not in _GAP_FIELDS:
            raise ValueError(f"unknown field {str(key)[:40]!r}")
        if not isinstance(value, str):
            raise ValueError(f"field {key!r} is {type(value).__name__}, not a string")
    return Gap(**{k: _LONE_SURROGATE.sub("\ufffd", v) for k, v in doc.items()})


def gap_json(gap: Gap) -> str:
    """A gap record of this version; ``arch`` only where it is set (a record without it
    reads as a gap on this machine's architecture)."""
    return json.dumps({VERSION_FIELD: VERSION, **{k: v for k, v in gap.__dict__.items() if k != "arch" or v}})


def write_gap(path: Path, gap: Gap) -> None:
    """Write ``gap`` as the record of the case whose trace would be ``path`` (``X.json``
    becomes ``X.gap.json``), atomically: every stage that loses a case records it this one
    way, so that collect() and a re-run find it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path.with_name(path.name[: -len(".json")] + GAP_SUFFIX), gap_json(gap))
