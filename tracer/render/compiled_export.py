"""The compiled door's list as files a porting team pastes into its tracker: CSV (one row
per op and input variation: dtypes, shapes, how many graph nodes) and JSON (the same
rows, the graph breaks and each op only one door needs, with why). Renders only: the
rows are computed upstream (tracer.analysis.compiled_needs)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from tracer.analysis.compiled_needs import CompiledNeeds
from tracer.files import write_text
from tracer.render.coverage_export import free_stem, inert, stem_of

#: The CSV's columns, in order (dtypes and shapes of the tensor inputs, ``;``-separated).
COLUMNS = ("op", "graphs", "inputs", "dtypes", "shapes", "count")
#: Bumped when a column or field changes meaning.
COMPILED_VERSION = 1


def rows(needs: CompiledNeeds) -> list[dict[str, Any]]:
    """One row per op and input variation."""
    return [{"op": v.op, "graphs": needs.kinds_of(v.op), "inputs": v.inputs, "dtypes": v.dtypes,
             "shapes": v.shapes, "count": v.count} for v in needs.variations]


def to_csv(needs: CompiledNeeds) -> str:
    """RFC 4180 (CRLF rows, text cells made inert as the coverage export's)."""
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\r\n")
    w.writerow(COLUMNS)
    for r in rows(needs):
        w.writerow([inert(r["op"]), inert(";".join(r["graphs"])), inert(r["inputs"]), inert(";".join(r["dtypes"])),
                    inert(";".join("x".join(map(str, s)) for s in r["shapes"])), r["count"]])
    return buf.getvalue()


def to_json(needs: CompiledNeeds) -> dict[str, Any]:
    return {"compiled_version": COMPILED_VERSION, "framework": needs.framework, "door": "compiled",
            "decompositions": needs.table, "unit": needs.unit, "ops": needs.ops, "variations": rows(needs),
            "graphs": [{"kind": g["kind"], "pass": g["pass"], "nodes": g["nodes"]} for g in needs.graphs],
            "graph_breaks": needs.breaks, "seconds": round(needs.seconds, 3),
            "eager": needs.eager, "differences": [{"op": d.op, "door": d.door, "why": d.why}
                                                   for d in needs.differences],
            **({"error": needs.problem()} if needs.problem() else {})}


def dumps(needs: CompiledNeeds) -> str:
    return json.dumps(to_json(needs), indent=1) + "\n"


def write(needs: CompiledNeeds, name: str, folder: Path, taken: set[str] | None = None) -> tuple[Path, Path]:
    """``folder``/NAME-FRAMEWORK.compiled.csv and .json, named as the coverage tables are."""
    stem = free_stem(stem_of(name, needs.framework), "compiled", taken)
    csv_path, json_path = folder / f"{stem}.compiled.csv", folder / f"{stem}.compiled.json"
    write_text(csv_path, to_csv(needs))
    write_text(json_path, dumps(needs))
    return csv_path, json_path
