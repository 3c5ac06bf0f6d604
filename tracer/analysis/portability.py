"""The portability view of a set of traces: for each framework, where its paths
split, what each path reaches, and what a port to a new backend must provide.

Pure: loaded traces (and the survey's gaps) in, plain data out, for the HTML
report and the `dltrace audit` command alike.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from tracer.contract import LAYERS, PRIMITIVES, workload_passes
from tracer.evidence_classes import RAN_ON_GPU
from tracer.gap import Gap
from tracer.knowledge import Knowledge
from tracer.analysis.arm_audit import ArmAudit, arm_audit
from tracer.analysis.backend_needs import BackendNeeds, PassNeeds, backend_needs, op_layer_needs, pass_needs
from tracer.analysis.standin_needs import StandinNeeds, standin_needs
from tracer.processing.candidates import Candidate, find_candidates
from tracer.processing.diff import DiffError, diff_traces
from tracer.processing.diff.result import Branch, DiffResult, walk_splits
from tracer.analysis.dispatch import DispatchPoint, DispatchTable
from tracer.analysis.agreement import Agreement, agreement
from tracer.analysis.gpu_cells import GpuCell, GpuCoverage, coverage, gpu_cells
from tracer.processing.pairs import (Pair, case_key, is_default_cpu, machine_of, pairs, recorded_by, reference_cpus,
                                  side_label)
from tracer.processing.ran_kernels import split_kernels
from tracer.processing.reach import Reach, reach
from tracer.processing.sampling import DEFAULT_THRESHOLD
from tracer.processing.summary import PathSummary
from tracer.processing.tags import is_gpu_lib, is_vendor_lib, library_order
from tracer.trace import Trace

LAYER_NAMES = {"python": "Python", "op": "op level", "library": "library", "native": "native"}


# ----------------------------------------------------------------------------- one pair


@dataclass
class SideCode:
    """Backend-specific code on one side of the splits: what a port replaces."""

    python_functions: int = 0
    python_lines: int = 0
    native_symbols: int = 0
    ops: int = 0


@dataclass
class PairReport:
    kind: str
    title: str
    a_label: str
    b_label: str
    diffs: dict[str, DiffResult]  # pass -> diff
    errors: list[str]
    first_layer: str | None  # the layer of the first decision; None: the paths do not split
    splits: int  # split points, nested ones included, over both passes and all layers
    code: dict[str, SideCode]  # "A" / "B"
    libraries: dict[str, list[str]]  # libraries reached only in the differing branches
    isa: dict[str, list[str]]
    #: pass -> the framework's kernels only side A / only side B ran (tracer.processing.ran_kernels)
    kernels: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)


def _branch_code(branches: list[Branch], code: SideCode, libs: set[str], isa: set[str],
                 seen: set[tuple[str, str]]) -> None:
    for b in branches:
        libs.update(x for x in b.libraries if x)
        isa.update(x for x in b.isa if x)
        key = (b.kind, b.identity)
        if key in seen:
            continue
        seen.add(key)
        if b.kind == "python":
            code.python_functions += 1
            code.python_lines += max(1, b.nodes)
        elif b.kind == "native":
            code.native_symbols += b.nodes
        elif b.kind == "op":
            code.ops += b.nodes


def pair_report(pair: Pair, threshold: float = DEFAULT_THRESHOLD, *, k: Knowledge) -> PairReport:
    diffs, errors = {}, []
    for pass_ in workload_passes(pair.a.info.primitive):  # an optimizer step has a forward only
        try:
            diffs[pass_] = diff_traces(pair.a, pair.b, pass_=pass_, threshold=threshold, k=k)
        except DiffError as exc:
            errors.append(f"{pass_}: {exc}")
    first = None
    for layer in LAYERS:
        if any(d.layer == layer and d.splits for r in diffs.values() for d in r.layers):
            first = layer
            break
    code = {"A": SideCode(), "B": SideCode()}
    libs: dict[str, set[str]] = {"A": set(), "B": set()}
    isa: dict[str, set[str]] = {"A": set(), "B": set()}
    seen: dict[str, set[tuple[str, str]]] = {"A": set(), "B": set()}
    n = 0
    for result in diffs.values():
        for layer_diff in result.layers:
            for s in walk_splits(layer_diff.splits):
                n += 1
                _branch_code(s.only_a, code["A"], libs["A"], isa["A"], seen["A"])
                _branch_code(s.only_b, code["B"], libs["B"], isa["B"], seen["B"])
    kernels = {p: split_kernels(pair.a, pair.b, p, k) for p in diffs}
    return PairReport(pair.kind, pair.title, side_label(pair.a), side_label(pair.b), diffs, errors, first, n, code,
                      {side: sorted(v, key=lambda lib: library_order(lib, k)) for side, v in libs.items()},
                      {side: sorted(v) for side, v in isa.items()},
                      {p: ran for p, ran in kernels.items() if ran[0] or ran[1]})


# ----------------------------------------------------------------------------- per framework


@dataclass
class CaseReport:
    """One primitive at one API level, on every side that was traced."""

    primitive: str
    api: str
    shape: list[int]
    sides: dict[str, Reach]  # side label -> what it reaches
    pairs: list[PairReport]
    candidates: list[Candidate]  # device branches in the default CPU path's Python


@dataclass
class ApiLevelRow:
    primitive: str
    functional: PathSummary
    layer: PathSummary
    functional_s: float | None
    layer_s: float | None
    same_kernel: bool | None  # both levels reach the same op / C hand-off
    kernel: str


@dataclass
class AuditRow:
    primitive: str
    cpu_libraries: list[str]
    gpu_libraries: list[str] | None  # None: no GPU trace
    isa: list[str]
    provide: list[str]  # the ops / kernels a port must provide (forward and backward)
    kernels: list[str]
    needs: BackendNeeds | None = None  # from the framework's own dispatch tables, where it has them
    standin: StandinNeeds | None = None  # what reached a stand-in backend when the primitive ran on it
    #: per pass, from the derived GPU evidence (or, where none is derived, the CPU op layer)
    pass_needs: list[PassNeeds] = field(default_factory=list)


@dataclass
class FrameworkReport:
    name: str
    versions: list[str]
    primitives: list[str]
    apis: list[str]
    sides: list[str]  # device/variant labels traced
    machines: list[str]
    cases: list[CaseReport]
    gaps: list[Gap]
    api_level: list[ApiLevelRow]
    dispatch_points: list[DispatchPoint]
    audit: list[AuditRow]
    splits: int = 0
    first_layer: str | None = None
    libraries: dict[str, list[str]] = field(default_factory=dict)  # side label -> libraries
    isa: list[str] = field(default_factory=list)
    code: dict[str, SideCode] = field(default_factory=dict)  # pair kind/side -> totals
    notes: list[str] = field(default_factory=list)

    devices: list[str] = field(default_factory=list)  # devices traced
    arm: ArmAudit | None = None  # what runs on each aarch64 CPU (emulated or native), where any was traced
    workers: list[str] = field(default_factory=list)  # the fleet workers that recorded traces (tracer.fleet)
    gpu_cells: list[GpuCell] = field(default_factory=list)  # per primitive and pass: CPU against GPU evidence

    @property
    def has_gpu(self) -> bool:
        return "gpu" in self.devices

    @property
    def gpu_coverage(self) -> GpuCoverage:
        return coverage(self.gpu_cells)

    @property
    def device_branches(self) -> list[Candidate]:
        """The distinct device branches that pick an implementation, over every case's
        single-trace candidates (one branch is met by many primitives)."""
        return list({(c.file, c.line): c for case in self.cases for c in case.candidates if c.dispatches}.values())

    @property
    def evidence_agreement(self) -> list[Agreement]:
        """Each weaker GPU evidence class measured against the recorded runs of the same cells."""
        return agreement(self.gpu_cells)

    def gpu_cells_of(self, primitive: str) -> list[GpuCell]:
        return [c for c in self.gpu_cells if c.primitive == primitive]


def _api_level(cases: list[CaseReport], by_case: dict[tuple[str, str], CaseReport]) -> list[ApiLevelRow]:
    rows = []
    for prim in dict.fromkeys(c.primitive for c in cases):
        f, layer_case = by_case.get((prim, "functional")), by_case.get((prim, "layer"))
        if not f or not layer_case:
            continue
        rf, rl = f.sides.get("cpu"), layer_case.sides.get("cpu")
        if not rf or not rl or "forward" not in rf.python or "forward" not in rl.python:
            continue
        kf = [o for p, o in (rf.ops or rf.handoffs) if p == "forward"]
        kl = [o for p, o in (rl.ops or rl.handoffs) if p == "forward"]
        same = bool(kf) and bool(set(kf) & set(kl)) if kf and kl else None
        rows.append(ApiLevelRow(prim, rf.python["forward"], rl.python["forward"], rf.seconds.get("forward"),
                                rl.seconds.get("forward"), same, ", ".join(sorted(set(kf) & set(kl))[:3])))
    return rows


def framework_report(name: str, traces: list[Trace], gaps: list[Gap],
                     threshold: float = DEFAULT_THRESHOLD, *, k: Knowledge) -> FrameworkReport:
    """One framework's report over its traces, read with the knowledge ``k``."""
    # a GPU machine's own CPU path is its GPU path's baseline only (pairs.reference_cpus):
    # every other analysis is of this survey's own paths
    all_pairs = pairs(traces)
    refs = {id(t) for t in reference_cpus(traces)}
    every, traces = traces, [t for t in traces if id(t) not in refs]
    by_key: dict[tuple[str, str, str, tuple[int, ...]], list[Trace]] = defaultdict(list)
    for t in traces:
        by_key[case_key(t)].append(t)
    cases: list[CaseReport] = []
    by_case: dict[tuple[str, str], CaseReport] = {}
    points = DispatchTable(k)
    totals: dict[str, SideCode] = defaultdict(SideCode)
    side_libs: dict[str, set[str]] = defaultdict(set)
    isa_all: set[str] = set()
    first_layers: Counter[str] = Counter()
    n_splits = 0
    # a path is named with its machine where one label spans several (x86 and emulated
    # aarch64 CPU paths): their libraries and ISA must not read as one path's
    label_machines: dict[str, set[str]] = defaultdict(set)
    for t in traces:
        label_machines[side_label(t)].add(machine_of(t))

    def path_of(t: Trace) -> str:
        return side_label(t, with_machine=len(label_machines[side_label(t)]) > 1)

    for key in sorted(by_key, key=lambda c: (_order(c[1]), c[2], c[3])):
        group = by_key[key]
        sides = {}
        for t in sorted(group, key=lambda t: (t.info.device, t.info.variant != "default", side_label(t))):
            label = side_label(t, with_machine=len({machine_of(x) for x in group
                                                    if side_label(x) == side_label(t)}) > 1)
            sides[label] = r = reach(t, threshold, k=k)
            side_libs[path_of(t)].update(r.libraries)
            isa_all.update(r.isa)
        reports = [pair_report(p, threshold, k=k) for p in all_pairs if case_key(p.a) == key]
        for pr in reports:
            n_splits += pr.splits
            if pr.first_layer:
                first_layers[pr.first_layer] += 1
            for side in ("A", "B"):
                total = totals[f"{pr.kind}:{side}"]
                c = pr.code[side]
                total.python_functions += c.python_functions
                total.python_lines += c.python_lines
                total.native_symbols += c.native_symbols
                total.ops += c.ops
            points.add(key[1], pr.title, pr.diffs, pr.kernels)
        base = next((t for t in group if is_default_cpu(t)), None)
        # input checks that only raise on the other arm are not decisions a port hooks into
        cands = [c for c in find_candidates(base) if not c.guard] if base is not None else []
        case = CaseReport(key[1], key[2], list(key[3]), sides, reports, cands)
        cases.append(case)
        by_case[(key[1], key[2])] = case
    cpu_default = defaultdict(list)
    for t in traces:
        if is_default_cpu(t):
            cpu_default[t.info.primitive].append(t)
    audit = _audit(cases, {prim: backend_needs(ts, k) for prim, ts in cpu_default.items()}, k)
    for row in audit:  # the stand-in device's run beside the tables' list; per pass, the derived GPU evidence
        ran = [t for t in traces if t.info.device == "standin" and t.info.primitive == row.primitive]
        row.standin = standin_needs(ran, cpu_default.get(row.primitive, []), row.needs) if ran else None
        of_prim = [t for t in traces if t.info.primitive == row.primitive]
        row.pass_needs = pass_needs(of_prim, k) or op_layer_needs(of_prim, k)
    return FrameworkReport(
        name=name,
        versions=sorted({"?" if t.info.framework_version is None else t.info.framework_version for t in every}),
        primitives=list(dict.fromkeys(c.primitive for c in cases)),
        apis=sorted({c.api for c in cases}),
        sides=sorted({path_of(t) for t in traces}),
        machines=sorted({machine_of(t) for t in traces}),
        cases=cases,
        gaps=[g for g in gaps if g.framework == name],
        api_level=_api_level(cases, by_case),
        dispatch_points=points.points(),
        audit=audit,
        splits=n_splits,
        first_layer=first_layers.most_common(1)[0][0] if first_layers else None,
        libraries={side: sorted(v, key=lambda lib: library_order(lib, k)) for side, v in side_libs.items()},
        isa=sorted(isa_all),
        code=dict(totals),
        devices=sorted({t.info.device for t in traces}),
        arm=arm_audit(traces, [g for g in gaps if g.framework == name], k),
        gpu_cells=gpu_cells(traces, k),
        workers=sorted({recorded_by(t) for t in traces} - {""}),
        notes=default_paths(name, traces, k),
    )


