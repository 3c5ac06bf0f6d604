"""What dltrace knows of the vendor libraries (libraries.yaml, beside frameworks.yaml):
data, not code, so that a new library or a renamed kernel family is one edited line a
reviewer can read, validated here as the registry is (a malformed entry is a one-line
error naming the file and the key), and compiled once into the tables the processing
stages match frames against (tracer.processing.tags, kernel_names, dispatch, backend_needs)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.data_file import RegistryError, read_text, safe_yaml

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

#: ``(pattern, tag)`` rows, tried in order, first match wins.
Table = tuple[tuple[re.Pattern[str], str], ...]
#: The start of a qualified name inside a demangled symbol (``Eigen::`` in ``void Eigen::...``).
QUALIFIED = r"(?:^|[\s*&(,])"
#: The tables, in the order the file lists them (tracer.processing.tags says how each is used).
TABLES = ("symbol", "jit", "soname", "system_symbols", "op", "implementation", "module", "python_name", "isa")
GROUPS = ("vendor", "gpu", "system", "cpu")
#: Lists of regular expressions, and lists of names.
PATTERN_LISTS = ("incidental", "not_kernels", "typed_blas", "vendor_op_prefixes", "computes")
NAME_LISTS = ("other_backends",)
_ROW_KEYS = ("tag", "match", "namespaces", "ignore_case")
_NAMESPACE = re.compile(r"\w+(?:::\w+)*", re.ASCII)


class LibrariesError(RegistryError):
    """libraries.yaml is malformed; the message names the file and the key."""


@dataclass(frozen=True, eq=False)
class Libraries:
    """The compiled tables (one field per table, group and list of the file)."""

    symbol: Table
    jit: Table
    soname: Table
    system_symbols: Table
    op: Table
    implementation: Table
    module: Table
    python_name: Table
    isa: Table
    vendor: frozenset[str]
    gpu: frozenset[str]
    system: frozenset[str]
    cpu: frozenset[str]
    #: a whole native name (template arguments dropped) that is incidental
    incidental: re.Pattern[str]
    #: searched in a native name: a frame that never computes
    not_kernels: re.Pattern[str]
    #: a typed BLAS/LAPACK routine, group 1 its precision letter
    typed_blas: re.Pattern[str]
    #: an op-name prefix that says a vendor library computes the op
    vendor_op_prefix: re.Pattern[str]
    other_backends: tuple[str, ...]
    #: searched in a native name (with and without template arguments): a frame that computes
    computes: re.Pattern[str] = re.compile(r"(?!)")
    #: a library call's kind (its first word, lower case) -> words one of which the op that made it holds
    call_ops: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = ()


def libraries_path() -> Traversable:
    """The package's own libraries.yaml (read through importlib.resources, as a wheel holds it)."""
    return resources.files("tracer") / "libraries.yaml"


def load(path: str | os.PathLike[str] | Traversable | None = None) -> Libraries:
    """The tables of ``path`` (default: the package's file), validated."""
    path = libraries_path() if path is None else Path(path) if isinstance(path, (str, os.PathLike)) else path
    return _parse(path.name, read_text(path))


@lru_cache(maxsize=1)
def default() -> Libraries:
    """The package's tables, read once (the file ships with the code and has no override)."""
    return load()


