"""The one way a probe process makes a case: a primitive through the probe's
``make_case``, a model's training step through its ``make_model_case``
(tracer.contract.ModelProbe), a user's own workload through its ``workload_case``
(tracer.contract.WorkloadProbe, with tracer.probes.user_workload). Imported inside
framework environments."""

from __future__ import annotations

from typing import Any

from tracer.probes import user_workload
from tracer.contract import MODELS, ModelProbe, Probe, UserWorkload, WorkloadProbe
from tracer.probes import base


class NoModels(Exception):
    """The probe has no models: it lacks tracer.contract.ModelProbe."""


def make_case(probe: Probe, workload: str, api: str, device: str, shape: tuple[int, ...],
              user: UserWorkload | None = None) -> Any:
    """A tracer.probes.base.Case for ``workload``, a primitive, a model, or the user's own (``user``)."""
    if user is not None:
        return make_user_case(probe, user, device)
    if workload not in MODELS:
        return probe.make_case(workload, api, device, shape)
    if not isinstance(probe, ModelProbe):
        raise NoModels(f"this framework's probe runs no models (it lacks make_model_case), so no {workload}")
    return probe.make_model_case(workload, api, device, shape)


def case_passes(case: Any, asked: tuple[str, ...]) -> tuple[str, ...]:
    """The passes a made case runs of those ``asked``: a user's single step callable
    has one, the whole step (its forward)."""
    return ("forward",) if case.private.get("single_step") else asked


def make_user_case(probe: Probe, w: UserWorkload, device: str) -> Any:
    """The user's workload as a case on ``device``: its function called with the
    framework's device object, its passes guarded so that a failure names the user's line."""
    if not isinstance(probe, WorkloadProbe):
        raise NoModels("this framework's probe runs no user workloads (it lacks workload_case)")
    # what the probe does so that the framework's own add-ons import here (torch's CPU build: torchvision)
    prepared = str(getattr(probe, "before_workload", lambda: "")())
    user_workload.bound_output()  # a print in a loop must not fill the disk
    fn = user_workload.load(w)

    def build(dev: Any) -> Any:
        forward, backward, params = user_workload.steps(w, fn, dev)

        def no_backward(state: Any) -> None:
            raise base.ProbeError("a single step callable has no backward pass: its forward is the whole step")

        return base.Case(forward=forward, backward=backward or no_backward,
                         info=user_workload.info(w, backward is None, {"prepared": prepared} if prepared else {}),
                         private={"parameters": params, "single_step": backward is None})

    return probe.workload_case(build, device)
