"""CPU against GPU, one cell per primitive and pass: what the CPU path decided (its
op and kernel) set against each piece of GPU evidence there is (op, kernel,
library), strongest evidence first, each saying what kind of evidence it is and
where it came from.

Why a cell lists evidence rather than one GPU path: most rounds no GPU machine is
lent, so a framework's GPU side is a real profile recorded elsewhere, or what the
framework's GPU build, lowering or source says it would run. Those are not the
same claim, and a reader must see which one a cell rests on: a kernel registry
saying ``cudnn`` is weaker than a profile in which cuDNN ran. Evidence is
labelled, never promoted: the order below decides only which entry is shown
first. Pure.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from tracer.contract import CANDIDATE_MODULE, LOWERING_MODULE_PREFIX, PRIMITIVES
from tracer.knowledge import Knowledge
from tracer.processing.diff.context import names_gpu_code, op_names
from tracer.processing.cpu_kernel import named_kernel
from tracer.processing.evidence_class import EVIDENCE_ORDER, evidence_class
from tracer.processing.pairs import is_default_cpu, side_label
from tracer.processing.reach import origin, reach
from tracer.processing.tags import CUDART, HIP_RUNTIME, KERNEL_MODULES, XLA, library_of, recorded_kernel_lib
from tracer.trace import Frame, Node, Trace

#: Runtimes around a kernel (memsets, copies): never the kernel a cell names.
_RUNTIMES = frozenset({CUDART, HIP_RUNTIME})
#: Kernels that convert a layout around the one that computes (cuDNN's nchwToNhwc,
#: MIOpen's batched_transpose, XLA's bitcast): named after it.
_LAYOUT = re.compile(r"transpose|nchwtonhwc|nhwctonchw|computeoffsets|reorder|^bitcast$|^copy$")
#: Instructions a layout fusion may hold beside its transposes (they move no data).
_LAYOUT_FREE = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "broadcast", "reshape"})
#: Kernels a cell names (the rest are counted).
MOST_KERNELS = 4
CANDIDATE = CANDIDATE_MODULE
#: The frame module of the group that holds a choice's candidates.
CANDIDATES = CANDIDATE_MODULE + "s"


@dataclass
class CpuSide:
    """The CPU path's decision for one primitive and pass."""

    op: str  # the op the kernel ran under ("aten::mkldnn_convolution"), "" where no evidence says
    kernel: str  # the kernel that computed (tracer.processing.cpu_kernel), "" where the evidence names none
    library: str
    trace: str  # which trace: "cpu (functional)"
    evidence: str = ""  # what names the kernel: a library report, the compiled program, native samples
    why_none: str = ""  # where no kernel is named, what the evidence lacked


@dataclass
class GpuEvidence:
    """One piece of GPU evidence for a cell."""

    evidence: str  # one of EVIDENCE_ORDER
    label: str  # the side it is ("gpu alexnet-a100")
    source: str  # where it came from: the recording's origin, or what was read
    gpu: str  # the GPU model, "" where the evidence names none
    version: str  # the framework version that recorded or produced it
    op: str  # the framework op the GPU kernels run under
    kernels: list[str]  # most run first
    library: str  # the library of the first kernel
    more_kernels: int = 0  # kernels not named
    #: what the GPU libraries logged they ran (a recorded run's library layer: the cuDNN
    #: engine, the cuBLASLt algorithm), in order, as (library, call)
    reported: list[tuple[str, str]] = field(default_factory=list)
    #: what a run-time library choice did not take for this target (registered evidence:
    #: convolution's other ConvBackends, batch norm's other implementation indices)
    candidates: list[str] = field(default_factory=list)
    #: the framework's own ops the evidence names for the pass (what agreement measures)
    ops: list[str] = field(default_factory=list)

    @property
    def same_claim(self) -> tuple[object, ...]:
        """What two pieces of evidence must share to be one entry of a cell (the
        functional and layer API's registered reading of one op, say)."""
        return (self.evidence, self.source, self.version, self.op, tuple(self.kernels), self.library,
                tuple(self.reported), tuple(self.candidates))

    @property
    def kernel(self) -> str:
        return self.kernels[0] if self.kernels else ""


@dataclass
class GpuCell:
    primitive: str
    pass_: str
    cpu: CpuSide | None
    gpu: list[GpuEvidence] = field(default_factory=list)  # strongest first

    @property
    def strongest(self) -> GpuEvidence | None:
        return self.gpu[0] if self.gpu else None

    @property
    def classes(self) -> list[str]:
        return list(dict.fromkeys(e.evidence for e in self.gpu))


