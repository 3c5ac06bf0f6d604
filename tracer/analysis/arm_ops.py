"""The per-op ARM table of a workload: for each op its step ran, what computed it on
this machine and on each ARM CPU, and what a port must care about there.

A porting team asks it of its own model, not of a primitive: which of ResNet-18's
convolutions get an SVE kernel on A64FX, which fall back to oneDNN's reference code
on Neoverse-N1, which ops call no library at all (the framework's own kernel, built
for the ISA it dispatched to). The evidence is the library layer told apart per op
(``stats.layers.library.per_op``: the calls oneDNN, MKL and NVPL reported while each
op ran), or, where a compiler decides it, the op layer's (``stats.layers.op.per_op``:
what XLA:CPU compiled each StableHLO op into, a library's fusion or its own emitted
code), and the framework's own dispatch ISA (torch's ``cpu_capability``; for a
framework whose kernels are NumPy's, the kernels its OpenBLAS chose for the CPU).
Emulated columns say they are emulated; nothing here is a time. Pure: reads traces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tracer.analysis.arm_audit import REFERENCE, machine_label, on_arm
from tracer.contract import PASSES
from tracer.trace import Run, Trace

#: Libraries and implementations that exist on x86 only: on ARM something else runs them.
X86_ONLY_LIBRARIES = ("MKL",)
#: A compiler's own emitted code, named as a call (``XLA: fusion(kLoop)``) to say which
#: code computes the op: the framework's own kernel, no vendor library.
OWN_CODE = ("XLA",)
_X86_ISA = ("avx", "sse4", "amx")


@dataclass
class OpCell:
    """One op on one CPU: the library calls reported while it ran (``LIBRARY: call``),
    or none (the framework's own kernel, at ``own_isa``)."""

    calls: list[str] = field(default_factory=list)
    own_isa: str = ""  # the ISA the framework's own kernels dispatched to, where it called no library
    reference: list[str] = field(default_factory=list)  # calls that are reference code
    x86_only: list[str] = field(default_factory=list)  # calls to x86-only libraries or ISAs

    @property
    def library_calls(self) -> list[str]:
        """The calls into a vendor library (a compiler's own code left out)."""
        return [c for c in self.calls if c.partition(": ")[0] not in OWN_CODE]

    @property
    def said(self) -> str:
        """The cell as every output words it."""
        if self.calls:
            return "; ".join(self.calls)
        return f"own kernel ({self.own_isa})" if self.own_isa else "own kernel"


@dataclass
class ArmOpRow:
    op: str
    passes: list[str]
    cells: dict[str, OpCell]  # machine label -> cell; absent where the op did not run there
    #: what a port must care about, per machine: "reference code (…)", "no library (this machine: …)",
    #: "DEFAULT build (this machine: AVX512)", "x86-only (MKL: SGEMM)" and what replaced it
    flags: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class ArmOpTable:
    workload: str
    framework: str
    machines: list[str]  # this machine first, then each ARM CPU
    rows: list[ArmOpRow]
    #: whether the framework says which ISA its own kernels dispatched to (torch's
    #: cpu_capability): only then can an op run an unvectorised DEFAULT build
    isa_dispatch: bool = False

    def count(self, machine: str, flag: str) -> int:
        """How many ops carry ``flag`` (its start: "reference code", "no library") on ``machine``."""
        return sum(1 for r in self.rows if any(f.startswith(flag) for f in r.flags.get(machine, [])))


def _x86_only(call: str) -> bool:
    library, _, name = call.partition(": ")
    return library in X86_ONLY_LIBRARIES or any(isa in name for isa in _X86_ISA)


def _per_op(run: Run) -> Mapping[str, tuple[int, Mapping[str, int]]]:
    """A warm run's per-op record: the library layer's, else the op layer's (a compiler's)."""
    layers = run.info.layers
    found = [layers[name].per_op for name in ("library", "op") if name in layers and layers[name].per_op]
    return found[0] if run.phase == "warm" and found else {}


def _own_isa(trace: Trace, pure_python: frozenset[str]) -> str:
    """What the framework's own kernels ran as: torch's dispatch ISA; for a framework whose
    kernels are NumPy's, the kernels its OpenBLAS chose for this CPU."""
    if trace.info.cpu_capability:
        return trace.info.cpu_capability
    core = trace.info.openblas_core
    return f"NumPy; OpenBLAS {core} kernels" if core and trace.info.framework in pure_python else ""


def _cells(trace: Trace, pure_python: frozenset[str]) -> dict[str, tuple[list[str], OpCell]]:
    """op -> (passes, cell) of one trace's per-op record."""
    out: dict[str, tuple[list[str], OpCell]] = {}
    for pass_ in PASSES:
        for run in trace.runs:
            if run.pass_ != pass_:
                continue
            for op, (_, calls) in _per_op(run).items():
                passes, cell = out.setdefault(op, ([], OpCell()))
                if pass_ not in passes:
                    passes.append(pass_)
                for call in calls:
                    if call not in cell.calls:
                        cell.calls.append(call)
    for _, cell in out.values():
        cell.own_isa = "" if cell.library_calls else _own_isa(trace, pure_python)
        cell.reference = [c for c in cell.calls if REFERENCE.search(c.partition(": ")[2])]
        cell.x86_only = [c for c in cell.calls if _x86_only(c)]
    return out


def _flags(host: OpCell | None, cell: OpCell, is_host: bool) -> list[str]:
    """What a port must care about in one cell: on this machine the x86-only calls (an
    ARM CPU runs something else there); on an ARM CPU reference code, an op that calls
    no library where this machine called one, the framework's unvectorised DEFAULT build
    where this machine ran a vectorised one, and what replaced an x86-only call."""
    if is_host:
        return [f"x86-only ({', '.join(cell.x86_only)})"] if cell.x86_only else []
    flags = [f"reference code ({', '.join(cell.reference)})"] if cell.reference else []
    if host is None:
        return flags
    if not cell.library_calls and host.library_calls:
        flags.append(f"no library (this machine: {'; '.join(host.library_calls)})")
    if not cell.library_calls and not host.library_calls and cell.own_isa == "DEFAULT" \
            and host.own_isa not in ("", "DEFAULT"):
        flags.append(f"DEFAULT build (this machine: {host.own_isa})")
    if cell.library_calls and host.x86_only:
        flags.append(f"in place of x86-only {', '.join(host.x86_only)}")
    return flags


def arm_op_table(traces: list[Trace], pure_python: frozenset[str] = frozenset()) -> ArmOpTable | None:
    """The table over one workload's CPU traces at the default variant: this machine's
    and each ARM CPU's; None where no ARM trace carries a per-op record. ``pure_python``:
    the frameworks whose kernels are NumPy's (tracer.knowledge), whose own kernels the
    table names by their OpenBLAS's kernels."""
    chosen = [t for t in traces if t.info.device == "cpu" and t.info.variant == "default"
              and any(_per_op(r) for r in t.runs)]
    arm = [t for t in chosen if on_arm(t)]
    if not arm:
        return None
    host = [t for t in chosen if not on_arm(t)][:1]
    ordered = host + sorted(arm, key=machine_label)
    machines = list(dict.fromkeys(map(machine_label, ordered)))
    per = {machine_label(t): _cells(t, pure_python) for t in ordered}
    host_cells = per[machines[0]] if host else {}
    ops = list(dict.fromkeys(op for m in machines for op in per[m]))
    rows = []
    for op in ops:
        passes = list(dict.fromkeys(p for m in machines if op in per[m] for p in per[m][op][0]))
        cells = {m: per[m][op][1] for m in machines if op in per[m]}
        host_cell = host_cells[op][1] if op in host_cells else None
        flags = {m: _flags(host_cell, cell, bool(host) and m == machines[0]) for m, cell in cells.items()}
        rows.append(ArmOpRow(op, [p for p in PASSES if p in passes], cells, {m: f for m, f in flags.items() if f}))
    first = ordered[0].info
    return ArmOpTable(first.primitive, first.framework, machines, rows,
                      isa_dispatch=any(t.info.cpu_capability for t in ordered))
