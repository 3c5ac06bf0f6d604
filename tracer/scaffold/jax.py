"""JAX's skeleton (``dltrace scaffold jax``): the op table of the StableHLO ops a PJRT
plugin must execute.

The list comes from running the cases on JAX's stand-in (tracer.probes.jax_standin): the
StableHLO ops the step's programs executed. The skeleton's op table holds exactly those
ops, each computing with XLA's CPU compiler; its consumer is dltrace's own
(tracer/probes/jax_standin.py, copied as it is) and refuses every other op by name; its
check (tracer/probes/jax_skeleton.py) runs in JAX's environment: the programs give JAX's
outputs, no op outside the table is reached, and each op in it is needed.
"""

from __future__ import annotations

import keyword
import re

from tracer.analysis.standin_needs import StandinNeeds
from tracer.errors import DltraceError
from tracer.paths import PACKAGE
from tracer.scaffold.skeleton import Kernel, Writer

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


WRITER = Writer(
    framework="jax", title="JAX", kernels=kernels, version_key="jax_version",
    rendered=(("ops.py", "jax_ops.py.j2"), ("__init__.py", "jax_init.py.j2")),
    copied=(("consumer.py", CONSUMER_SOURCE),),
    check_template="jax_check.py.j2", readme_template="jax_README.md.j2",
    must="a JAX backend must execute (StableHLO ops)", summary="{name}/ops.py holds {n} StableHLO ops")
