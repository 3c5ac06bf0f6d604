"""The check of a torch backend skeleton (``dltrace scaffold torch``): does a backend that
registers exactly the must-implement ops train the network (or run the primitives)
as the CPU does, and is each of those ops needed?

Run inside torch's environment by the skeleton's own check.py (``dltrace scaffold
--check`` starts it there). The skeleton's package provides ``install()`` (its
device), ``KERNELS`` (op -> kernel), ``register(op)`` and ``unregister(op)`` (one
torch.library.Library per op, so that one can be removed alone) and ``REFUSED``
(the ops its fallback refused). The steps are dltrace's own probes' (the models'
training steps, the primitives' forward and backward), built on the CPU and on the
skeleton's device from the same initial values: one way to build each.

Exit status (tracer.contract.Exit): OK when every case matches the CPU in two
steps, no op outside the list was reached, and each registered op is needed;
ERROR otherwise, with the reason on one line of stderr.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from tracer.probes.cases import make_user_case
from tracer.contract import MODELS, UserWorkload, workload_passes
from tracer.probes import torch_models
from tracer.probes.skeleton_check import STEPS, CheckFailed, Spec, first_line, read_manifest, verdict
from tracer.probes import torch as torch_probe

@dataclass
class Step:
    """One step's results, on the host."""

    out: torch.Tensor | None  # the loss (a model) or the output (a primitive); None: the step returned none
    grads: list[torch.Tensor | None]  # each parameter's (input's) gradient
    after: list[torch.Tensor]  # a model's parameters after the update


@dataclass
class Run:
    steps: list[Step]
    names: list[str]
    adaptive_lr: float | None  # an optimizer's that divides by the gradient's size (Adam), else None


def _host(t: torch.Tensor) -> torch.Tensor:
    """A copy on the host: a CPU tensor's own storage would change with the next step."""
    with torch.no_grad():
        return t.detach().to("cpu", copy=True)


def _user_case(spec: Spec, dev: torch.device) -> tuple[Any, list[torch.Tensor], list[str], bool]:
    """A user's workload on ``dev``, built as the probe builds it (torch's generator
    seeded first): (case, its parameters, their names, whether it is one step callable)."""
    w = UserWorkload.from_json(spec.user)
    assert w is not None
    case = make_user_case(torch_probe, w, str(dev))  # the probe's own way: seeded, torchvision on the CPU build
    tensors = [p for p in case.private["parameters"] or [] if isinstance(p, torch.Tensor)]
    return case, tensors, [f"parameter #{i}" for i in range(len(tensors))], case.private["single_step"]


def _run(spec: Spec, dev: torch.device, observe: bool = True, wrap: Callable[[Any], None] | None = None) -> Run:
    """``STEPS`` steps of the case on ``dev``; with ``observe``, what they computed. A
    model's (and a user's workload's) gradients are read as each is accumulated (its
    update then clears them). ``wrap(case)`` changes how its passes run (the compiled
    door's skeleton: under torch.compile with the skeleton's backend)."""
    model = spec.workload in MODELS or spec.user is not None
    single = False
    if spec.user is not None:
        case, tensors, names, single = _user_case(spec, dev)
        lr = None
    elif model:
        case = torch_models.training_step(spec.workload, spec.api, dev, spec.shape)
        tensors, names, lr = case.private["parameters"], case.private["names"], case.private["adaptive_lr"]
    else:
        case = torch_probe.primitive_step(spec.workload, spec.api, dev, spec.shape)
        tensors, lr = case.private["leaves"], None
        names = ["the input", *(f"parameter #{i}" for i in range(1, len(tensors)))]
    if wrap is not None:
        wrap(case)
    steps = []
    for _ in range(STEPS):
        grads: dict[int, torch.Tensor] = {}
        hooks = [t.register_post_accumulate_grad_hook(lambda t, i=i: grads.__setitem__(i, _host(t.grad)))
                 for i, t in enumerate(tensors)] if model and observe else []
        y = case.forward()
        if not single and (spec.user is not None or "backward" in workload_passes(spec.workload)):
            case.backward(y)  # an optimizer step's forward is the update, as a single step callable's
        for h in hooks:
            h.remove()
        if observe:
            if not model:
                grads = {i: _host(t.grad) for i, t in enumerate(tensors) if t.grad is not None}
            steps.append(Step(_host(y) if isinstance(y, torch.Tensor) else None,
                              [grads.get(i) for i in range(len(tensors))],
                              [_host(t) for t in tensors] if model else []))
    return Run(steps, names, lr)


def _differs(a: torch.Tensor | None, b: torch.Tensor | None, atol: float | None = None) -> str | None:
    """How the device's ``a`` differs from the CPU's ``b`` (torch.testing.assert_close's
    tolerances for the dtype, or ``atol`` with no relative one), or None."""
    if a is None or b is None:
        return None if a is None and b is None else f"{'none' if a is None else 'one'} on the device, " \
                                                    f"{'none' if b is None else 'one'} on the CPU"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{tuple(a.shape)} {a.dtype} against {tuple(b.shape)} {b.dtype}"
    try:
        torch.testing.assert_close(a, b, **({} if atol is None else {"atol": atol, "rtol": 0.0}))
    except AssertionError:
        return f"max abs difference {(a.double() - b.double()).abs().max().item():.3g}"
    return None