@dataclass
class GpuCoverage:
    """How many of a framework's primitive x pass cells have GPU evidence, by the
    class of each cell's strongest evidence."""

    cells: int
    covered: int
    by_class: dict[str, int]


#: The device activities that are the runtime's copies and fills, not kernels.


def kernel_tag(f: Frame, k: Knowledge) -> str:
    """A GPU kernel's library: the tag its importer gave it, or for a kernel dltrace's
    probe recorded on a GPU machine (module "cuda" or "hip", untagged: the probe runs
    with the standard library alone) the tag the importer would have given it; "" for
    anything that is no kernel."""
    vendor = KERNEL_MODULES.get(f.module)
    if f.module.startswith(LOWERING_MODULE_PREFIX):
        return ""  # a lowering rule: how an op reaches the compiler, not what runs
    if f.lib and f.module.startswith("xla"):
        # an XLA instruction: a custom call into a library is that library's (recordings
        # made before the probe tagged them say "XLA" for __cudnn$convForward too)
        return library_of(f, k) or f.lib
    if f.lib or vendor is None:
        return f.lib
    return recorded_kernel_lib(f, k) or f"{vendor} GPU kernel"


def _kernels(op_root: Node, cpu_op: str, probe_ops: frozenset[str],
             facts: Knowledge) -> tuple[str, list[str], str, int]:
    """(op, kernels, library, kernels not named) of a GPU run's op layer: kernel frames
    are those the recording tags with a library (not the runtime's memsets and
    copies); each kernel's op is the nearest framework op above it that is not a
    utility op (reshape, view). The kernel a cell names first is, of those: one under
    the CPU path's own deciding op, else under an op that names the GPU code it
    replaces it with (cudnn_convolution for mkldnn_convolution), else under an op the
    CPU probe reaches (a model's profile also holds what the model does around the
    primitive: a recomputed convolution inside ReluBackward0); computing rather than
    converting a layout; most run."""
    counts: Counter[str] = Counter()
    libs: dict[str, str] = {}
    owner: dict[str, str] = {}
    layout: dict[str, bool] = {}
    stack: list[tuple[Node, str, bool]] = [(c, "", False) for c in op_root.children]
    while stack:
        node, above, inside = stack.pop()
        f = node.frame
        if f.module in (CANDIDATE, CANDIDATES, "decision") or f.module.startswith(LOWERING_MODULE_PREFIX):
            continue  # what a choice did not take, the choice, how an op is lowered: never a kernel
        if f.name == "bitcast" and f.module.startswith("xla"):
            continue  # XLA's bitcast reinterprets a buffer: no kernel runs
        lib = kernel_tag(f, facts)
        if lib and lib not in _RUNTIMES:
            inner = [c for c in node.children if kernel_tag(c.frame, facts)] if not inside else []
            if inner and not f.name.startswith("fusion"):
                # a compiled program (XLA:gpu) and what it ran: each instruction is a kernel
                stack.extend((c, above, True) for c in inner)  # (a fusion is one, whatever it fused)
                continue
            counts[f.name] += node.count
            libs.setdefault(f.name, lib)
            owner.setdefault(f.name, above)
            layout[f.name] = _converts_layout(node)
            continue
        # a compiled program (module xla) is no op of the framework's: its kernels' op is below or none
        own_op = not (f.lib or f.module == "xla" or facts.is_utility_op(f.name) or facts.is_noise(f.name))
        mine = f.name if own_op else above
        stack.extend((c, mine, False) for c in node.children)
    if not counts:
        return _deepest_op(op_root, facts), [], "", 0
    # a vendor library the framework hands the work to (cuDNN's convolution) before the
    # framework's or XLA's own kernels around it (a bias gradient's reduce), however many
    own = {XLA, *facts.gpu_kernel_tags}
    # in a compiled program (XLA's instructions) the op a kernel hangs under is the
    # compiler's attribution, not the framework's choice: the library it handed work to
    # ranks first there, whatever op the CPU path's cell names
    compiled = all(libs[n] == XLA or n.startswith("custom-call:") for n in counts)
    ranked = sorted(counts, key=lambda n: (compiled and libs[n] in own,
                                           owner[n] != cpu_op, not names_gpu_code(owner[n], k=facts),
                                           owner[n] not in probe_ops, layout[n], libs[n] in own, -counts[n], n))
    op = owner[ranked[0]]
    if not op:
        # a compiled program's instructions hang under no op (JAX: the jaxpr's ops are its
        # siblings): the op the first kernel is named after (conv_general_dilated for
        # __cudnn$convBackwardInput), else the CPU path's where the step has it, else the first
        ops = _framework_ops(op_root, facts)
        words = set(_words(ranked[0]))
        op = next((o for o in ops if words & set(_words(o))), cpu_op if cpu_op in ops else next(iter(ops), ""))
    return op, ranked[:MOST_KERNELS], libs[ranked[0]], max(0, len(ranked) - MOST_KERNELS)


