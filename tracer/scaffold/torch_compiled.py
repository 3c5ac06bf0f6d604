"""torch's compiled-door skeleton (``dltrace scaffold torch --door compiled``): a
torch.compile backend in Python.

The list comes from running the cases under torch.compile with dltrace's recording
backend (tracer.probes.torch_compiled): the ops of the graphs AOTAutograd hands a
backend, after the Core ATen decomposition table. The skeleton lowers exactly those
ops, each by the op itself on the CPU, and refuses a graph holding any other, naming
it. Its check (tracer.probes.torch_compiled_skeleton) runs in torch's environment:
two steps match eager CPU, no op outside the table is reached, each lowering is needed.
"""

from __future__ import annotations

from tracer.analysis.compiled_needs import compiled_needs
from tracer.analysis.standin_needs import StandinNeeds
from tracer.errors import DltraceError
from tracer.scaffold import torch as eager
from tracer.scaffold.skeleton import Writer
from tracer.trace import Trace


def needs(traces: list[Trace]) -> StandinNeeds:
    """The compiled door's list as the writer reads a list: per pass (the probe's pass
    whose call compiled the graph), the ops of its graphs; refused when a compile failed
    or made no graph (a skeleton of part of the step would pass for the whole)."""
    got = compiled_needs(traces)
    if got is None:
        raise DltraceError("the compiled run recorded no graph (no compiled meta in its traces)")
    problem = got.problem()
    if problem:
        raise DltraceError(f"no compiled list to scaffold: {problem}")
    out = StandinNeeds("cpu", "run under torch.compile (AOTAutograd, Core ATen decompositions)", got.framework,
                       got.unit)
    for g in got.graphs:
        have = out.by_pass.setdefault(str(g["pass"]), [])
        have += [op for op in g.get("ops", {}) if op not in have]
    return out


WRITER = Writer(
    framework="torch", title="torch", kernels=eager.kernels, version_key="torch_version",
    rendered=(("lowerings.py", "compiled_lowerings.py.j2"), ("__init__.py", "compiled_init.py.j2")),
    copied=(), check_template="compiled_check.py.j2", readme_template="compiled_README.md.j2",
    must="a torch.compile backend must lower", summary="{name}/lowerings.py lowers {n} ops", needs=needs,
    door="compiled", source="a run under torch.compile")