#: A gradient entry no larger than this is rounding-sized (assert_close's float32 atol):
#: Adam divides it by its own size, so the update it makes is rounding magnified up to
#: the learning rate (the key bias of attention, whose true gradient is zero). Under
#: Adam those entries are compared within lr; every other entry at the usual tolerance.
ROUNDING = 1e-5


def _update_differs(a: torch.Tensor, b: torch.Tensor, grad: torch.Tensor | None,
                    lr: float | None) -> tuple[str | None, int]:
    """How a parameter after the update differs; how many entries had a rounding-sized
    gradient other than zero (a zero one moves neither side)."""
    if lr is None or grad is None or a.shape != b.shape or grad.shape != b.shape:
        return _differs(a, b), 0
    small = grad.abs() <= ROUNDING
    return (_differs(a[~small], b[~small]) or _differs(a[small], b[small], atol=lr)), int((small & (grad != 0)).sum())


def check_case(spec: Spec, dev: torch.device, skeleton: ModuleType, wrap: Callable[[Any], None] | None = None) -> str:
    """Raise CheckFailed unless ``spec`` runs on the skeleton as on the CPU; a summary.
    ``wrap``: how the skeleton's run is made (see :func:`_run`)."""
    try:  # first: each build seeds torch's generator (dropout masks match)
        want = _run(spec, torch.device("cpu"))
    except Exception as exc:  # noqa: BLE001 - a workload that does not run on the CPU proves nothing
        raise CheckFailed(f"{spec.label}: the step fails on the CPU too: {exc if spec.user else first_line(exc)}") \
            from None
    skeleton.REFUSED.clear()
    try:
        got = _run(spec, dev, wrap=wrap)
    except Exception as exc:  # noqa: BLE001 - any failure of the step is the check's answer
        raise CheckFailed(f"{spec.label}: {first_line(exc)}") from None
    if skeleton.REFUSED:
        raise CheckFailed(f"{spec.label}: reached {', '.join(dict.fromkeys(skeleton.REFUSED))}, which the skeleton "
                          "refuses (the step went on: torch caught the error)")
    model = spec.workload in MODELS or spec.user is not None
    out, loose = "loss" if model else "output", 0
    for n, (g, w) in enumerate(zip(got.steps, want.steps), 1):
        wrong = _differs(g.out, w.out)
        if wrong:
            raise CheckFailed(f"{spec.label}: the {out} of step {n} differs from the CPU's ({wrong})")
        for name, a, b in zip(want.names, g.grads, w.grads):
            wrong = _differs(a, b)
            if wrong:
                raise CheckFailed(f"{spec.label}: the gradient of {name} in step {n} differs from the CPU's ({wrong})")
        for name, a, b, grad in zip(want.names, g.after, w.after, w.grads):
            wrong, small = _update_differs(a, b, grad, want.adaptive_lr)
            loose += small
            if wrong:
                raise CheckFailed(f"{spec.label}: {name} after the update of step {n} differs from the CPU's ({wrong})")
    n = len(want.names)
    what = f"the {out}, {n} gradient{'s' if n != 1 else ''}" + (" and the parameters after the update" if model else "")
    note = f" ({loose} entries whose gradient was rounding-sized, not zero: within Adam's lr)" if loose else ""
    return f"{spec.label}: {STEPS} steps match the CPU: {what}{note}"


def _named(op: str, message: str) -> bool:
    """Whether a failure names ``op`` (the refusal names it in full; torch's own
    "not implemented" kernel of an op routed only to new backends by its name)."""
    short = op.split("::", 1)[-1].split(".", 1)[0]
    return op in message or re.search(rf"\b{re.escape(short)}\b", message) is not None


def check_minimal(specs: list[Spec], dev: torch.device, skeleton: ModuleType,
                  wrap: Callable[[Any], None] | None = None) -> str:
    """Raise CheckFailed unless removing each registered op's kernel alone makes a step
    fail naming it."""
    for op in list(skeleton.KERNELS):
        skeleton.unregister(op)
        try:
            failure = None
            for spec in specs:
                try:
                    _run(spec, dev, observe=False, wrap=wrap)
                except Exception as exc:  # noqa: BLE001
                    failure = first_line(exc)
                    break
        finally:
            skeleton.register(op)
        if failure is None:
            raise CheckFailed(f"{op} is not needed: every step runs without its kernel")
        if not _named(op, failure):
            raise CheckFailed(f"without {op} the step fails on something else: {failure}")
    return f"{len(skeleton.KERNELS)} ops, each needed (without its kernel a step fails naming it)"


def main(folder: Path) -> int:
    """Check the skeleton in ``folder``; print the summary, or the reason on stderr."""
    manifest, specs = read_manifest(folder)
    sys.path.insert(0, str(folder))

    def check() -> list[str]:
        skeleton = importlib.import_module(manifest["package"])
        dev = skeleton.install()
        return [f"{dev.type}: {len(skeleton.KERNELS)} ops registered ({manifest['package']}/kernels.py), "
                "every other op refused",
                *(check_case(s, dev, skeleton) for s in specs), check_minimal(specs, dev, skeleton)]

    return verdict(check)