def default_paths(name: str, traces: list[Trace], k: Knowledge) -> list[str]:
    """Each variant of ``name`` that was not traced on a machine because it is the default
    path there (frameworks.yaml ``default_on``: tracer.survey leaves it out), said with
    what the default's own traces record, so that its absence reads as a result, not a loss."""
    defaults: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        if is_default_cpu(t) and not t.info.imported:
            defaults[machine_of(t)].append(t)
    notes = []
    for key, rule in k.default_on.items():
        framework, _, variant = key.partition("/")
        if framework != name:
            continue
        traced = {machine_of(t) for t in traces if t.info.device == "cpu" and t.info.variant == variant}
        for where, ts in sorted(defaults.items()):
            said = [t.meta.get(rule.recorded_as) for t in ts]
            if where not in traced and rule.confirmed(said):
                notes.append(f"{variant} is not traced on {where}: there it is the default path (the "
                             f"{len(said) - said.count(None)} default CPU traces that record {rule.recorded_as} "
                             f"say true), so the default's splits against the other variants are its splits too")
    return notes


def _order(primitive: str) -> int:
    return list(PRIMITIVES).index(primitive) if primitive in PRIMITIVES else len(PRIMITIVES)


def _audit(cases: list[CaseReport], needs: dict[str, BackendNeeds | None], k: Knowledge) -> list[AuditRow]:
    rows = []
    for prim in dict.fromkeys(c.primitive for c in cases):
        cpu_libs: set[str] = set()
        gpu_libs: set[str] | None = None
        isa: set[str] = set()
        provide: list[str] = []
        kernels: list[str] = []
        for case in (c for c in cases if c.primitive == prim):
            for r in case.sides.values():
                if r.device == "gpu" and r.evidence in RAN_ON_GPU:  # a GPU ran it: the rest
                    # (registries, lowering, source) is shown with its class in the GPU cells, never here
                    gpu_libs = (gpu_libs or set()) | {lib for lib in r.libraries
                                                      if is_gpu_lib(lib, k) or is_vendor_lib(lib, k)}
                elif r.device == "cpu" and r.default:
                    cpu_libs.update(lib for lib in r.libraries)
                    isa.update(r.isa)
                    for pass_, op in (r.ops or r.handoffs):
                        item = f"{op} ({pass_})"
                        if item not in provide:
                            provide.append(item)
                    # what the libraries reported first (every call, no sampling), then sampled kernels
                    for kernel in [c for _, c in r.library_calls] + [name for _, name, _ in r.kernels]:
                        if kernel not in kernels:
                            kernels.append(kernel)
        order = lambda lib: library_order(lib, k)  # noqa: E731
        rows.append(AuditRow(prim, sorted(cpu_libs, key=order),
                             sorted(gpu_libs, key=order) if gpu_libs is not None else None, sorted(isa),
                             provide, kernels[:6], needs.get(prim)))
    return rows


def survey_reports(traces: list[Trace], gaps: list[Gap], threshold: float = DEFAULT_THRESHOLD,
                   *, k: Knowledge) -> list[FrameworkReport]:
    """Every framework's report, each read with the one knowledge ``k`` (the caller's)."""
    by_fw: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_fw[t.info.framework].append(t)
    names = list(dict.fromkeys([*sorted(by_fw), *(g.framework for g in gaps)]))
    return [framework_report(n, by_fw.get(n, []), gaps, threshold, k=k) for n in names]
