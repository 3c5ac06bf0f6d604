"""A workload's per-op coverage table (tracer.analysis.workload_coverage) as files a
porting team pastes into its tracker: CSV (one row per op) and JSON (the same rows,
with what the table is of). Renders only: the rows are computed upstream."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

from tracer.files import write_text
from tracer.analysis.workload_coverage import WorkloadCoverage

#: The CSV's columns, in order; ``also_in`` lists the built-in cases, ``;``-separated;
#: ``incomplete``, on every row, why the list is not whole ("" when it is: then it is the
#: must-implement list). Then one column per machine where the workload ran on an ARM CPU
#: ("on x86_64 (this machine)", "on a64fx (emulated)"): what computed the op there.
COLUMNS = ("op", "name", "overload", "passes", "calls", "also_in", "beyond_built_in", "incomplete")
#: Bumped when a column or field changes meaning (2: ``incomplete``, and each layer cost as its factor
#: and the quartiles of its paired steps: {"factor", "low", "high"}; 3: a column per machine, ``arm``
#: and ``machines``, and ``placed_on_host``: the ops a graph put on the host, by pass).
COVERAGE_VERSION = 3
#: An ARM cell whose entry the CPU path ran under no name of its own (a view, an op the
#: CPU composes of others, a device set-up op)
NO_CPU_OP = "no CPU op of this name"
#: A cell a spreadsheet would run as a formula (=, +, -, @) is written with a leading quote.
_FORMULA = ("=", "+", "-", "@")
#: Control characters (a bare CR starts a row in some readers, a tab a cell): shown as U+FFFD.
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def inert(value: str) -> str:
    """A text cell as a spreadsheet may open it: no control character (the names come
    from traces written elsewhere), and no formula at its start."""
    value = _CONTROL.sub("\ufffd", value)
    return "'" + value if value.startswith(_FORMULA) else value


def to_csv(cov: WorkloadCoverage) -> str:
    """RFC 4180 (CRLF rows, every text cell quoted), each text cell made inert by
    :func:`inert`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n", quoting=csv.QUOTE_NONNUMERIC)
    w.writerow([*COLUMNS, *(inert(f"on {m}") for m in cov.machines)])
    for r in cov.rows:
        w.writerow([inert(r.op), inert(r.name), inert(r.overload), inert(";".join(r.passes)), r.calls,
                    inert(";".join(r.also_in)), "yes" if r.beyond else "no", inert(cov.incomplete),
                    *(inert(r.arm.get(m, NO_CPU_OP)) for m in cov.machines)])
    return buf.getvalue()


def to_json(cov: WorkloadCoverage) -> dict[str, Any]:
    return {"coverage_version": COVERAGE_VERSION, "framework": cov.framework, "workload": cov.workload,
            "device": cov.device, "incomplete": cov.incomplete, "machines": cov.machines, "placed_on_host": cov.host,
            "rows": [{**dataclasses.asdict(r), "beyond_built_in": r.beyond} for r in cov.rows],
            "layer_costs": [dataclasses.asdict(c) for c in cov.costs]}


#: A name used as it is in a file name; any other is cut to its safe characters and hashed.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]{0,59}")


def _part(text: str) -> str:
    """``text`` where it is a short name of letters, digits, ``_`` and ``.`` that starts with
    neither ``.`` nor ``-`` (``torch_mlp``); else its safe characters and a hash of the whole:
    the names come from traces, and ``../x``, ``/etc/x`` or a 100 kB name is no file name."""
    if _SAFE_NAME.fullmatch(text):
        return text
    kept = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")[:40]
    return f"{kept or 'workload'}_{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def file_stem(cov: WorkloadCoverage) -> str:
    """NAME-FRAMEWORK (:func:`stem_of`)."""
    return stem_of(cov.workload, cov.framework)


def stem_of(name: str, framework: str) -> str:
    """NAME-FRAMEWORK: ``-`` joins two parts that hold none, so no two pairs of names join
    into one file name (``a-b`` with ``c``, ``a`` with ``b-c``)."""
    return f"{_part(name)}-{_part(framework)}"


def free_stem(first: str, kind: str, taken: set[str] | None) -> str:
    """``first``, or with a number where this report already wrote a ``kind`` table of
    that stem (``taken``), so that one table never replaces another."""
    stem, n = first, 1
    while taken is not None and f"{stem}.{kind}" in taken:
        n += 1
        stem = f"{first}-{n}"
    if taken is not None:
        taken.add(f"{stem}.{kind}")
    return stem


def write(cov: WorkloadCoverage, folder: Path, taken: set[str] | None = None) -> tuple[Path, Path]:
    """``folder``/NAME-FRAMEWORK.coverage.csv and .json (:func:`free_stem`)."""
    stem = free_stem(file_stem(cov), "coverage", taken)
    csv_path, json_path = folder / f"{stem}.coverage.csv", folder / f"{stem}.coverage.json"
    write_text(csv_path, to_csv(cov))
    write_text(json_path, json.dumps(to_json(cov), indent=1) + "\n")
    return csv_path, json_path
