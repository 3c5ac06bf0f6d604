"""The one way a probe process makes a case: a primitive through the probe's
``make_case``, a model's training step through its ``make_model_case``
(tracer.contract.ModelProbe). Imported inside framework environments."""

from __future__ import annotations

from typing import Any

from tracer.contract import MODELS, ModelProbe, Probe


class NoModels(Exception):
    """The probe has no models: it lacks tracer.contract.ModelProbe."""


def make_case(probe: Probe, workload: str, api: str, device: str, shape: tuple[int, ...]) -> Any:
    """A tracer.probes.base.Case for ``workload``, a primitive or a model."""
    if workload not in MODELS:
        return probe.make_case(workload, api, device, shape)
    if not isinstance(probe, ModelProbe):
        raise NoModels(f"this framework's probe runs no models (it lacks make_model_case), so no {workload}")
    return probe.make_model_case(workload, api, device, shape)
