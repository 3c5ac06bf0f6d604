"""``survey.json`` beside the index (its ``report`` key): every headline figure with its definition, unit
and the list behind it, the decision sites, the must-implement entries, the ARM
verdicts, the kernel each CPU/GPU cell names, and the ordering with its rule, so
that a team can diff two surveys or gate CI on one. Plain JSON, versioned."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tracer import __version__
from tracer.files import REPORT_KEY, SURVEY_JSON, read_json_object, write_text
from tracer.analysis.decisions import Decisions
from tracer.analysis.models import ModelReport
from tracer.analysis.portability import FrameworkReport
from tracer.analysis.scorecard import COLUMNS, EXPLAIN, HEADLINE, ScoreRow
from tracer.analysis.survey_model import SurveyModel
from tracer.analysis.verdict import RULE, FrameworkVerdict
from tracer.render import compiled_export, coverage_export

#: Bumped when a field changes meaning or is removed (adding one is compatible).
SCHEMA_VERSION = 1


def _framework(rep: FrameworkReport, found: Decisions, card: ScoreRow,
               verdict: FrameworkVerdict | None) -> dict[str, Any]:
    figures = {key: {"header": COLUMNS[key], "definition": EXPLAIN[key], "headline": key in HEADLINE,
                     "value": f.value, "unit": f.unit, "explain": f.explain, "thin": f.thin, "incomplete": f.incomplete,
                     "evidence": f.evidence,
                     "items": f.items or f.details, **({"beside": dataclasses.asdict(f.beside)} if f.beside else {})}
               for key, f in card.figures.items()}
    cells = [{"primitive": c.primitive, "pass": c.pass_,
              "cpu": {"op": c.cpu.op, "kernel": c.cpu.kernel, "library": c.cpu.library, "evidence": c.cpu.evidence,
                      **({"why_none": c.cpu.why_none} if not c.cpu.kernel else {})} if c.cpu else None,
              "gpu": ({"evidence": e.evidence, "op": e.op, "kernel": e.kernel, "library": e.library}
                      if (e := c.strongest) else None)} for c in rep.gpu_cells]
    return {
        "versions": rep.versions,
        "figures": figures,
        "decision_sites": [dataclasses.asdict(s) for s in found.sites],
        "splits_apart": found.apart,
        "decision_splits": found.decision_splits,
        "arm_verdicts": [dataclasses.asdict(a) for a in verdict.arm] if verdict else [],
        "arm_models": verdict.arm_models if verdict else [],
        "kernels": cells,
        "rank": verdict.rank if verdict else None,
    }


def _models(models: list[ModelReport]) -> dict[str, Any]:
    """Per model and framework: what a backend must implement (count, unit, evidence, the
    list), the entries beyond the framework's primitives, and each level's step figures."""
    return {m.model: {"title": m.title, "frameworks": {r.framework: {
        "version": r.version,
        "implement": {"value": r.implement.value, "unit": r.implement.unit, "evidence": r.implement.evidence,
                      "thin": r.implement.thin, "incomplete": r.implement.incomplete, "items": r.implement.items,
                      **({"beside": dataclasses.asdict(r.implement.beside)} if r.implement.beside else {})},
        "beyond_primitives": r.beyond, "decision_sites": r.decisions.items, "libraries": r.libraries,
        "levels": [dataclasses.asdict(lv) for lv in r.levels], "gaps": r.gaps,
        "gpu": [dataclasses.asdict(g) for g in r.gpu],
        **({"coverage": coverage_export.to_json(r.coverage)} if r.coverage is not None else {}),
        **({"compiled": compiled_export.to_json(r.compiled)} if r.compiled is not None else {})}
        for r in m.rows}, **({"workload": m.workload} if m.workload is not None else {})} for m in models}


def survey_json(model: SurveyModel) -> dict[str, Any]:
    by_card = {c.framework: c for c in model.cards}
    by_verdict = {v.framework: v for v in model.verdicts}
    return {
        "schema_version": SCHEMA_VERSION,
        "dltrace": __version__,
        "order": {"rule": RULE, "frameworks": [v.framework for v in model.verdicts]},
        "frameworks": {r.name: _framework(r, model.decided[r.name], by_card[r.name], by_verdict.get(r.name))
                       for r in model.reports if r.name in by_card},
        "grid": [dataclasses.asdict(c) for c in model.grid],
        "models": _models(model.models),
    }


def write(model: SurveyModel, out: Path) -> Path:
    """``out/survey.json`` with the model's figures under its ``report`` key; what else it
    holds (the survey's own record, tracer.survey) is kept. A model without figures (no
    framework's primitives traced) writes none."""
    path = out / SURVEY_JSON
    if not model.cards:
        return path
    doc = survey_json(model)
    whole = read_json_object(path)
    whole[REPORT_KEY] = doc
    write_text(path, json.dumps(whole, indent=1, ensure_ascii=False) + "\n")
    return path