class _File:
    """The file's top-level mapping, read key by key; every problem names the file and key."""

    def __init__(self, name: str, doc: Any):
        self.name = name
        if not isinstance(doc, dict):
            raise LibrariesError(f"{name}: top level must be a mapping")
        unknown = [k for k in doc if k not in ("tables", "groups", "call_ops", *PATTERN_LISTS, *NAME_LISTS)]
        if unknown:
            raise self.error(str(unknown[0]), "is not a known key (choose from: tables, groups, call_ops, "
                                              f"{', '.join((*PATTERN_LISTS, *NAME_LISTS))})")
        self.doc = doc

    def error(self, key: str, problem: str) -> LibrariesError:
        return LibrariesError(f"{self.name}: field '{key}' {problem}")

    def mapping(self, data: Any, key: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.error(key, f"must be a mapping, not {type(data).__name__}")
        unknown = [k for k in data if k not in keys]
        if unknown:
            raise self.error(f"{key}.{unknown[0]}", f"is not a known key (choose from: {', '.join(keys)})")
        missing = [k for k in keys if k not in data]
        if missing and key in ("tables", "groups"):
            raise self.error(f"{key}.{missing[0]}", "is missing")
        return data

    def strings(self, data: Any, key: str) -> list[str]:
        if not isinstance(data, list) or not data or not all(isinstance(v, str) and v for v in data):
            raise self.error(key, "must be a non-empty list of strings")
        return data

    def compiled(self, pattern: str, key: str, flags: int = 0) -> re.Pattern[str]:
        try:
            return re.compile(pattern, flags)
        except re.error as exc:
            raise self.error(key, f"is not a valid regular expression ({exc})") from None

    def row(self, data: Any, key: str) -> tuple[re.Pattern[str], str]:
        row = self.mapping(data, key, _ROW_KEYS)
        tag = row.get("tag")
        if not isinstance(tag, str) or not tag.strip():
            raise self.error(f"{key}.tag", "must be a non-empty string")
        if "match" not in row and "namespaces" not in row:
            raise self.error(key, "needs 'match' or 'namespaces'")
        parts = []
        if "namespaces" in row:
            names = self.strings(row["namespaces"], f"{key}.namespaces")
            bad = [n for n in names if not _NAMESPACE.fullmatch(n)]
            if bad:
                raise self.error(f"{key}.namespaces", f"has {bad[0][:60]!r}, not a C++ namespace")
            parts.append(QUALIFIED + (f"(?:{'|'.join(names)})" if len(names) > 1 else names[0]) + "::")
        if "match" in row:
            matches = self.strings(row["match"], f"{key}.match")
            for i, p in enumerate(matches):
                self.compiled(p, f"{key}.match[{i}]")
            parts += matches
        ignore = row.get("ignore_case", False)
        if not isinstance(ignore, bool):
            raise self.error(f"{key}.ignore_case", "must be true or false")
        return self.compiled("|".join(parts), f"{key}.match", re.IGNORECASE if ignore else 0), tag

    def table(self, name: str) -> Table:
        rows = self.doc["tables"][name]
        if not isinstance(rows, list) or not rows:
            raise self.error(f"tables.{name}", "must be a non-empty list of rows")
        return tuple(self.row(r, f"tables.{name}[{i}]") for i, r in enumerate(rows))

    def call_ops(self) -> tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]:
        rows = self.doc.get("call_ops")
        if not isinstance(rows, dict) or not rows:
            raise self.error("call_ops", "must map a library call's kind (a regular expression) to op words")
        return tuple((self.compiled(str(kind), f"call_ops.{kind}"),
                      tuple(w.lower() for w in self.strings(words, f"call_ops.{kind}")))
                     for kind, words in rows.items())

    def either(self, key: str, template: str = "{}") -> re.Pattern[str]:
        """A list of alternatives as one expression, each checked alone first."""
        alternatives = self.strings(self.doc.get(key), key)
        for i, p in enumerate(alternatives):
            self.compiled(p, f"{key}[{i}]")
        return self.compiled(template.format("|".join(alternatives)), key)


@lru_cache(maxsize=8)
def _parse(file_name: str, text: str) -> Libraries:
    f = _File(file_name, safe_yaml(file_name, text))
    f.mapping(f.doc.get("tables"), "tables", TABLES)
    groups = f.mapping(f.doc.get("groups"), "groups", GROUPS)
    t = {name: f.table(name) for name in TABLES}
    g = {name: frozenset(f.strings(groups[name], f"groups.{name}")) for name in GROUPS}
    return Libraries(
        t["symbol"], t["jit"], t["soname"], t["system_symbols"], t["op"], t["implementation"], t["module"],
        t["python_name"], t["isa"], g["vendor"], g["gpu"], g["system"], g["cpu"],
        incidental=f.either("incidental", "^(?:{})$"),
        not_kernels=f.either("not_kernels"),
        typed_blas=f.either("typed_blas", "^([sdcz])(?:{})(?:_|$)"),
        vendor_op_prefix=f.either("vendor_op_prefixes", "^(?:{})"),
        other_backends=tuple(f.strings(f.doc.get("other_backends"), "other_backends")),
        computes=f.either("computes"),
        call_ops=f.call_ops(),
    )
