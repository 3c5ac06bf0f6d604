"""``--door eager|compiled``: which door of a framework a new backend comes in by, for the
commands that take it (probe, audit, scaffold). Eager is a device backend (the
stand-in's list); compiled is a ``torch.compile`` backend, handed AOTAutograd's
graphs (tracer/probes/torch_compiled.py). Only torch has two doors here: JAX's
stand-in list already is its compiled door (the StableHLO a PJRT plugin's compiler
is handed), so the flag is refused elsewhere with that said in one line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from tracer import pipeline
from tracer.analysis.standin_needs import StandinNeeds
from tracer.trace import Trace
from tracer.cli.common import command_line, err, out
from tracer.contract import DOORS
from tracer.errors import DltraceError, ProbeFailed, UsageError
from tracer.files import write_text
from tracer.registry_entries import Framework
from tracer.render.compiled_console import print_beside, print_compiled
from tracer.render.compiled_export import dumps, to_csv
from tracer.render.terminal import clip, message
from tracer.runner import CaseSpec, probe_one

#: The frameworks with a compiled door beside the eager one, and what it is.
COMPILED = {"torch": "torch.compile with an AOTAutograd backend"}
#: Why a framework has no --door compiled, where there is more to say than that.
_WHY_NOT = {"jax": "jax has one door, and its list already is the compiled one: the StableHLO a PJRT plugin's "
                   "compiler is handed (dltrace probe jax MODEL --device standin)",
            "tensorflow": "tensorflow's compiled path (tf.function's graph) is not a door of its own here: its "
                          "stand-in PluggableDevice receives the graph's op kernels (--device standin)"}


def door_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--door", type=click.Choice(list(DOORS)), default="eager", show_default=True,
                        help="How the backend comes in: eager (a device: the stand-in's list) or compiled "
                             "(torch.compile: the ops of AOTAutograd's graphs after Core ATen decomposition; "
                             "torch only).")(f)


def check_door(framework: str, door: str) -> None:
    """Refuse ``--door compiled`` for a framework without that door, in one line."""
    if door == "compiled" and framework not in COMPILED:
        raise UsageError(f"--door compiled is torch's ({COMPILED['torch']}); "
                         f"{_WHY_NOT.get(framework, f'{framework} has no compiled door here')}")


def audit_compiled(fw: Framework, spec: CaseSpec, title: str, output: Path | None, timeout: float) -> None:
    """The two doors of one step (a workload, a built-in case): its eager list, run on
    the stand-in device, and its compiled list with input variations, run under
    torch.compile, side by side with the reason for each op only one door needs. A
    compiled door that fails is one line after the eager list, which is still given."""
    command = command_line()
    traces: list[Trace] = []
    with err.status(f"running {title} on {fw.name}'s stand-in device (the eager door)…"):
        try:
            traces.append(probe_one(fw, replace(spec, layers=("python", "op")), "standin", timeout=timeout,
                                    command=command))
        except ProbeFailed as exc:
            err.print(message("!", "yellow", f"the eager door: {exc}"), highlight=False, soft_wrap=True)
    eager: StandinNeeds | None = pipeline.doors(traces)[0]
    if eager is not None:
        out.print(Text(f"{title}: what an eager {fw.name} backend must implement ({len(eager.must_implement)} ops, "
                       f"{eager.evidence}): " + "; ".join(f"{p}: {', '.join(ops)}" for p, ops in eager.by_pass.items()
                                                          if ops)), highlight=False, soft_wrap=True)
    with err.status(f"running {title} under torch.compile (the compiled door)…"):
        traces.append(probe_one(fw, replace(spec, layers=("python",)), "cpu", timeout=timeout, command=command,
                                door="compiled"))
    needs = pipeline.doors(traces)[1]
    if needs is None:
        raise DltraceError(f"{title}: the compiled run holds no record of its graphs")
    print_compiled(needs, out, title)
    print_beside(needs, out)
    if output is not None:
        write_text(output, to_csv(needs) if output.suffix == ".csv" else dumps(needs))
        err.print(f"table written to {output}", style="dim", highlight=False, markup=False)
    problem = needs.problem()
    if problem:
        raise DltraceError(f"{title}: {clip(problem, 400)}")
