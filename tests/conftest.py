"""Shared, session-scoped traces of the real frameworks.

Each framework is probed once per variant for the whole test session (one
subprocess traces many cases), and every test reads those traces: tracing is
the slow part, so no test re-runs a probe that another already ran.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tracer import registry
from tracer.registry import PRIMITIVES
from tracer.runner import CaseResult, CaseSpec, run_probe


@pytest.fixture(scope="session")
def frameworks() -> dict[str, registry.Framework]:
    return registry.load()


@pytest.fixture(scope="session")
def cpu_traces(frameworks, tmp_path_factory) -> dict[tuple[str, str, str, str], CaseResult]:
    """(framework, variant, primitive, api) -> result, on CPU.

    Default variant: every primitive at every API level the framework has.
    Each other variant: conv2d at each API level.
    """
    root = tmp_path_factory.mktemp("traces")
    jobs = []
    for fw in frameworks.values():
        jobs.append((fw, "default", [CaseSpec(p, api) for p in PRIMITIVES for api in fw.apis]))
        for variant in fw.variants:
            jobs.append((fw, variant, [CaseSpec("conv2d", api) for api in fw.apis]))

    def run(job):
        fw, variant, cases = job
        return fw.name, variant, run_probe(fw, cases, Path(root, fw.name, variant), "cpu", variant, timeout=900)

    results = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, variant, res in pool.map(run, jobs):
            for r in res:
                results[(name, variant, r.spec.primitive, r.spec.api)] = r
    return results
