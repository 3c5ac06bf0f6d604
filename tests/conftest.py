"""Shared, session-scoped traces of the real frameworks.

One real survey (every framework, primitive, API level and CPU variant) runs once
per test session, through the same engine as `dltrace survey`; every test reads
its traces, and the report tests render and open its report. Tracing is the slow
part, so no test re-runs a probe that the survey already ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracer import registry
from tracer import survey as sv
from tracer.runner import CaseResult

DLTRACE = str(Path(sys.executable).parent / "dltrace")


def dltrace(*args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the real `dltrace` command."""
    return subprocess.run([DLTRACE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def frameworks() -> dict[str, registry.Framework]:
    return registry.load()


@pytest.fixture(scope="session")
def survey_root(frameworks, tmp_path_factory) -> Path:
    """A CPU survey of all five frameworks with their variants (traces only)."""
    root = tmp_path_factory.mktemp("survey")
    gaps = sv.run(sv.plan(frameworks.values()), root, workers=2, timeout=900)
    assert not gaps, [f"{g.framework} {g.variant} {g.primitive} {g.api}: {g.error}" for g in gaps]
    return root


@pytest.fixture(scope="session")
def cpu_traces(frameworks, survey_root) -> dict[tuple[str, str, str, str], CaseResult]:
    """(framework, variant, primitive, api) -> the survey's trace of it."""
    out = {}
    for job in sv.plan(frameworks.values()):
        for spec in job.cases:
            path = sv.case_path(survey_root, job, spec)
            out[(job.framework.name, job.variant, spec.primitive, spec.api)] = CaseResult(
                spec, path if path.exists() else None, None if path.exists() else "no trace")
    return out


@pytest.fixture(scope="session")
def survey_report(survey_root) -> Path:
    """`dltrace survey` over the finished survey: every case is reused, then the report is rendered."""
    proc = dltrace("survey", "-o", str(survey_root))
    assert proc.returncode == 0, proc.stderr
    assert "torch/cpu-default: 18 cases, 18 reused" in proc.stderr
    return survey_root / "index.html"