#: Words that name no computation (an HLO instruction's kind, a custom call's prefix).
_NO_WORDS = frozenset({"custom", "call", "fusion", "kloop", "kinput", "kcustom", "koutput", "cudnn", "cublas", "lt",
                       "general", "forward", "backward"})


def _words(name: str) -> list[str]:
    """The lower-case words of an op or kernel name (camel case split), those that name no
    computation left out: convBackwardInput -> conv, input."""
    parts = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)
    return [w.lower() for w in parts if w.lower() not in _NO_WORDS and len(w) > 2]


def _converts_layout(node: Node) -> bool:
    """A kernel that converts a layout around the one that computes: named so, or a
    fusion of nothing but layout instructions (XLA's fusion(kLoop) of a transpose)."""
    if _LAYOUT.search(node.frame.name.lower()):
        return True
    fused = [c.frame.name for c in node.children]
    return bool(fused) and all(_LAYOUT.search(n.lower()) or n in _LAYOUT_FREE for n in fused)


#: A call around ops, not an op (JAX's jit:NAME / pjit:NAME equation around a jaxpr).
_CALL_WRAPPER = re.compile(r"^p?jit(?::|$)")


def _framework_ops(root: Node, facts: Knowledge) -> list[str]:
    """The framework's own ops of an op layer, in order (torch's aten ops, JAX's jaxpr
    primitives; not kernels, XLA's instructions, lowering rules, candidates, utility ops)."""
    out: list[str] = []
    for _, node in root.walk():
        f = node.frame
        if (f.kind != "op" or kernel_tag(f, facts) or f.module in KERNEL_MODULES or f.module in (CANDIDATE, CANDIDATES)
                or f.module.startswith(("xla", "stablehlo", "native_functions", "at::", LOWERING_MODULE_PREFIX))
                or facts.is_utility_op(f.name) or facts.is_noise(f.name) or _CALL_WRAPPER.match(f.name)):
            continue
        out.append(f.name)
    return list(dict.fromkeys(out))


def _deepest_op(root: Node, facts: Knowledge) -> str:
    found = ""
    for _, node in root.walk():
        if node.frame.kind == "op" and not facts.is_utility_op(node.frame.name) and not facts.is_noise(node.frame.name):
            found = node.frame.name
    return found


def _source(trace: Trace) -> tuple[str, str]:
    """(where it came from, GPU model) from the trace's provenance and machine."""
    prov = trace.info.provenance
    gpu = trace.info.machine.gpu or (prov.gpu if prov is not None else "")
    if prov is not None:
        return origin(trace) or prov.what or prov.source, gpu
    m = trace.info.machine
    how = ", ".join(x for x in (m.gpu_runtime, f"driver {m.gpu_driver}" if m.gpu_driver else "") if x)
    return (f"dltrace on {gpu}" if gpu else "dltrace on a GPU machine") + (f" ({how})" if how else ""), gpu


def gpu_evidence(trace: Trace, pass_: str, cpu_op: str = "",
                 probe_ops: frozenset[str] = frozenset(), *, k: Knowledge) -> GpuEvidence | None:
    """What one GPU trace says of one pass (its kernels picked as :func:`_kernels`
    says, against the CPU path's op and ops); None where it has no op layer for it."""
    cls = evidence_class(trace.info)
    run = trace.run(pass_, "warm")
    if cls is None or run is None or "op" not in run.layers:
        return None
    op, kernels, lib, more = _kernels(run.layers["op"], cpu_op, probe_ops, k)
    source, gpu = _source(trace)
    version = trace.info.framework_version or "unknown"
    reported = [(library_of(n.frame, k), n.frame.name) for n in run.layers["library"].children] \
        if "library" in run.layers else []
    candidates = [n.frame.name for _, n in run.layers["op"].walk() if n.frame.module == CANDIDATE]
    return GpuEvidence(cls, side_label(trace), source, gpu, version, op, kernels, lib, more,
                       list(dict.fromkeys(reported))[:MOST_KERNELS], list(dict.fromkeys(candidates)),
                       _framework_ops(run.layers["op"], k))


