"""The profile readers' contract (tracer.profile_reader.ProfileReader): every format the
contract declares has a reader, every reader a declared format, each reader's signature is
the Protocol's, and the table mypy checks names the same functions as the one dltrace runs.
Fast tier: the reader modules are imported, no file is read."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tracer import profile_reader, registry
from tracer.contract import PROFILE_FORMATS
from tracer.importers import READERS
from tracer.profile_reader import mismatches


def test_every_format_has_a_reader_and_every_reader_a_format() -> None:
    assert set(READERS) == set(PROFILE_FORMATS)
    for fw in registry.load().values():
        assert set(fw.profiles) <= set(PROFILE_FORMATS), fw.name


@pytest.mark.parametrize("fmt", sorted(PROFILE_FORMATS))
def test_each_reader_keeps_the_contract(fmt: str) -> None:
    reader = READERS[fmt]
    function = getattr(importlib.import_module(reader.module), reader.function)
    assert callable(function)
    assert mismatches(function) == []


def test_the_typed_table_is_the_run_table() -> None:
    """The table mypy checks (profile_reader.TYPED, under TYPE_CHECKING) imports the
    functions READERS names, one per format."""
    tree = ast.parse(Path(inspect.getfile(profile_reader)).read_text())
    imported = {a.asname or a.name: node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for a in node.names}
    typed = next(node.value for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)
                 and isinstance(node.target, ast.Name) and node.target.id == "TYPED")
    assert isinstance(typed, ast.Dict)
    table = {ast.literal_eval(k): v.id for k, v in zip(typed.keys, typed.values)
             if k is not None and isinstance(v, ast.Name)}
    assert set(table) == set(PROFILE_FORMATS)
    for fmt, name in table.items():
        assert (imported[name], name) == (READERS[fmt].module, READERS[fmt].function), fmt


def test_a_reader_that_drifted_is_named() -> None:
    def renamed(path: Path, framework: str, ops: tuple[()], vocab: object = None, command: str = "") -> list[object]:
        return []

    def no_defaults(path: Path, framework: str, rules: tuple[()], vocab: object, command: str) -> list[object]:
        return []

    assert mismatches(renamed) and "rules" in mismatches(renamed)[0]
    assert mismatches(no_defaults) == ["vocab has no default", "command has no default"]
