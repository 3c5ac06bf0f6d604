"""The contract between dltrace and a probe process, and the vocabulary both share.

dltrace runs each probe in its framework's own environment (a subprocess); the two
sides talk only through a request file (:class:`ProbeRequest`, written by
tracer.runner, read by tracer.collect.harness), the trace files the probe writes,
and its exit status (:class:`Exit`). Everything both sides must agree on is here,
once: the layers, passes and phases, the primitives with their rank, shapes and
parameters, the native-capture defaults, and what a probe module provides
(:class:`Probe`).

Stdlib only: imported by the tool and inside every framework environment.
"""

from __future__ import annotations

import atexit
import ctypes
import enum
import functools
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ContextManager, NoReturn, Protocol, runtime_checkable

#: Trace layers: Python frames, the framework's own op records, what the vendor
#: libraries report they ran (oneDNN, MKL), sampled native stacks.
LAYERS = ("python", "op", "library", "native")
#: Layers recorded on every call: the diff compares them exactly. The rest are sampled.
EXACT_LAYERS = ("python", "op", "library")
#: What an emulated CPU records: the exact layers (py-spy cannot attach under QEMU).
EMULATED_LAYERS = EXACT_LAYERS
PASSES = ("forward", "backward")
PHASES = ("cold", "warm")
APIS = ("functional", "layer")
#: Devices a probe runs on: the CPU, a GPU, and a stand-in backend (a new device played
#: on this CPU by the framework's own extension point, e.g. torch's PrivateUse1: what
#: reaches it is what a new backend must implement; never a GPU, never timed as one).
STANDIN = "standin"
DEVICES = ("cpu", "gpu", STANDIN)
#: The library tag of an op-layer frame that reached the stand-in backend: the kernels
#: a new backend must provide (the diff names a split into them a device dispatch).
STANDIN_LIB = "standin backend"
#: The thread-count variables of the libraries the frameworks compute with (OpenMP, MKL,
#: OpenBLAS, TensorFlow's intra-op pool, MXNet's operators): a survey running several
#: probes at once on a few cores gives each its share (tracer.survey.run), since two
#: OpenMP pools spinning on the same two cores make a 1 ms step take 400 ms; a trace
#: says which it ran under (its meta ``thread_env``).
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
              "MXNET_OMP_MAX_THREADS")
#: The element types a probe computes in, float32 first (the default), and the variable
#: a variant sets to ask for another (frameworks.yaml: torch's and JAX's bf16 variants).
DTYPES = ("float32", "bfloat16", "float16")
DTYPE_ENV = "DLTRACE_DTYPE"
#: The frame module of an option a run-time library choice did not take for the
#: evidence's target (derived GPU evidence lists them beside the one taken): never a
#: kernel, never a path that ran.
CANDIDATE_MODULE = "candidate"
#: The frame module of a lowering rule (JAX's cuda/rocm rules): how an op reaches the
#: compiler, never a kernel.
LOWERING_MODULE_PREFIX = "jax.lowering."
#: What recorded a trace's Python layer (its meta ``collector.python``): the C core
#: (tracer/collect/ctrace/) or the pure-Python tracer it falls back to, with the
#: same tree. ``DLTRACE_COLLECTOR`` in a probe's environment picks one (default: C
#: where it can be built); see tracer/collect/collector.py.
COLLECTORS = ("c", "python")
#: What a request asks of the probe process: trace the cases, or derive their GPU
#: evidence (the probe's ``gpu_evidence`` hook, :class:`GpuEvidence`).
REQUEST_KINDS = ("trace", "gpu-evidence")
#: The suffix of a framework's GPU-build environment (frameworks.yaml ``gpu_build``):
#: ``tensorflow-gpu-build`` runs tensorflow's probe; its traces name ``tensorflow``.
GPU_BUILD = "-gpu-build"
#: The profiler file formats dltrace imports (tracer.importers reads each), named by a
#: framework's frameworks.yaml ``profiles`` in the order its files are tried.
PROFILE_FORMATS = {
    "kineto": "a Kineto chrome-trace JSON, plain or gzip (torch.profiler's export)",
    "xplane": "an XPlane protobuf (.xplane.pb: the XLA profiler's file)",
    "nvprof": "an nvprof or Nsight SQLite database",
    "op-stats": "an op-type statistics protobuf (XProf's TfStatsDatabase: TensorBoard's tensorflow_stats)",
    "op-timeline": "a framework profiler's chrome-trace JSON of operator records",
}


