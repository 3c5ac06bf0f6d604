"""The GPU evidence classes are defined once (tracer.evidence_classes): no other module of
tracer/ lists two of them in one literal (the nine lists of before held two orders:
contract.py set `lowered` above `registered`, collect/gpu_evidence.py below it), and the
docs' tables are that table. Fast tier."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tracer.evidence_classes import (CHECKED_EVIDENCE, DERIVED_EVIDENCE, EVIDENCE, EVIDENCE_CLASSES,
                                     EVIDENCE_MEANING, rank, strongest)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tracer"
HOME = PACKAGE / "evidence_classes.py"
NAMES = {c.name for c in EVIDENCE_CLASSES}


def _lists_of_classes(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """(line, names) of every tuple, list or set literal, and dict's keys, naming two or
    more classes."""
    found = []
    for node in ast.walk(tree):
        items: list[ast.expr | None] = []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in NAMES]
        if len(named) >= 2:
            found.append((node.lineno, named))
    return found


def test_no_second_definition_of_the_classes():
    seconds = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME or "reference" in path.relative_to(PACKAGE).parts:
            continue
        for line, named in _lists_of_classes(ast.parse(path.read_text(), str(path))):
            seconds.append(f"{path.relative_to(ROOT)}:{line}: {named}")
    assert not seconds, "the evidence classes are listed outside tracer/evidence_classes.py (derive them from " \
                        "EVIDENCE_CLASSES):\n" + "\n".join(seconds)


def test_the_scan_finds_a_second_definition():
    assert _lists_of_classes(ast.parse('ORDER = ("compiled", "registered", "lowered")'))
    assert _lists_of_classes(ast.parse('M = {"recorded": "ran", "imported": "read"}'))
    assert not _lists_of_classes(ast.parse('L = ("run", "registry", *DERIVED, "recorded")'))


def test_one_order_ranks_every_class_once():
    assert [c.rank for c in EVIDENCE_CLASSES] == list(range(len(EVIDENCE_CLASSES)))
    assert len(NAMES) == len(EVIDENCE_CLASSES) and EVIDENCE == tuple(c.name for c in EVIDENCE_CLASSES)
    assert DERIVED_EVIDENCE == ("compiled", "lowered", "registered", "source")
    assert set(CHECKED_EVIDENCE) <= set(DERIVED_EVIDENCE) and "source" not in CHECKED_EVIDENCE
    assert list(EVIDENCE_MEANING) == list(EVIDENCE)
    # what a derived trace names where its passes derived two classes: the stronger, by the same order
    assert strongest({"lowered", "registered"}) == "lowered" == strongest(["registered", "lowered"])
    assert strongest({"lowered", "compiled"}) == "compiled" and strongest({"run"}) == ""
    assert rank("nothing") == len(EVIDENCE_CLASSES)


def test_the_scorecards_list_evidence_takes_the_gpu_classes_order():
    from tracer.analysis.figure import LIST_EVIDENCE

    assert [e for e in LIST_EVIDENCE if e in DERIVED_EVIDENCE] == list(DERIVED_EVIDENCE)


def _table(page: Path, header: str) -> list[list[str]]:
    """The rows of the Markdown table under ``header`` (its first line), cells stripped."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == header)
    rows = []
    for line in lines[start + 2:]:
        if not line.strip().startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


@pytest.mark.parametrize("page, header, fields", [
    ("gpu.md", "| class | what it is | what makes it |", ("meaning", "made_by")),
    ("concepts.md", "| class | what it is |", ("meaning",)),
])
def test_the_docs_tables_are_the_one_table(page, header, fields):
    want = [[f"`{c.name}`", *(getattr(c, f) for f in fields)] for c in EVIDENCE_CLASSES]
    got = _table(ROOT / "docs" / page, header)
    assert got == want, f"docs/{page}'s evidence table differs from tracer.evidence_classes.EVIDENCE_CLASSES: " \
                        "write its rows as\n" + "\n".join("| " + " | ".join(r) + " |" for r in want)


def test_the_html_legend_reads_the_table():
    from tracer.processing.evidence_class import EVIDENCE_MEANING as legend

    assert legend is EVIDENCE_MEANING and not re.search(r"\bEVIDENCE_MEANING\s*=", (
        PACKAGE / "processing" / "evidence_class.py").read_text())
