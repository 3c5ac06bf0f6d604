"""The report's renderers behind one small protocol: each takes the survey model
(tracer.analysis.survey_model) and a folder, writes its files there from the model
alone, and returns the file a reader opens first. A new output (a PDF, a CI summary)
is one more renderer here, reading the same model."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tracer.analysis.survey_model import SurveyModel
from tracer.render import html, survey_json


class Renderer(Protocol):
    def __call__(self, model: SurveyModel, out: Path) -> Path: ...


#: A survey's report: the pages, then survey.json beside them (in this order: the index
#: is what `render` returns).
RENDERERS: tuple[Renderer, ...] = (html.write_report, survey_json.write)


def render(model: SurveyModel, out: Path, renderers: tuple[Renderer, ...] = RENDERERS) -> Path:
    """Every renderer's files into ``out``; returns the first one's (the index page)."""
    first = [r(model, out) for r in renderers]
    return first[0]