# ----------------------------------------------------------------------------- primitives


@dataclass(frozen=True)
class Primitive:
    """A basic DNN primitive every probe implements.

    ``shape`` is the default input (small: the framework's dispatch is what is
    traced); ``kernel_shape`` is where a survey samples native stacks: at the default
    shapes the kernels are a few percent of a step (TensorFlow's conv kernel: 3 of 85
    samples), at these they are a visible share everywhere. Layout is logical NCHW
    (rank 4) or NxF (rank 2) unless ``layout`` says otherwise; a probe converts where
    its framework wants another. ``family``: ``cnn`` (the nine of the CNNs the project
    began with) or ``transformer`` (what the models teams port today add: the emulated
    CPUs run these only when asked, ``--arm-all``). ``passes``: an optimizer step has
    no backward (its forward is the update)."""

    name: str
    shape: tuple[int, ...]
    kernel_shape: tuple[int, ...]
    family: str = "cnn"
    passes: tuple[str, ...] = PASSES
    layout_name: str = ""
    #: "float" (the input is data, its gradient computed), "ids" (integer token ids:
    #: no gradient; the backward computes the parameters' only)
    input_kind: str = "float"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def layout(self) -> str:
        return self.layout_name or ("NxF" if self.rank == 2 else "NxCxHxW")


_IMAGE, _FEATURES = (2, 3, 8, 8), (4, 16)
_IMAGE_K, _FEATURES_K = (8, 16, 64, 64), (64, 4096)
PRIMITIVES: dict[str, Primitive] = {p.name: p for p in (
    Primitive("dense", _FEATURES, (256, 1024)),
    Primitive("conv2d", _IMAGE, _IMAGE_K),
    Primitive("relu", _FEATURES, _FEATURES_K),
    Primitive("sigmoid", _FEATURES, _FEATURES_K),
    Primitive("tanh", _FEATURES, _FEATURES_K),
    Primitive("softmax", _FEATURES, _FEATURES_K),
    Primitive("maxpool2d", _IMAGE, _IMAGE_K),
    Primitive("avgpool2d", _IMAGE, _IMAGE_K),
    Primitive("batchnorm", _IMAGE, _IMAGE_K),
    # what a transformer adds (tracer.contract.MODELS' transformer block uses each)
    Primitive("layernorm", _FEATURES, _FEATURES_K, "transformer"),
    Primitive("gelu", _FEATURES, _FEATURES_K, "transformer"),
    Primitive("attention", (2, 4, 8, 8), (4, 8, 256, 64), "transformer", layout_name="BxHxLxD"),
    Primitive("embedding", (4, 16), (256, 1024), "transformer", layout_name="NxT (token ids)", input_kind="ids"),
    Primitive("crossentropy", _FEATURES, (256, 4096), "transformer"),
    Primitive("adam", _FEATURES, (1024, 1024), "transformer", passes=("forward",)),
)}
#: Primitives that take any rank (elementwise, or one update per element)
ACTIVATIONS = ("relu", "sigmoid", "tanh", "softmax", "gelu")
ANY_RANK = (*ACTIVATIONS, "adam")
FAMILIES = ("cnn", "transformer")
#: The CNN family: what the emulated CPUs and the library and compilation switches run by default
CNN_PRIMITIVES = tuple(p for p, prim in PRIMITIVES.items() if prim.family == "cnn")

