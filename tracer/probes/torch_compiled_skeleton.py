"""The check of a torch.compile backend skeleton (``dltrace scaffold torch --door compiled``):
does a backend that lowers exactly the ops of the recorded graphs train the network as
eager torch does on the CPU, and is each lowering needed?

Run inside torch's environment by the skeleton's own check.py. The skeleton's package
provides ``backend`` (a torch.compile backend: AOTAutograd with the Core ATen table,
each graph node run through its table of lowerings, an op outside the table refused
naming it), ``KERNELS`` (op -> lowering), ``register(op)``, ``unregister(op)`` and
``REFUSED``. The steps, their comparison with the CPU's and the need of each entry are
the eager skeleton's check (tracer.probes.torch_skeleton), the step run compiled.

Exit status (tracer.contract.Exit): OK when every case matches eager CPU in two steps,
no op outside the table was reached, and each lowering is needed; ERROR otherwise,
with the reason on one line of stderr.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from tracer.probes import torch_skeleton
from tracer.probes.skeleton_check import read_manifest, verdict
from tracer.probes.torch_skeleton import check_case, check_minimal


def compiled_by(skeleton: ModuleType) -> Callable[[Any], None]:
    """How a case runs on the skeleton: its passes under torch.compile with its backend,
    compiled afresh (a lowering removed must show in the next step's graphs)."""
    import torch._dynamo

    # Dynamo compiles what Python runs while a compiled step is under way, the check's own
    # gradient hooks included (called by loss.backward() at its graph break): the check's
    # copies of what a step computed are no part of the step, so they run eagerly.
    if not getattr(torch_skeleton._host, "_dltrace_eager", False):
        torch_skeleton._host = torch._dynamo.disable(torch_skeleton._host)
        torch_skeleton._host._dltrace_eager = True  # type: ignore[attr-defined]

    def wrap(case: Any) -> None:
        torch._dynamo.reset()
        case.forward = torch.compile(case.forward, backend=skeleton.backend)
        if not case.private.get("single_step"):
            case.backward = torch.compile(case.backward, backend=skeleton.backend)

    return wrap


def main(folder: Path) -> int:
    """Check the skeleton in ``folder``; print the summary, or the reason on stderr."""
    manifest, specs = read_manifest(folder)
    sys.path.insert(0, str(folder))

    def check() -> list[str]:
        skeleton = importlib.import_module(manifest["package"])
        wrap, cpu = compiled_by(skeleton), torch.device("cpu")
        return [f"torch.compile backend {manifest['package']}: {len(skeleton.KERNELS)} ops lowered "
                f"({manifest['package']}/lowerings.py), every other op refused",
                *(check_case(s, cpu, skeleton, wrap) for s in specs), check_minimal(specs, cpu, skeleton, wrap)]

    return verdict(check)
