"""A JAX backend skeleton that proves the must-implement list (``dltrace scaffold jax``).

The list comes from running the cases on JAX's stand-in (tracer.probes.jax_standin,
as ``dltrace probe jax --device standin`` does; read by tracer.analysis.standin_needs):
the StableHLO ops the step's programs executed. The skeleton's op table holds exactly
those ops, each computing with XLA's CPU compiler; its consumer is dltrace's own
(tracer/probes/jax_standin.py, copied as it is) and refuses every other op by name;
its check (tracer/probes/jax_skeleton.py) runs in JAX's environment: the programs give
JAX's outputs, no op outside the table is reached, and each op in it is needed.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Any

from tracer import __version__
from tracer.contract import MODELS
from tracer.errors import DltraceError
from tracer.files import own_folder, write_bytes, write_text
from tracer.paths import PACKAGE
from tracer.analysis.standin_needs import StandinNeeds
from tracer.runner import CaseSpec
from tracer.scaffold import Kernel, case_rows, code_text, describe_cases, needs_of, template_env, \
    write_list, write_manifest
from tracer.trace import Trace

CONSUMER_SOURCE = PACKAGE / "probes" / "jax_standin.py"
#: What a StableHLO (or CHLO) op's name must be to be written into generated code.
STABLEHLO_OP = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*", re.ASCII)
#: Names ops.py defines besides the kernels.
_RESERVED = frozenset({"annotations", "Any", "np", "cpu", "NAME", "KERNELS"})


def kernels(needs: StandinNeeds) -> list[Kernel]:
    """One kernel per op the stand-in executed, in first-run order, each a function
    name of its own (``stablehlo.and`` -> ``and_``, ``chlo.erf`` -> ``chlo_erf``)."""
    out: list[Kernel] = []
    taken = set(_RESERVED)
    for op in needs.must_implement:
        if not STABLEHLO_OP.fullmatch(op):  # written into Python as a string and a function name
            raise DltraceError(f"op name {op[:80]!r} cannot be written into a skeleton (dialect.name, lower-case "
                               "ASCII letters, digits and '_'): refused")
        dialect, name = op.split(".", 1)
        name = name if dialect == "stablehlo" else f"{dialect}_{name}"
        while name in taken or keyword.iskeyword(name):
            name += "_"
        taken.add(name)
        out.append(Kernel(op, tuple(needs.passes_of(op)), name))
    return out


def write(folder: Path, name: str, specs: list[CaseSpec], traces: list[Trace], command: str) -> list[Kernel]:
    """Write the skeleton into ``folder`` (made by tracer.scaffold.prepare); its kernels."""
    needs = needs_of(traces)
    ks = kernels(needs)
    version = str(traces[0].info.framework_version or "?")
    what = describe_cases(specs)
    ctx: dict[str, Any] = {"name": name, "what": what, "kernels": ks, "ops": ks, "tool_version": __version__,
                           "command": code_text(command), "jax_version": code_text(version),
                           "folder": code_text(folder.name or str(folder)), "steps": 2,
                           "models": any(s.primitive in MODELS or s.user is not None for s in specs),
                           "cases": case_rows(specs, traces)}
    env = template_env()
    pkg = own_folder(folder / name)
    write_text(pkg / "ops.py", env.get_template("jax_ops.py.j2").render(ctx))
    write_text(pkg / "__init__.py", env.get_template("jax_init.py.j2").render(ctx))
    write_bytes(pkg / "consumer.py", CONSUMER_SOURCE.read_bytes())
    write_text(folder / "check.py", env.get_template("jax_check.py.j2").render(ctx))
    write_text(folder / "README.md", env.get_template("jax_README.md.j2").render(ctx))
    write_list(folder, "jax", version, what, "a JAX backend must execute (StableHLO ops)", ks)
    write_manifest(folder, "jax", version, name, what, specs, ks, needs.evidence, command)
    return ks