#: Parameters every probe uses, so that all frameworks compute the same numbers.
CONV_OUT, CONV_K = 4, 3  # output channels, kernel size (stride 1, padding 1)
DENSE_OUT = 8
POOL_K = 2  # pooling window and stride
BN_EPS = 1e-5  # torch's default
BN_MOMENTUM = 0.9  # the running statistics keep 90% (torch's momentum=0.1)
LN_EPS = 1e-5  # layer norm over the last axis, with a scale and a shift (torch's default epsilon)
#: gelu is the exact form, x * Phi(x) with the normal CDF through erf (torch's and
#: TensorFlow's default; JAX's jax.nn.gelu defaults to the tanh approximation, so its
#: probe asks for approximate=False). Attention: softmax(q k^T / sqrt(D)) v over
#: B x H x L x D, no mask, no dropout: q is the input, k and v are parameters.
#: Embedding: a VOCAB x DIM table looked up by integer ids in [0, VOCAB).
EMBED_VOCAB, EMBED_DIM = 64, 8
#: Cross-entropy: softmax cross-entropy of N x F logits against integer class labels,
#: averaged over the batch (a scalar). Adam: one update of an N x F parameter from a
#: fixed gradient, bias-corrected, each call one more step (torch's defaults).
ADAM: dict[str, Any] = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8)


def check_shape(primitive: str, shape: tuple[int, ...]) -> str | None:
    """Why ``shape`` does not fit ``primitive`` (wrong rank), or None. Activations
    take any rank; a model takes its own input's rank."""
    if primitive in MODELS:
        want = MODELS[primitive].shape
        if len(shape) != len(want):
            return (f"{primitive} needs a {len(want)}-d input like {'x'.join(map(str, want))}, "
                    f"got {'x'.join(map(str, shape))}")
        if len(want) == 4 and tuple(shape[1:]) != want[1:]:  # its dense layers are sized for its images
            return (f"{primitive} takes {'x'.join(map(str, want[1:]))} images (its dense layers are sized for "
                    f"them), got {'x'.join(map(str, shape[1:]))}")
        return None
    p = PRIMITIVES[primitive]
    if primitive in ANY_RANK or len(shape) == p.rank:
        return None
    return f"{primitive} needs a {p.rank}-d shape ({p.layout}), got {'x'.join(map(str, shape))}"


