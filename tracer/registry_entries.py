"""The entries of frameworks.yaml, as frozen dataclasses: what the tool knows of one
framework (its install steps, devices, variants, native-capture settings, knowledge,
profile formats, examples...). tracer.registry reads the file into them and checks
what a type cannot say; every stage that takes a framework takes a :class:`Framework`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.contract import GPU_BUILD, NativeRequest
from tracer.paths import PROJECT


@dataclass(frozen=True)
class InstallStep:
    requirements: tuple[str, ...]
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Example:
    """A real model from the framework's own model zoo, in the project's examples/
    folder, run as a user's workload (tracer.contract.UserWorkload): its file (relative
    to the project), the extras it needs beyond the framework (``extras``: names of the
    entry's ``extras``), and what it is, in a few words."""

    file: str
    extras: tuple[str, ...] = ()
    about: str = ""

    @property
    def path(self) -> Path:
        return PROJECT / self.file


@dataclass(frozen=True)
class DefaultOn:
    """Where a variant's path is already the framework's default (frameworks.yaml
    ``variants.NAME.default_on``): on a CPU with any of the ``isa`` features (TensorFlow's
    oneDNN on x86 CPUs with AVX512-VNNI, AVX-VNNI or AMX). There the variant repeats the
    default path, so a survey traces it once; ``recorded_as`` names the trace meta field in
    which the default's own traces say whether the switch was on (the check of that rule)."""

    isa: tuple[str, ...]
    recorded_as: str

    def confirmed(self, recorded: Iterable[Any]) -> bool:
        """Whether the values the default's traces hold in ``recorded_as`` (None: a trace
        that does not say, a model's) say the switch was on: one at least, and every one
        that says. The one rule the survey's check and the report's note apply."""
        said = [v for v in recorded if v is not None]
        return bool(said) and all(v is True for v in said)


@dataclass(frozen=True)
class Variant:
    name: str
    description: str = ""
    env: dict[str, str] = field(default_factory=dict)
    set: dict[str, Any] = field(default_factory=dict)
    #: what the switch changes: "library" (a CPU library on or off: a decision a port
    #: meets) or "compilation" (jit against eager: the same device's code compiled or not,
    #: never a device decision; a report shows its splits apart) or "precision" (the same
    #: code in another element type: the kernels a reduced-precision path reaches, shown
    #: apart, never a device decision either)
    switches: str = "library"
    default_on: DefaultOn | None = None

    def repeats_default(self, isa: Iterable[str]) -> str:
        """The feature of ``isa`` (a CPU's flags) on which this variant's path is the
        framework's default, or "" where it is not (:class:`DefaultOn`)."""
        have = set(isa)
        return next((f for f in self.default_on.isa if f in have), "") if self.default_on else ""


#: The kinds of thing a variant switches (frameworks.yaml ``variants.NAME.switches``).
VARIANT_SWITCHES = ("library", "compilation", "precision")

_NATIVE = NativeRequest()  # the defaults of native capture, in one place


@dataclass(frozen=True)
class NativeSpec:
    """How the native layer is sampled for a framework (frameworks.yaml ``native``):
    the sampling settings of :class:`tracer.contract.NativeRequest` (same defaults), and
    ``env``, set for the whole probe process when native stacks are captured (it must
    be set before the import): switches that move the kernels onto the Python thread
    py-spy can see (MXNet's NaiveEngine, a one-thread intra-op pool)."""

    rate: int = _NATIVE.rate
    seconds: float = _NATIVE.seconds
    idle: bool = _NATIVE.idle
    env: dict[str, str] = field(default_factory=dict)
    prime: bool = _NATIVE.prime

    def request(self, pyspy: str) -> NativeRequest:
        return NativeRequest(pyspy, self.rate, self.seconds, self.idle, self.prime)


@dataclass(frozen=True)
class FrameworkKnowledge:
    """What the processing stages know of the framework's own code (frameworks.yaml
    ``knowledge``; compiled in tracer.knowledge). Patterns are regular expressions."""

    core: str  # the tag of the framework's own native code ("torch core")
    core_symbols: str = ""  # its C++ namespaces, e.g. (?:at|c10|torch)::
    core_libraries: str = ""  # its shared objects' basenames
    core_modules: str = ""  # its compiled part's Python modules
    utility_ops: tuple[str, ...] = ()  # op names that only allocate, view or copy
    generated: tuple[str, ...] = ()  # prefixes of function names it numbers per process
    noise: tuple[str, ...] = ()  # frames that run wherever they are triggered
    incidental: tuple[str, ...] = ()  # its native frames that say where a thread was, not what ran
    not_kernels: tuple[str, ...] = ()  # its native helpers that are never a kernel (refcounts, accessors)
    same_op: tuple[str, ...] = ()  # op-name variants of one op, e.g. in-place: group 1 is the op
    kernels: tuple[str, ...] = ()  # its native frames that are one op's kernel (tensorflow::MklConvOp::Compute)
    computes: tuple[str, ...] = ()  # its native frames that compute: what a kernel cell may name
    op_frames: tuple[str, ...] = ()  # its native frames that name the op they run (group 1: the op)
    compiled_ops: dict[str, str] = field(default_factory=dict)  # a compiled instruction -> its op's name
    compiling: tuple[str, ...] = ()  # words in its frames that mean compiling the model (dynamo, tf_function)
    gpu_kernels: GpuKernels | None = None  # its own GPU kernels in imported profiles


@dataclass(frozen=True)
class GpuKernels:
    """A framework's own GPU kernels, outside any vendor library (frameworks.yaml
    ``knowledge.gpu_kernels``): the kernel names that are its (``names``, a regular
    expression) and the library tag they get; one source compiled for several vendors
    gives one name, so the GPU's vendor picks the tag (``vendors``: vendor -> tag,
    ``tag`` for any other)."""

    names: str
    tag: str
    vendors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OpRule:
    """Which recorded ops of an imported profile are one call of ``primitive``
    (frameworks.yaml ``profile_ops``; tracer.importers.primitives says how each
    field is used). Names in the order the entry gives them."""

    primitive: str
    forward: tuple[str, ...]
    backward: tuple[str, ...] = ()
    top_only: tuple[str, ...] = ()  # the primitive only when no op is around them
    inside_other: tuple[str, ...] = ()  # ops that make the same inner op another primitive
    ranks: tuple[int, ...] = ()  # the input ranks it has, where the file records shapes


@dataclass(frozen=True)
class EnvHeader:
    """The recording environment a Kineto file's header may hold
    (``metadata.system.<key>``, as harnesses that call the framework's environment
    collector write it): the keys copied into a trace, under ``prefix.`` in its
    ``gpu_software``, and the key that is the framework's version."""

    key: str
    keep: tuple[str, ...]
    prefix: str
    version: str = ""


@dataclass(frozen=True)
class TimelineDialect:
    """How a framework's operator timeline (chrome-trace JSON, format op-timeline)
    records an operator. ``category`` and ``phases`` mark its op events (``B``/``E``:
    begin and end pairs; ``X``: complete events with a duration), and finding one is
    how a file is told to be this framework's; ``devices`` matches the names of the
    processes that are a device (group ``device``, the context; optional group
    ``lane``, a GPU stream); ``backward`` is searched in the op's node name
    (``node_arg``), else its op name, to mark a backward op."""

    category: str
    phases: tuple[str, ...]
    devices: str
    backward: str
    op_arg: str = ""  # the args key that names the op ("": the event's own name)
    node_arg: str = ""  # the args key that names the graph node


@dataclass(frozen=True)
class ProfileVocab:
    """What a framework's files of one profile format call things (frameworks.yaml
    ``profile_vocab.FORMAT``), handed to the format's reader with its ``profile_ops``,
    so that the readers name no framework. Each reader uses the fields its format has."""

    #: what wrote the files, as messages and provenance name it ("torch.profiler")
    producer: str = ""
    #: what the files' records are called, where that is not the producer ("tensorflow_stats")
    records: str = ""
    #: the framework_version its traces say (the files record none)
    version: str = "unknown"
    #: the module run with the framework's own python to read a file only it can read
    #: (``python -m MODULE IN OUT``, exit status tracer.contract.Exit): a probe-side module
    reader: str = ""
    #: name endings it gives its files, dropped from a trace's variant ("mxnet-profile")
    suffixes: tuple[str, ...] = ()
    #: added to the provenance note of every trace from such a file
    note: str = ""
    env_header: EnvHeader | None = None
    timeline: TimelineDialect | None = None


@dataclass(frozen=True)
class Aarch64Spec:
    """The framework on an emulated aarch64 CPU (frameworks.yaml ``aarch64``): the
    requirements its own aarch64 wheels install (tracer.emulation builds the
    environment), and the CPU models a survey emulates."""

    requirements: tuple[str, ...]
    cpus: tuple[str, ...]
    #: the framework's variants a survey also runs there (the default always runs):
    #: a switch whose default differs on ARM (TensorFlow's oneDNN) must be run both ways
    variants: tuple[str, ...] = ()
    #: requirements published only as sdists: built on the host into pure-Python
    #: wheels, with the ``build`` requirements (tracer/emulation/wheels.py)
    sdists: tuple[str, ...] = ()
    build: tuple[str, ...] = ()
    #: why the framework cannot run on aarch64 at all (no aarch64 wheel): a survey
    #: marks each case on each CPU as a gap with this reason, never a silent absence
    unavailable: str = ""
    #: the primitives the default survey emulates, where not all (JAX: XLA compiles
    #: each pass under emulation); `dltrace survey --arm-all` runs every primitive
    primitives: tuple[str, ...] = ()
    #: the examples the default survey leaves out there (JAX's MobileNetV2 compiles past
    #: the probe's time-out under emulation); `--arm-all` runs them too
    skip_examples: tuple[str, ...] = ()
    #: untimed steps between the cold call and the recorded warm ones: nothing is timed
    #: under emulation, so the cold call is the warm-up (a step of ResNet-50 is 17 s under
    #: QEMU), unless the warm trees show a second call's own work (JAX's: 1)
    warmup: int = 0


@dataclass(frozen=True)
class Framework:
    name: str
    import_name: str
    version: str
    probe: str
    install: tuple[InstallStep, ...]
    devices: dict[str, str]
    variants: dict[str, Variant]
    source_roots: tuple[str, ...]
    apis: tuple[str, ...]
    knowledge: FrameworkKnowledge
    #: the models (contract.MODELS) its probe runs a training step of (make_model_case)
    models: tuple[str, ...] = ()
    #: profiler files recorded elsewhere (real GPUs) that every survey of it imports
    imported: tuple[Path, ...] = ()
    #: folders of dltrace's own GPU-path traces recorded on GPU machines, that every
    #: survey of it sets its CPU path against
    recorded: tuple[Path, ...] = ()
    #: modules the set-up runs in its environment (``python -m MODULE``) to build what its
    #: probe needs there (TensorFlow's stand-in device: a library compiled against the wheel)
    builds: tuple[str, ...] = ()
    #: the profiler file formats its files are imported from (contract.PROFILE_FORMATS),
    #: in the order they are tried: ``dltrace import --framework`` and ``imported``
    profiles: tuple[str, ...] = ()
    #: format -> which recorded ops are which primitive (frameworks.yaml ``profile_ops``)
    profile_ops: dict[str, tuple[OpRule, ...]] = field(default_factory=dict)
    #: format -> what its files call things (frameworks.yaml ``profile_vocab``)
    profile_vocab: dict[str, ProfileVocab] = field(default_factory=dict)
    aarch64: Aarch64Spec | None = None
    env: dict[str, str] = field(default_factory=dict)
    native: NativeSpec = field(default_factory=NativeSpec)
    #: the framework's GPU build (frameworks.yaml ``gpu_build``), installed in an
    #: environment of its own only to read what it registers for GPUs (never traced)
    gpu_build: tuple[InstallStep, ...] = ()
    #: the evidence class its probe's gpu_evidence derives (frameworks.yaml ``gpu_evidence``;
    #: "" when it derives none), and whether only the GPU build can derive it
    gpu_evidence: str = ""
    gpu_evidence_needs_build: bool = False
    #: what the examples need beyond the framework (frameworks.yaml ``extras``: name ->
    #: an install step), installed into its environment by the set-up or on first use
    extras: dict[str, InstallStep] = field(default_factory=dict)
    #: real models from its own model zoo, run as workloads (frameworks.yaml ``examples``)
    examples: dict[str, Example] = field(default_factory=dict)

    def extras_for(self, file: str) -> tuple[str, ...]:
        """The extras the example at ``file`` (an absolute path) declares; () for any other file."""
        for ex in self.examples.values():
            if str(ex.path.resolve()) == str(Path(file).resolve()):
                return ex.extras
        return ()


@dataclass(frozen=True)
class GpuEvidenceSpec:
    """frameworks.yaml ``gpu_evidence``, read into Framework's two fields."""

    evidence: str
    needs_build: bool = False


def gpu_build_env(fw: Framework) -> Framework | None:
    """``fw`` as its GPU build's environment (name ``NAME-gpu-build``, the
    ``gpu_build`` install steps), which `dltrace env setup NAME-gpu-build` builds and
    `dltrace derive` reads; None when the registry declares no GPU build."""
    if not fw.gpu_build:
        return None
    return dataclasses.replace(fw, name=fw.name + GPU_BUILD, install=fw.gpu_build, aarch64=None, imported=(),
                               recorded=(), builds=())  # never traced: its probe needs nothing built
