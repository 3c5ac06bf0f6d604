"""The check of a JAX backend skeleton (``dltrace scaffold jax``): does a backend whose
op table holds exactly the must-implement StableHLO ops run the network's (or the
primitives') programs as JAX does, and is each of those ops needed?

A JAX backend is a PJRT plugin whose compiler is handed the step's StableHLO; the
skeleton stands for it with its own consumer (``consumer.py``, tracer.probes.jax_standin
as it is) and its op table (``ops.py``: ``KERNELS``, op -> kernel, each delegating to
the op alone compiled by XLA:CPU until the team replaces it). Run inside JAX's
environment by the skeleton's check.py (``dltrace scaffold jax --check`` starts it
there). The steps are dltrace's own probes' (tracer.probes.jax: the programs each pass
of a model's training step, a primitive's forward and backward or a user's workload
runs), built on the CPU: each step's programs run on the skeleton from the step's
state and must give JAX's own outputs (the loss, the residuals, the gradients, the
parameters after the update); the step is then taken by JAX, so the second step
starts from the state after the first.

Exit status (tracer.contract.Exit): OK when every case matches JAX in two steps, no
op outside the table was reached, and each op in it is needed; ERROR otherwise, with
the reason on one line of stderr.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import jax

from tracer.probes.cases import make_user_case
from tracer.contract import MODELS, UserWorkload, workload_passes
from tracer.probes import base
from tracer.probes import jax as jax_probe
from tracer.probes.skeleton_check import STEPS, CheckFailed, Spec, first_line, read_manifest, verdict

def _case(spec: Spec) -> base.Case:
    """The case on the CPU, built as the probe builds it (seeded)."""
    if spec.user is not None:
        w = UserWorkload.from_json(spec.user)
        assert w is not None
        case: base.Case = make_user_case(jax_probe, w, "cpu")
        case.private["values"] = True  # its programs are read with their arguments' values, to run them
        return case
    if spec.workload in MODELS:
        return jax_probe.make_model_case(spec.workload, spec.api, "cpu", spec.shape)
    return jax_probe.make_case(spec.workload, spec.api, "cpu", spec.shape)


def _passes(spec: Spec, case: base.Case) -> tuple[str, ...]:
    if spec.user is not None:
        return ("forward",) if case.private.get("single_step") else ("forward", "backward")
    return tuple(workload_passes(spec.workload))


def _programs(case: base.Case, pass_: str) -> list[tuple[Callable[..., Any], Any]]:
    """The programs the pass runs from the case's state (a user's: read from a run of
    the pass, which takes the step)."""
    if not case.private.get("workload"):
        return jax_probe._pass_programs(case, pass_)
    case.private.pop(f"programs:{pass_}", None)
    if pass_ == "forward":
        return jax_probe._pass_programs(case, pass_, case.forward)
    state = case.forward()
    return jax_probe._pass_programs(case, pass_, lambda: case.backward(state))


def run_steps(spec: Spec, consumer: ModuleType, kernels: Mapping[str, Any], steps: int = STEPS,
              compare: bool = True) -> int:
    """``steps`` steps of the case, each program run by the skeleton's consumer with
    ``kernels``; raises the consumer's refusal, or CheckFailed where an output is not
    JAX's. How many programs ran."""
    case = _case(spec)
    ctx = consumer.context()
    ran = 0
    for n in range(1, steps + 1):
        for pass_ in _passes(spec, case):
            for i, (fn, args) in enumerate(_programs(case, pass_), 1):
                got = consumer.run_program(fn, args, consumer.Consumer(kernels), ctx)
                ran += 1
                if compare:
                    wrong = consumer.differs(got, jax.tree_util.tree_leaves(jax_probe._reference(fn, args)))
                    if wrong:
                        raise CheckFailed(f"{spec.label}: step {n}, {pass_} program {i} "
                                          f"({getattr(fn, '__name__', 'program')}): {wrong}")
        if not case.private.get("workload"):  # JAX takes the step: the next starts from its state
            state = case.forward()
            if "backward" in _passes(spec, case):
                case.backward(state)
    return ran


def check_case(spec: Spec, consumer: ModuleType, kernels: Mapping[str, Any]) -> str:
    try:
        programs = run_steps(spec, consumer, kernels)
    except CheckFailed:
        raise
    except consumer.OpRefused as exc:
        raise CheckFailed(f"{spec.label}: reached {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure of the step is the check's answer
        raise CheckFailed(f"{spec.label}: {first_line(exc)}") from None
    return (f"{spec.label}: {STEPS} steps match JAX: each of the {programs // STEPS} program(s) a step runs gives "
            "JAX's outputs (loss or output, gradients, parameters after the update)")


def check_minimal(specs: list[Spec], consumer: ModuleType, kernels: Mapping[str, Any]) -> str:
    """Raise CheckFailed unless removing each op's kernel alone makes a step fail naming it."""
    for op in list(kernels):
        fewer = {k: v for k, v in kernels.items() if k != op}
        failure = None
        for spec in specs:
            try:
                run_steps(spec, consumer, fewer, steps=1, compare=False)
            except consumer.OpRefused as exc:
                failure = exc
                break
            except Exception as exc:  # noqa: BLE001
                raise CheckFailed(f"without {op} the step fails on something else: {first_line(exc)}") from None
        if failure is None:
            raise CheckFailed(f"{op} is not needed: every step runs without its kernel")
        if failure.op != op:
            raise CheckFailed(f"without {op} the step fails on something else: {failure}")
    return f"{len(kernels)} ops, each needed (without its kernel a step is refused naming it)"


def main(folder: Path) -> int:
    """Check the skeleton in ``folder``; print the summary, or the reason on stderr."""
    manifest, specs = read_manifest(folder)
    sys.path.insert(0, str(folder))

    def check() -> list[str]:
        skeleton = importlib.import_module(manifest["package"])
        consumer = importlib.import_module(f"{manifest['package']}.consumer")
        kernels = dict(skeleton.KERNELS)
        return [f"{manifest['package']}: {len(kernels)} StableHLO ops in the op table ({manifest['package']}/ops.py), "
                "every other op refused",
                *(check_case(s, consumer, kernels) for s in specs), check_minimal(specs, consumer, kernels)]

    return verdict(check)
