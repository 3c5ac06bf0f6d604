"""A workload's per-op coverage table (tracer.analysis.workload_coverage) as files a
porting team pastes into its tracker: CSV (one row per op) and JSON (the same rows,
with what the table is of). Renders only: the rows are computed upstream."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

from tracer.files import write_text
from tracer.analysis.workload_coverage import WorkloadCoverage

#: The CSV's columns, in order; ``also_in`` lists the built-in cases, ``;``-separated.
COLUMNS = ("op", "name", "overload", "passes", "calls", "also_in", "beyond_built_in")
#: Bumped when a column or field changes meaning.
COVERAGE_VERSION = 1
#: A cell a spreadsheet would run as a formula (=, +, -, @) is written with a leading quote.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA) else value


def to_csv(cov: WorkloadCoverage) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in cov.rows:
        w.writerow([_cell(r.op), _cell(r.name), _cell(r.overload), ";".join(r.passes), r.calls,
                    _cell(";".join(r.also_in)), "yes" if r.beyond else "no"])
    return buf.getvalue()


def to_json(cov: WorkloadCoverage) -> dict[str, Any]:
    return {"coverage_version": COVERAGE_VERSION, "framework": cov.framework, "workload": cov.workload,
            "device": cov.device, "rows": [{**dataclasses.asdict(r), "beyond_built_in": r.beyond} for r in cov.rows],
            "layer_costs": [dataclasses.asdict(c) for c in cov.costs]}


def file_stem(cov: WorkloadCoverage) -> str:
    return f"{cov.workload}-{cov.framework}.coverage"


def write(cov: WorkloadCoverage, folder: Path) -> tuple[Path, Path]:
    """``folder``/NAME-FRAMEWORK.coverage.csv and .json."""
    stem = file_stem(cov)
    csv_path, json_path = folder / f"{stem}.csv", folder / f"{stem}.json"
    write_text(csv_path, to_csv(cov))
    write_text(json_path, json.dumps(to_json(cov), indent=1) + "\n")
    return csv_path, json_path
