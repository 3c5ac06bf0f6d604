"""Where an imported file came from, as ``reference/imported/PROVENANCE.md`` says.

The project keeps copies of the real GPU traces it was given, with a table naming
for each file the repository, commit and path it was taken from, and the license
texts. An imported file is recognised as one of them by its SHA-256 (the same
bytes as the copy), never by its name alone, and its trace then carries that row
and the license with it, as the license requires of anything derived from it.
Any other file gets its name and hash only.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

#: The project's copies of the imported traces, with PROVENANCE.md and licenses/.
REFERENCE = Path(__file__).resolve().parent.parent / "reference" / "imported"
_ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*$")
_FROM = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)\s*@\s*(?P<commit>[0-9a-fA-F]{6,40})\s*:\s*(?P<path>\S+)$")
#: What the traces of a repository may be used for, when its own notice restricts it.
TERMS = {
    "AMD-AGI/TraceLens": "for testing, validation and education, not benchmark figures "
                         "(licenses/TraceLens-traces-README.md): use for paths and kernel names, never timings",
}


@lru_cache(maxsize=1)
def _provenance_md() -> list[str]:
    """PROVENANCE.md's lines (none when the project's copy is missing)."""
    try:
        return (REFERENCE / "PROVENANCE.md").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, str]]:
    """PROVENANCE.md's rows by file (a path under reference/imported): gpu, what runs,
    repository, commit, path. A row's first cell may name several files, with folders,
    ``{CPU,GPU}`` alternatives and ``*`` (``tensorflow-timeline/{CPU,GPU}/timeline_*.json``)."""
    rows = {}
    for line in _provenance_md():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) not in (5, 6) or cells[0] == "file" or set(cells[0]) <= set("-: "):
            continue
        src = _FROM.match(cells[4])
        if not src:
            continue
        for name in _files(cells[0]):
            rows[name] = {"gpu": cells[1], "what": cells[2], **src.groupdict()}
    return rows


def _files(cell: str) -> list[str]:
    """The files a row's first cell names, as paths under reference/imported."""
    out = []
    for entry in (e.strip() for e in cell.split(", ") if e.strip()):
        m = re.search(r"\{([^{}]*)\}", entry)
        variants = [entry[:m.start()] + alt + entry[m.end():] for alt in m.group(1).split(",")] if m else [entry]
        for pattern in variants:
            if "*" in pattern:
                out += sorted(str(p.relative_to(REFERENCE)) for p in REFERENCE.glob(pattern) if p.is_file())
            elif ".." not in pattern:
                out.append(pattern)
    return out


_ORIGINAL = re.compile(r"^- original: (\S+) sha256 ([0-9a-f]{64})$")


@lru_cache(maxsize=1)
def _originals() -> dict[str, str]:
    """sha256 of an original -> the name of its redacted copy (PROVENANCE.md's list)."""
    return {m.group(2): m.group(1) for m in map(_ORIGINAL.match, _provenance_md()) if m}


@lru_cache(maxsize=32)
def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _license(repo: str) -> str:
    """``MIT (Copyright (c) Meta Platforms, Inc. and affiliates.; licenses/X-LICENSE)``."""
    name = f"{repo.split('/', 1)[1]}-LICENSE"
    try:
        text = (REFERENCE / "licenses" / name).read_text(encoding="utf-8")
        lines = [line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip().lstrip("#").strip()]
    except OSError:
        return ""
    kind = lines[0].removesuffix(" License") if lines else "see license file"
    holder = next((line for line in lines if line.lower().startswith("copyright")), "")
    return f"{kind} ({holder + '; ' if holder else ''}tracer/reference/imported/licenses/{name})"


def provenance(file_name: str, sha256: str, importer: str) -> dict[str, Any]:
    """The trace's ``meta.provenance``: the file, its hash, and its origin and license
    when it is one of the project's reference files."""
    out: dict[str, Any] = {"source": file_name, "sha256": sha256, "imported_by": "dltrace import", "importer": importer}
    original = _originals().get(sha256)
    for name, row in _table().items():
        if _sha256(REFERENCE / name) != sha256 and name != original:
            continue
        out.update({
            "reference_copy": f"tracer/reference/imported/{name}",
            "origin": f"{row['repo']}@{row['commit']}:{row['path']}",
            "repository": row["repo"], "commit": row["commit"], "path": row["path"],
            "gpu": row["gpu"], "what": row["what"],
            "license": _license(row["repo"]),
        })
        if row["repo"] in TERMS:
            out["terms"] = TERMS[row["repo"]]
        break
    return out