def _one_per_claim(found: list[GpuEvidence]) -> list[GpuEvidence]:
    """Evidence that says the same thing once, its labels joined: the registered readings
    of the functional and the layer API are one reading when they agree."""
    out: dict[tuple[object, ...], GpuEvidence] = {}
    for e in found:
        have = out.get(e.same_claim)
        if have is None:
            out[e.same_claim] = e
        elif e.label not in have.label.split(", "):
            have.label = f"{have.label}, {e.label}"
    return list(out.values())


def cpu_side(traces: list[Trace], reached: list[tuple[str, str]], pass_: str, k: Knowledge) -> CpuSide | None:
    """The CPU path's op and the kernel that computed it (tracer.processing.cpu_kernel),
    from one case's CPU traces: the first speaks for the cell (its ops, ``reached``
    as reach() read them, library calls and compiled program), the others add their
    native samples."""
    if not traces or traces[0].run(pass_, "warm") is None:
        return None
    main = traces[0]
    ops = [o for p, o in reached if p == pass_]
    named = named_kernel(traces, pass_, _ops_to_name(main, pass_, ops, k), k)
    op = named.op if named.kernel else (ops[0] if ops else "")
    return CpuSide(op, named.kernel, named.library, f"{side_label(main)} ({main.info.api})", named.evidence,
                   named.why_none)


def _ops_to_name(trace: Trace, pass_: str, leaves: list[str], k: Knowledge) -> list[str]:
    """The framework's ops a kernel may be named under: the kernel ops the pass reached
    (leaves) first, then the ops above them; never a compiled program's instructions."""
    root = trace.layer(pass_, "op")
    if root is None:
        return leaves
    compiled = {n.frame.name for _, n in root.walk() if n.frame.module.startswith("xla")}
    return list(dict.fromkeys([o for o in leaves if o not in compiled] + _framework_ops(root, k)))


def _cpu_traces(traces: list[Trace], primitive: str) -> list[Trace]:
    """The default CPU path of a primitive on this machine (not emulated): the functional
    API at the default shape first, then the others (a larger shape's native samples)."""
    mine = [t for t in traces if is_default_cpu(t) and t.info.primitive == primitive
            and not t.info.imported and t.info.emulated is None]
    return sorted(mine, key=lambda t: (t.info.api != "functional", tuple(t.info.shape) != PRIMITIVES[primitive].shape,
                                       len(t.info.shape)))


def gpu_cells(traces: list[Trace], k: Knowledge) -> list[GpuCell]:
    """One framework's cells: every primitive of the contract and both passes, with
    or without evidence (a cell with none says so in the report)."""
    cells = []
    for prim in PRIMITIVES:
        cpus = _cpu_traces(traces, prim)
        probe_ops = op_names(cpus[0]) if cpus else frozenset()
        reached = reach(cpus[0], k=k).ops if cpus else []  # read once for both passes
        # the functional API at the default shape first, as the CPU side: of two traces
        # with one claim, the cell names the first (MultiheadAttention's projections are
        # matmuls; the attention is F.scaled_dot_product_attention's kernel)
        gpus = sorted((t for t in traces if t.info.primitive == prim and t.info.device == "gpu"),
                      key=lambda t: (t.info.api != "functional", tuple(t.info.shape) != PRIMITIVES[prim].shape))
        for pass_ in PRIMITIVES[prim].passes:
            mine = cpu_side(cpus, reached, pass_, k)
            found = [e for e in (gpu_evidence(t, pass_, mine.op if mine else "", probe_ops, k=k) for t in gpus) if e]
            found.sort(key=lambda e: (EVIDENCE_ORDER.index(e.evidence), e.label))
            cells.append(GpuCell(prim, pass_, mine, _one_per_claim(found)))
    return cells


def coverage(cells: list[GpuCell]) -> GpuCoverage:
    by_class = Counter(c.strongest.evidence for c in cells if c.strongest)
    return GpuCoverage(len(cells), sum(by_class.values()),
                       {k: by_class[k] for k in EVIDENCE_ORDER if by_class[k]})