def output_shape(primitive: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape (logical NCHW), known without running the primitive, so that
    the backward seed can be made before the first call and the traced cold run
    really is the first call."""
    if primitive == "dense":
        return (shape[0], DENSE_OUT)
    if primitive == "conv2d":  # padding k//2, stride 1
        return (shape[0], CONV_OUT, shape[2], shape[3])
    if primitive in ("maxpool2d", "avgpool2d"):  # window = stride, no padding
        return (shape[0], shape[1], shape[2] // POOL_K, shape[3] // POOL_K)
    if primitive == "embedding":
        return (*shape, EMBED_DIM)
    if primitive == "crossentropy":  # the batch's mean loss
        return ()
    return tuple(shape)


# ----------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Model:
    """A network whose training step a probe runs as one case, beside the primitives:
    a porting team brings up a workload, not a primitive. ``forward`` is the network
    and its loss; ``backward`` is the gradients and the optimizer's update, so that the
    two passes together are one training step. ``apis``: the levels it is written at
    (``functional``: the framework's lowest usable level, its tensor ops;
    ``layer``: its layer or Keras level). ``shape``: the input batch (logical NCHW
    images, or batch x tokens of token ids), small: the dispatch is what is traced."""

    name: str
    title: str
    shape: tuple[int, ...]
    apis: tuple[str, ...]
    loss: str
    optimizer: str
    layers: tuple[str, ...]


#: Every probe builds the same networks from these numbers.
CLASSES = 10
LENET: dict[str, Any] = dict(conv1=6, conv2=16, k=5, fc1=120, fc2=84, lr=0.01)  # conv1 padded by 2 (28x28 input)
CIFAR: dict[str, Any] = dict(conv1=50, conv2=100, k=3, fc=512, drop_conv=0.25, drop_fc=0.5, lr=0.01, momentum=0.9)
TRANSFORMER: dict[str, Any] = dict(vocab=64, embed=32, heads=4, mlp=64, lr=1e-3)
MODELS: dict[str, Model] = {m.name: m for m in (
    Model("lenet", "LeNet-5", (8, 1, 28, 28), ("functional", "layer"), "softmax cross-entropy", "SGD",
          ("conv2d 6@5x5 (padding 2)", "relu", "maxpool2d", "conv2d 16@5x5", "relu", "maxpool2d", "flatten",
           "dense 120", "relu", "dense 84", "relu", "dense 10")),
    Model("cifar", "CIFAR-10 Rosetta CNN", (4, 3, 32, 32), ("layer",), "softmax cross-entropy",
          "SGD with momentum 0.9",
          ("conv2d 50@3x3 same", "relu", "conv2d 50@3x3 same", "relu", "maxpool2d", "dropout 0.25",
           "conv2d 100@3x3 same", "relu", "conv2d 100@3x3 same", "relu", "maxpool2d", "dropout 0.25", "flatten",
           "dense 512", "relu", "dropout 0.5", "dense 10")),
    Model("transformer", "Transformer encoder block", (2, 16), ("layer",), "softmax cross-entropy (next token)",
          "Adam",
          ("embedding 64x32 + learned positions", "layer norm", "multi-head attention (4 heads)", "residual",
           "layer norm", "dense 64", "gelu", "dense 32", "residual", "layer norm", "dense 64 (vocabulary)")),
)}
#: What a case names: one of the primitives or one of the models.
WORKLOADS = (*PRIMITIVES, *MODELS)


def workload_passes(workload: str) -> tuple[str, ...]:
    """The passes a case of ``workload`` has: both, except an optimizer step's (its forward is the update)."""
    return PRIMITIVES[workload].passes if workload in PRIMITIVES else PASSES


# ----------------------------------------------------------------------------- the user's own workload

#: The function dltrace calls in a workload file unless ``FILE.py:FUNCTION`` names another.
WORKLOAD_FUNCTION = "workload"
#: The API level a user's workload is recorded at: it is the user's own code, at whatever
#: level it is written (a torchvision model, a Keras application...).
USER_API = "user"
#: A workload's name (the file's stem, or ``--name``): what its traces, pages and files are called.
_WORKLOAD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


class WorkloadError(ValueError):
    """A workload reference that cannot name a workload (one line)."""


@dataclass(frozen=True)
class UserWorkload:
    """A porting team's own training step: ``function`` in the Python file ``file``,
    called in the framework's environment with the device to use and returning the
    step's two passes (``forward() -> loss``, ``backward(loss)``: the gradients and the
    optimizer's update), optionally the parameters, or one callable for the whole step
    (docs/workloads.md). ``name`` is what its cases are called, never a primitive's or a
    built-in model's name."""

    name: str
    file: str  # absolute
    function: str = WORKLOAD_FUNCTION

    @property
    def ref(self) -> str:
        return f"{self.file}:{self.function}"

    @classmethod
    def parse(cls, text: str, name: str | None = None, base: str = "") -> "UserWorkload":
        """``FILE.py[:FUNCTION]`` (relative to ``base``, else the working folder) ->
        the workload; a WorkloadError names what is wrong. The file is only named here,
        not read: it is the probe process that imports it."""
        import os

        path, function = text, WORKLOAD_FUNCTION
        if ":" in text and text.rsplit(":", 1)[0].endswith(".py"):
            path, function = text.rsplit(":", 1)
        if not path.endswith(".py"):
            raise WorkloadError(f"workload {text!r}: give a Python file, FILE.py or FILE.py:FUNCTION")
        if not function.isidentifier():
            raise WorkloadError(f"workload {text!r}: {function!r} is not a Python function name")
        full = os.path.abspath(os.path.join(base or os.getcwd(), path))
        stem = os.path.splitext(os.path.basename(full))[0]
        chosen = name if name is not None else (stem if function == WORKLOAD_FUNCTION else f"{stem}-{function}")
        if not _WORKLOAD_NAME.fullmatch(chosen):
            raise WorkloadError(f"workload name {chosen!r}: letters, digits, '_' and '-' only, a letter first, at "
                                "most 64 (rename the file or give --name)")
        if chosen in WORKLOADS or chosen.lower() in {w.lower() for w in WORKLOADS}:
            raise WorkloadError(f"workload name {chosen!r} is a built-in primitive's or model's (rename the file "
                                "or give --name)")
        return cls(chosen, full, function)

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> "UserWorkload | None":
        if not doc:
            return None
        return cls(str(doc["name"]), str(doc["file"]), str(doc.get("function") or WORKLOAD_FUNCTION))


def default_shape(workload: str) -> tuple[int, ...]:
    """The input a case of ``workload`` (a primitive or a model) gets unless asked otherwise."""
    return MODELS[workload].shape if workload in MODELS else PRIMITIVES[workload].shape


# ----------------------------------------------------------------------------- the request


class Exit(enum.IntEnum):
    """The exit status of every process dltrace starts or is: the command itself, the
    probe process, the readers run in framework environments. Anything else non-zero
    is a failure whose reason is in its stderr; a negative status is the signal that
    killed it."""

    OK = 0  # ran (a probe's case that failed is written as CASE.error next to its trace path)
    ERROR = 1  # failed; the reason is one line on stderr
    USAGE = 2  # the command line asked for something that does not exist (click's convention)
    NO_DEVICE = 3  # the requested device is not available (message on stderr)
    IMPORT = 4  # the framework, probe or reader's library could not be imported (message on stderr)
    NOT_ITS_KIND = 5  # a reader was given a file that is not of the kind it reads (reason on stderr)
    INTERRUPTED = 130  # Ctrl-C or SIGTERM: 128 + SIGINT, as shells report it
    BROKEN_PIPE = 141  # the reader of standard output went away: 128 + SIGPIPE


def leave(status: int) -> NoReturn:
    """End a process that runs in a framework's environment (a probe, a skeleton's
    check) with ``status``: its exit handlers run and its output is flushed, as
    ``sys.exit`` would, but the interpreter is not torn down.

    Everything it owes dltrace is written by then; the teardown only risks a crash that
    is the framework's. torch 2.13 stashes the Python context of every backward in the
    thread-local state its autograd device threads copy (torch/autograd/graph.py,
    ``_engine_run_backward``); a device thread (a PrivateUse1 backend's, as the stand-in's)
    may drop its last copy after the main thread has begun finalizing, and its decref
    then kills the process with SIGABRT ("terminate called without an active exception")
    after a run that passed: 1 in 60 runs of the stand-in's conv2d check, 7 in 80 on a
    loaded machine (pytorch/pytorch#182083 and #180701 discuss the same stash)."""
    atexit._run_exitfuncs()  # the workload's and the framework's own (each one's error is printed)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced by a workload
            pass
    flush_c_stdio()  # a library's last lines
    os._exit(status)


def flush_c_stdio() -> None:
    """Flush C's stdio buffers (``fflush(NULL)``): what the C libraries printed is in
    its file descriptors then (the library layer reads their log between two of these)."""
    try:
        _libc().fflush(None)
    except (OSError, AttributeError):
        pass


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


@dataclass(frozen=True)
class NativeRequest:
    """How native stacks are sampled (py-spy): ``rate`` samples/s, ``seconds`` per
    pass, ``idle`` keeps samples of a waiting thread, ``prime`` runs the loops
    unattributed first, until py-spy has loaded the symbols they reach. The
    defaults here are the defaults everywhere (frameworks.yaml may override them)."""

    pyspy: str = ""
    rate: int = 100
    seconds: float = 1.0
    idle: bool = False
    prime: bool = True


@dataclass(frozen=True)
class CaseRequest:
    primitive: str
    api: str
    shape: tuple[int, ...]
    passes: tuple[str, ...]
    layers: tuple[str, ...]
    out: str  # where the probe writes this case's trace (or OUT.error)
    #: the user's own workload (UserWorkload.to_json), when ``primitive`` names one
    workload: dict[str, str] | None = None


@dataclass(frozen=True)
class ProbeRequest:
    """Everything the probe process needs: which framework and probe to import, the
    device and variant, and the cases to trace."""

    framework: str
    import_name: str
    probe: str
    device: str
    device_select: str  # the string the probe passes to its framework ("cuda", "/GPU:0")
    variant: str
    variant_set: dict[str, Any]
    variant_env: dict[str, str]
    source_roots: tuple[str, ...]
    cases: tuple[CaseRequest, ...]
    warmup: int = 3
    command: str = ""
    native: NativeRequest | None = None  # None: no case asks for native stacks
    native_env: dict[str, str] = field(default_factory=dict)
    kind: str = "trace"  # one of REQUEST_KINDS
    #: how the step reaches the backend: "eager" (as written), "compiled" (under torch.compile:
    #: CompiledDoor) or "both" (eager, with a model's or workload's compiled record beside it)
    door: str = "eager"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ProbeRequest":
        doc = json.loads(text)
        native = doc.pop("native")
        cases = doc.pop("cases")
        return cls(**{**doc, "source_roots": tuple(doc["source_roots"]),
                      "native": NativeRequest(**native) if native is not None else None,
                      "cases": tuple(CaseRequest(**{**c, "shape": tuple(c["shape"]), "passes": tuple(c["passes"]),
                                                    "layers": tuple(c["layers"])}) for c in cases)})


#: Where a probe writes a case it could not trace instead of its trace: next to the
#: trace's path, with this suffix (a CaseError).
ERROR_SUFFIX = ".error"


@dataclass(frozen=True)
class CaseError:
    """A case the probe could not trace: the reason in one line, the traceback for the log."""

    error: str
    traceback: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "CaseError":
        """The record the probe wrote, or one saying it is unreadable (a probe killed
        while writing it, a file that is not one): never an exception."""
        try:
            doc = json.loads(text)
            return cls(str(doc["error"]), str(doc.get("traceback", "")))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return cls("the probe failed and its error record is unreadable")


#: The environment variable through which the runner tells a probe on an emulated CPU
#: which CPU it plays (an EmulatedCpu as JSON): its /proc/cpuinfo is the model's, and
#: the trace must say it was emulated.
EMULATED_ENV = "DLTRACE_EMULATED"


@dataclass(frozen=True)
class EmulatedCpu:
    """The emulated CPU a probe runs on, as the runner chose it; a trace's meta
    ``emulated`` is this record."""

    cpu: str  # the model's name in dltrace (a64fx, neoverse-n1...)
    model: str  # its description
    midr: str  # the MIDR_EL1 value QEMU reports, in hex
    qemu_cpu: str  # QEMU's -cpu specification
    by: str  # the emulator and how it ran
    emulated: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "EmulatedCpu":
        return cls(**json.loads(text))


# ----------------------------------------------------------------------------- what a probe provides


@runtime_checkable
class Probe(Protocol):
    """A probe module (tracer/probes/<framework>.py), imported only inside its framework's
    environment. ``device`` is the selector from frameworks.yaml; ``make_case``
    returns a tracer.probes.base.Case, ready to run."""

    def gpu_available(self) -> bool: ...

    def make_case(self, primitive: str, api: str, device: str, shape: tuple[int, ...]) -> Any: ...


@runtime_checkable
class ModelProbe(Protocol):
    """A probe module that also runs the models (:data:`MODELS`): ``make_model_case``
    returns a tracer.probes.base.Case whose ``forward`` is the network and its loss and
    whose ``backward`` is the gradients and the optimizer's update. Its ``info`` says
    what the framework chose by default (``defaults``: layout, weight initialisation,
    threads...) and what it lacks (``built_from_primitives``: a layer the framework has
    no API for, built here from its primitives). A probe without it has no models: each
    model case is a gap saying so."""

    def make_model_case(self, model: str, api: str, device: str, shape: tuple[int, ...]) -> Any: ...


@runtime_checkable
class WorkloadProbe(Protocol):
    """A probe module that runs a user's own workload (:class:`UserWorkload`):
    ``workload_case(build, device)`` calls ``build(dev)`` with its framework's own
    device object for the selector ``device`` (torch: a ``torch.device``; TensorFlow: a
    device string; JAX: a ``jax.Device``; Chainer: a ``chainer`` device; MXNet: a
    ``Context``), under whatever makes that device the default, and returns the
    tracer.probes.base.Case ``build`` made, its passes run there, with ``sync`` and the
    facts its own cases record in ``info``. It may also have ``before_workload()``,
    called before the file is imported, for what the framework's own add-ons need
    here (torch's CPU build and PyPI's torchvision), returning what it did in words."""

    def workload_case(self, build: Callable[[Any], Any], device: str) -> Any: ...


@runtime_checkable
class DeviceCheck(Protocol):
    """A probe module with devices other than a GPU (a stand-in backend): whether
    ``device`` (the selector from frameworks.yaml) is there. Without it a non-CPU
    device is there when ``gpu_available()`` says so."""

    def device_available(self, device: str) -> bool: ...


@runtime_checkable
class DeviceInfo(Protocol):
    """A probe module that can name the accelerator a case ran on and the runtime its
    framework drives it with, so that a trace recorded on a GPU machine carries its own
    provenance (``meta.machine``: ``gpu``, ``gpu_runtime``): ``device_info(device)``
    returns {"gpu": ..., "runtime": ...}, strings, for the selector from frameworks.yaml."""

    def device_info(self, device: str) -> dict[str, str]: ...


#: The doors a backend reaches a framework by: eager (each op dispatched to it) and
#: compiled (torch.compile hands its backend graphs; docs/standin.md).
DOORS = ("eager", "compiled")


@runtime_checkable
class CompiledDoor(Protocol):
    """A probe module whose framework has a compiled door beside its eager one (torch:
    ``torch.compile``): ``compile_case(case, passes)`` makes the case's passes run
    compiled from then on, with a backend that records the graphs it is handed into
    ``case.info["compiled"]`` (the trace's meta)."""

    def compile_case(self, case: Any, passes: tuple[str, ...]) -> None: ...


@runtime_checkable
class DispatchTable(Protocol):
    """A probe module that can say, from its framework's own tables, what each op a
    step reached needs from a backend: ``dispatch_table(op names)`` returns a plain,
    JSON-able dict (kept in the trace's meta as ``dispatch``)."""

    def dispatch_table(self, ops: list[str]) -> dict[str, Any]: ...


@runtime_checkable
class OpRecorder(Protocol):
    """A probe module that also records its framework's own op-level view of a step
    (torch.profiler, TF's profiler...): ``run()`` is exactly the step the Python layer
    traces; it returns a tracer.probes.base.OpRecord."""

    def record_ops(self, case: Any, pass_: str, run: Callable[[], Any]) -> Any: ...


@runtime_checkable
class OpHooks(Protocol):
    """A probe module that can call back as each op its framework runs returns (torch: a
    dispatch mode, below autograd), so that the library layer's calls can be told apart
    per op: ``op_hooks(after)`` is a context manager under which ``after(op name)`` is
    called once each op has run. What a port must replace is said per op of a model."""

    def op_hooks(self, after: Callable[[str], None]) -> ContextManager[None]: ...


@runtime_checkable
class LibraryVerbose(Protocol):
    """A probe module that can turn its vendor libraries' verbose logs on and off at run
    time (torch: oneDNN's and MKL's): ``library_verbose(on)``. The logs are then on for the
    library layer's step only, and no other timed step pays for writing them."""

    def library_verbose(self, on: bool) -> None: ...


@runtime_checkable
class GpuEvidence(Protocol):
    """A probe module that can say, without a GPU, what its framework's GPU path runs
    for a step: ``gpu_evidence(case, pass_, run)`` (``run()`` is the step, as for
    :class:`OpRecorder`, to learn what it reaches) returns a plain dict::

        {"evidence": one of tracer.evidence_classes.DERIVED_EVIDENCE, "provenance": {"read": what was read, ...},
         "ops": [{"name": op, "module": ..., "lib": "", "children": [implementation
                  nodes, same keys, lib = the library: cuDNN, cuBLAS, CuPy, XLA...]}],
         "backend": {"key": what a new backend registers as,
                     "ops": {op: {"must": bool, "why": str}}},
         "info": {...}}

    The harness (tracer.collect.gpu_evidence) makes it a trace with device "gpu"."""

    def gpu_evidence(self, case: Any, pass_: str, run: Callable[[], Any]) -> dict[str, Any]: ...
