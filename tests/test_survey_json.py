"""survey.json's ``report`` key (tracer.render.survey_json) on synthetic traces: the
figures a team diffs between surveys or gates CI on are written under the report key
beside what the survey itself recorded there, and a model with no figures writes none.
Fast tier: no framework."""

from __future__ import annotations

import json

from tests.conftest import write_pair
from tracer.analysis.portability import survey_reports
from tracer.analysis.scorecard import COLUMNS, scorecard
from tracer.analysis.survey_model import assemble
from tracer.files import REPORT_KEY, SURVEY_JSON
from tracer.knowledge import knowledge
from tracer.render import survey_json
from tracer.trace import load

K = knowledge()


def _model(tmp_path, with_cards: bool = True):
    traces = [load(p) for p in write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")]
    reports = survey_reports(traces, [], k=K)
    return assemble(reports, scorecard(reports, traces, None, K) if with_cards else [], [], K)


def test_the_report_key_holds_each_framework_figures_and_keeps_the_survey_record(tmp_path):
    model = _model(tmp_path)
    doc = survey_json.survey_json(model)
    assert doc["schema_version"] == survey_json.SCHEMA_VERSION
    assert list(doc["frameworks"]) == ["samplefw"]
    figures = doc["frameworks"]["samplefw"]["figures"]
    assert figures and set(figures) <= set(COLUMNS)
    assert all(f["header"] == COLUMNS[key] for key, f in figures.items())
    out = tmp_path / "r"
    out.mkdir()
    (out / SURVEY_JSON).write_text(json.dumps({"survey": {"jobs": 3}}))  # what the survey recorded
    path = survey_json.write(model, out)
    whole = json.loads(path.read_text())
    assert whole["survey"] == {"jobs": 3}
    assert whole[REPORT_KEY] == json.loads(json.dumps(doc))


def test_a_model_without_figures_writes_no_survey_json(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    path = survey_json.write(_model(tmp_path, with_cards=False), out)
    assert path == out / SURVEY_JSON and not path.exists()
