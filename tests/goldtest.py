"""Whole-folder gold comparison (tests/test_gold.py): a folder of outputs against a folder
of gold files, file by file, both ways.

Every gold file must have an output of the same relative path and the same content, and
every output a gold file: a page that is new, one that is no longer written and one that
differs each fail, by name, with a unified diff of the first differing lines.
``regen=True`` (DLTRACE_REGEN_GOLD=1) makes the gold folder the outputs first: new and
changed files written, gone ones removed.

Both sides are normalised the same way before they are compared (the gold files keep
the bytes as written, so that the report under tests/gold/ opens in a browser):

- the tool's version, any version (``dltrace 0.1.0`` in a page's footer,
  ``"dltrace": "0.1.0"`` in survey.json), reads ``dltrace VERSION``: a release neither
  fails the test nor, regenerated, rewrites every file;
- a Graphviz drawing (a graphs/*.svg file, the same drawings inline in a framework page)
  keeps its elements, labels, titles and colours, but not its geometry (points, paths,
  positions, sizes, viewBox, transform): where ``dot`` places a node depends on its
  version and on the fonts it measures text with, not on dltrace. The tool's own SVG
  (the verdict grid, the bar plots) is compared as written.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

#: Lines of a unified diff shown per file.
DIFF_LINES = 40

#: The tool's version where a page or survey.json names it, whichever version it is.
_VERSION = re.compile(rb'(dltrace |"dltrace": ")\d+\.\d+[0-9A-Za-z.+-]*')
#: A drawing made by Graphviz: its <svg> element opens with dot's own first group.
_GRAPHVIZ = re.compile(rb'<svg\b[^>]*>\s*<g id="graph0" class="graph".*?</svg>', re.DOTALL)
_GEOMETRY = re.compile(rb'\b(points|d|x|y|cx|cy|rx|ry|width|height|viewBox|transform)="[^"]*"')


def _no_geometry(m: re.Match[bytes]) -> bytes:
    return _GEOMETRY.sub(rb'\1="..."', m.group(0))


def normalise(data: bytes) -> bytes:
    """What a comparison reads of a file (see the module's docstring)."""
    return _GRAPHVIZ.sub(_no_geometry, _VERSION.sub(rb"\1VERSION", data))


def files(folder: Path) -> dict[str, Path]:
    """Relative POSIX path -> file, every file under ``folder``."""
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def _lines(name: str, data: bytes) -> list[str]:
    """A file's lines as a diff shows them: compact JSON (a trace) one value a line."""
    text = data.decode("utf-8", "replace")
    if name.endswith(".json") and text.count("\n") <= 1:
        try:
            text = json.dumps(json.loads(text), indent=1, ensure_ascii=False)
        except ValueError:
            pass
    return text.splitlines()


def _diff(name: str, want: bytes, got: bytes) -> str:
    lines = list(difflib.unified_diff(_lines(name, want), _lines(name, got),
                                      f"gold/{name}", f"output/{name}", n=2, lineterm=""))
    more = f"\n... {len(lines) - DIFF_LINES} more diff lines" if len(lines) > DIFF_LINES else ""
    return "\n".join(lines[:DIFF_LINES]) + more


def regenerate(out: Path, gold: Path) -> None:
    """Make ``gold`` hold ``out``'s files: a file whose normalised content is the same is
    left as it is (a release does not rewrite every gold file), a gone one removed."""
    have, want = files(gold), files(out)
    for name, path in have.items():
        if name not in want:
            path.unlink()
    for name, path in want.items():
        target = gold / name
        data = path.read_bytes()
        if name in have and normalise(have[name].read_bytes()) == normalise(data):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for folder in sorted((p for p in gold.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()


def problems(out: Path, gold: Path) -> list[str]:
    """Each difference between the folders, with its diff; empty when they match."""
    have, got = files(gold), files(out)
    found = []
    for name in sorted(have.keys() | got.keys()):
        want = normalise(have[name].read_bytes()) if name in have else b""
        data = normalise(got[name].read_bytes()) if name in got else b""
        if name not in got:
            found.append(f"{name}: a gold file the output no longer has\n{_diff(name, want, data)}")
        elif name not in have:
            found.append(f"{name}: an output with no gold file\n{_diff(name, want, data)}")
        elif want != data:
            found.append(f"{name}: differs from its gold file\n{_diff(name, want, data)}")
    return found


def compare_folder(out: Path, gold: Path, regen: bool = False) -> None:
    """Fail (AssertionError) unless ``out`` and ``gold`` hold the same files with the
    same normalised content; ``regen`` first makes ``gold`` what ``out`` holds."""
    if regen:
        regenerate(out, gold)
    assert files(gold), f"{gold} holds no gold files: DLTRACE_REGEN_GOLD=1 writes them"
    found = problems(out, gold)
    assert not found, (f"{len(found)} output file(s) differ from {gold} (DLTRACE_REGEN_GOLD=1 rewrites them; "
                       "review `git diff tests/gold`):\n\n" + "\n\n".join(found))
