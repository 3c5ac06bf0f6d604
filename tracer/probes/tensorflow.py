"""TensorFlow probe: tf.nn in eager mode (functional) and keras 3 layers (layer); the
models' training steps are in tracer/probes/tensorflow_models.py.

Both run eagerly under a fresh, non-persistent tf.GradientTape. The 4-d primitives
(conv2d, the pools, batchnorm) run in NHWC, the layout TF's CPU kernels need: the
seeded NCHW input is transposed once here, before anything is timed or traced.
Parameters are tf.Variables (keras layers own theirs), as in training; the input is
a constant tensor that the tape is told to watch.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import tensorflow as tf

from tracer.contract import PRIMITIVES, STANDIN_LIB
from tracer.probes import base, tensorflow_models, tensorflow_standin, tensorflow_transformer

if TYPE_CHECKING:  # the annotations only (tensorflow is Any to mypy: not installed where it runs)
    from tensorflow.core.framework.kernel_def_pb2 import KernelDef

_NHWC = ("conv2d", "maxpool2d", "avgpool2d", "batchnorm")
#: the primitives tracer/probes/tensorflow_transformer.py builds (adam: its own case)
_TRANSFORMER = tuple(p.name for p in PRIMITIVES.values() if p.family == "transformer" and p.name != "adam")


def gpu_available() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


#: The device selector of the stand-in backend (frameworks.yaml devices: standin).
STANDIN = "standin"
#: The library tag of an op-layer frame a graph placed on the host on the stand-in's run
#: (no kernel on the device, or pinned there: tracer.probes.tensorflow_placement).
HOST_LIB = "host: placed by the graph"


def device_available(device: str) -> bool:
    """The stand-in (``--device standin``) is there where its library builds and loads
    (tracer.probes.tensorflow_standin); a GPU where TensorFlow sees one."""
    return device == STANDIN or gpu_available()


def _placed(device: str, build: Callable[[str], base.Case]) -> base.Case:
    """``build(device string)``'s case; on the stand-in, the PluggableDevice loaded first
    and what putting the inputs and parameters there reached kept as its setup."""
    if device != STANDIN:
        return build(device)
    placed = tensorflow_standin.install()
    tensorflow_standin.RECORDER.clear()  # this case's own
    tensorflow_standin.RECORDER.start()
    try:
        case = build(placed)
    finally:
        setup = tensorflow_standin.RECORDER.stop()
        tensorflow_standin.RECORDER.placed("setup")
        setup = tensorflow_standin.RECORDER.of_pass("setup", setup)
    case.info["standin"] = tensorflow_standin.describe()
    case.info["standin"]["reached"]["setup"] = setup
    case.info["standin"]["host"] = tensorflow_standin.RECORDER.host_of()
    case.info["device_string"] = placed
    forward, backward = case.forward, case.backward

    def said(run: Callable[..., Any], pass_: str) -> Callable[..., Any]:
        def guarded(*args: Any) -> Any:
            try:
                return tensorflow_standin.RECORDER.during(pass_, run, *args)
            except tf.errors.InvalidArgumentError as exc:
                op = tensorflow_standin.unplaced(str(exc))
                if op is None:
                    raise
                raise base.ProbeError(tensorflow_standin.no_kernel(op)) from None
        return guarded

    case.forward, case.backward = said(forward, "forward"), said(backward, "backward")
    return case


def _bn_scale(c: int) -> np.ndarray:
    return base.array((c,), 3) * 0.1 + 1


def _functional(primitive: str, x: tf.Tensor) -> tuple[Callable[[], tf.Tensor], list[tf.Variable]]:
    """(run, params): ``run()`` applies the tf.nn primitive to ``x``; the parameters are
    the seeded float32 data in ``x``'s dtype (TensorFlow's own cast)."""
    c = int(x.shape[-1])
    var: Callable[[np.ndarray], tf.Variable] = lambda a: tf.Variable(tf.cast(a, x.dtype))  # noqa: E731
    if primitive == "dense":
        w, b = var(base.dense_weight(c).T), var(base.bias(base.DENSE_OUT))  # (in, out)
        return (lambda: tf.nn.bias_add(tf.matmul(x, w), b)), [w, b]
    if primitive == "conv2d":
        w = var(base.conv_weight(c).transpose(2, 3, 1, 0))  # OIHW -> HWIO
        b = var(base.bias(base.CONV_OUT))
        return (lambda: tf.nn.bias_add(tf.nn.conv2d(x, w, strides=1, padding="SAME"), b)), [w, b]
    if primitive == "relu":
        return (lambda: tf.nn.relu(x)), []
    if primitive == "sigmoid":
        return (lambda: tf.nn.sigmoid(x)), []
    if primitive == "tanh":
        return (lambda: tf.nn.tanh(x)), []
    if primitive == "softmax":
        return (lambda: tf.nn.softmax(x, axis=-1)), []
    if primitive == "maxpool2d":
        return (lambda: tf.nn.max_pool2d(x, base.POOL_K, base.POOL_K, "VALID")), []
    if primitive == "avgpool2d":
        return (lambda: tf.nn.avg_pool2d(x, base.POOL_K, base.POOL_K, "VALID")), []
    if primitive == "batchnorm":
        g, b = var(_bn_scale(c)), var(base.bias(c))

        def run() -> tf.Tensor:  # training mode: normalises with the batch statistics (biased variance)
            mean, variance = tf.nn.moments(x, axes=[0, 1, 2])
            return tf.nn.batch_normalization(x, mean, variance, b, g, base.BN_EPS)

        return run, [g, b]
    raise base.ProbeError(f"unknown primitive {primitive}")


def _layer(primitive: str, x: tf.Tensor) -> tuple[Callable[[], tf.Tensor], list[tf.keras.Variable]]:
    """(run, params): ``run()`` calls a built keras layer on ``x`` in training mode, the
    layer's dtype policy ``x``'s dtype (its variables and its computation)."""
    L = tf.keras.layers
    c = int(x.shape[-1])
    dt = x.dtype.name
    if primitive == "dense":
        layer = L.Dense(base.DENSE_OUT, dtype=dt)
        weights = [base.dense_weight(c).T, base.bias(base.DENSE_OUT)]
    elif primitive == "conv2d":
        layer = L.Conv2D(base.CONV_OUT, base.CONV_K, strides=1, padding="same", data_format="channels_last", dtype=dt)
        weights = [base.conv_weight(c).transpose(2, 3, 1, 0), base.bias(base.CONV_OUT)]
    elif primitive == "batchnorm":
        # momentum 0.9 is torch's 0.1; the running averages are not what is compared.
        layer = L.BatchNormalization(axis=-1, momentum=base.BN_MOMENTUM, epsilon=base.BN_EPS, dtype=dt)
        weights = None  # gamma, beta, moving mean, moving variance
    else:
        layer = {
            "relu": lambda: L.ReLU(dtype=dt),
            "sigmoid": lambda: L.Activation("sigmoid", dtype=dt),
            "tanh": lambda: L.Activation("tanh", dtype=dt),
            "softmax": lambda: L.Softmax(axis=-1, dtype=dt),
            "maxpool2d": lambda: L.MaxPooling2D(base.POOL_K, data_format="channels_last", dtype=dt),
            "avgpool2d": lambda: L.AveragePooling2D(base.POOL_K, data_format="channels_last", dtype=dt),
        }[primitive]()
        weights = []
    layer.build(tuple(x.shape))
    if primitive == "batchnorm":
        weights = [_bn_scale(c), base.bias(c), np.zeros(c, np.float32), np.ones(c, np.float32)]
    if weights:
        layer.set_weights(weights)
    return (lambda: layer(x, training=True)), list(layer.trainable_variables)


def _adam_case(api: str, device: str, shape: tuple[int, ...], info: dict[str, Any]) -> base.Case:
    """One Adam update per forward (each call one more step); no backward: the update is
    the forward (tracer.contract: adam's passes)."""
    with tf.device(device):
        p = tf.Variable(tf.cast(base.array(shape), getattr(tf, base.dtype())))
        build = tensorflow_transformer.adam_functional if api == "functional" else tensorflow_transformer.adam_layer
        update, more = build(p, shape)
    if base.dtype() == "bfloat16":
        more["numerics"] = ("bfloat16 scalars: ResourceApplyAdam's are of the parameter's type T and keras casts its "
                            "beta powers to it; beta2 = 0.999 rounds to 1.0, so the step reaches the bfloat16 kernels "
                            "but computes no Adam update (keras: none at all; the fused kernel: v stays 0 and its "
                            "second step divides by epsilon)")

    def forward() -> tf.Variable:
        with tf.device(device):
            return update()

    def backward(state: object) -> None:
        raise base.ProbeError("an optimizer step has no backward pass: its forward is the update")

    return base.Case(forward=forward, backward=backward, info={**info, **more}, private={"param": p})


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """The primitive's case: ``forward`` runs it under a fresh tape and returns (tape,
    output); ``backward`` the gradients of the input (never of token ids) and the
    parameters, seeded with ones (``case.private["sources"]``: what they are of)."""
    return _placed(device, lambda placed: _make_case(primitive, api, placed, shape))


def _make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    if api not in ("functional", "layer"):
        raise base.ProbeError(f"tensorflow has no api {api!r} (functional, layer)")
    dtype = getattr(tf, base.dtype())
    nhwc = primitive in _NHWC
    layout = PRIMITIVES[primitive].layout_name or ("NCHW" if len(shape) == 4 else "NF")
    info: dict[str, Any] = {"layout": "NHWC" if nhwc else layout,
                            "onednn_enabled": _onednn_enabled(), "dtype": base.dtype()}
    if primitive == "adam":
        return _adam_case(api, device, shape, info)
    ids = PRIMITIVES[primitive].input_kind == "ids"
    data = base.token_ids(shape) if ids else base.array(shape)
    if nhwc:
        data = np.ascontiguousarray(data.transpose(0, 2, 3, 1))
    with tf.device(device):
        x = tf.constant(data) if ids else tf.cast(data, dtype)
        if primitive in _TRANSFORMER:
            build = tensorflow_transformer.functional if api == "functional" else tensorflow_transformer.layer
            run, params, more = build(primitive, x, shape, dtype)
            info.update(more)
        else:
            run, params = (_functional if api == "functional" else _layer)(primitive, x)
        out = base.output_shape(primitive, shape)
        grad = tf.ones(base.nhwc(out) if nhwc else out, dtype)
    sources = [*([] if ids else [x]), *params]

    def forward() -> tuple[tf.GradientTape, tf.Tensor]:
        with tf.device(device):
            with tf.GradientTape() as tape:
                if not ids:
                    tape.watch(x)
                y = run()
        return tape, y

    def backward(state: tuple[tf.GradientTape, tf.Tensor]) -> list[tf.Tensor]:
        tape, y = state
        with tf.device(device):
            grads: list[tf.Tensor] = tape.gradient(y, sources, output_gradients=grad)  # tensorflow is Any to mypy
            return grads

    return base.Case(forward=forward, backward=backward, info=info, private={"sources": sources})


def workload_case(build: Callable[[str], base.Case], device: str) -> base.Case:
    """A user's own workload (tracer.contract.WorkloadProbe): ``build`` gets the device
    string ("/CPU:0", "/GPU:0") and runs, as its passes do, under ``tf.device`` of it;
    the seeds are set first, so that two runs start from the same weights."""
    def built(placed: str) -> base.Case:
        tf.keras.utils.set_random_seed(0)
        with tf.device(placed):
            case = build(placed)
        case.info.update({"onednn_enabled": _onednn_enabled(), "device_string": placed})
        return base.within(case, lambda: tf.device(placed))
    return _placed(device, built)


def make_model_case(model: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """A model's training step (tracer.contract.ModelProbe), eager under a tape as the
    primitives are: tf.nn and the update by hand (functional), keras (layer)."""
    base.check_model(model, api, shape)
    return _placed(device, lambda placed: tensorflow_models.training_step(model, api, placed, shape,
                                                                          onednn=_onednn_enabled()))


#: Eager-runtime bookkeeping in the profiler's host trace, not part of the op path.
_TF_NOISE = ("TFE_DeleteTensorHandle", "ValidateInputTypeAndPlacement", "EagerCopyToDevice", "EagerExecute",
             "EagerKernelExecute", "TFE_Py_FastPathExecute_C", "ThreadpoolListener::Record", "convert_to_tensor")


def op_hooks(after: Callable[[str], None]) -> Any:
    """tracer.contract.OpHooks: ``after(op)`` as each eager op returns (TensorFlow's op
    callbacks, called once an eager op has run; a tf.function's graph runs as one call, its
    ops not told apart)."""
    from tensorflow.python.framework import op_callbacks

    @contextlib.contextmanager
    def hooked() -> Iterator[None]:
        def called(op_type: str, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
                   graph: Any = None) -> None:
            if graph is None:  # an eager op that ran (a graph's ops are only being built)
                after(op_type.decode() if isinstance(op_type, bytes) else str(op_type))

        op_callbacks.add_op_callback(called)
        try:
            yield
        finally:
            op_callbacks.remove_op_callback(called)

    return hooked()


def record_ops(case: base.Case, pass_: str, run: Callable[[], object]) -> base.OpRecord:
    """The ops TensorFlow's eager runtime executed, from the profiler's host trace
    (``EagerLocalExecute: Conv2D`` -> op Conv2D), with how each ran below it
    (``KernelAndDeviceFunc::Run``: as a single-op function; ``ParallelFor``: sharded
    over the intra-op pool). Device planes (GPU) add their kernels under the plane."""
    import glob
    import shutil
    import tempfile

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    standin = case.info.get("standin")
    logdir = tempfile.mkdtemp(prefix="dltrace-tfprof-")
    try:
        opts = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                        device_tracer_level=1)
        if standin is not None:
            tensorflow_standin.RECORDER.start()
        tf.profiler.experimental.start(logdir, opts)
        try:
            run()
        finally:
            tf.profiler.experimental.stop()
            if standin is not None:
                standin["reached"][pass_] = tensorflow_standin.RECORDER.of_pass(
                    pass_, tensorflow_standin.RECORDER.stop())
                standin["registrations"] = tensorflow_standin.RECORDER.registrations()
                standin["host"] = tensorflow_standin.RECORDER.host_of()
        space = xplane_pb2.XSpace()
        for path in glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True):
            with open(path, "rb") as fh:
                space.ParseFromString(fh.read())
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    host, devices = [], []
    # a graph's node the placer put on the host runs as "its/name:Op" on the executor's thread
    placed_on_host = set((standin or {}).get("host", {}).get(pass_, []))
    for plane in space.planes:
        meta = plane.event_metadata
        on_host = plane.name.startswith("/host:")
        events = []
        for line in plane.lines:
            for ev in line.events:
                name = meta[ev.metadata_id].name
                if on_host and (name in _TF_NOISE or not name):
                    continue
                op = name.split(": ", 1)[1] if name.startswith("EagerLocalExecute: ") else name
                module = "tensorflow" if op != name or not on_host else "tensorflow.eager"
                start = line.timestamp_ns * 1000 + ev.offset_ps
                lib = STANDIN_LIB if standin is not None and op != name and op in standin["reached"][pass_] else \
                    HOST_LIB if on_host and name.rpartition(":")[2] in placed_on_host else ""
                events.append(base.OpEvent(op, start, start + ev.duration_ps, module, lib, line.id))
        if on_host:
            host.extend(events)
        elif events:
            devices.append(base.op_node(plane.name, "tensorflow", children=base.nest(events, 1e-3)))
    info = {"onednn_enabled": _onednn_enabled()}
    return base.OpRecord(base.nest(host, scale_ns=1e-3) + devices, "tf.profiler (host trace)", info)


def _onednn_enabled() -> bool | None:
    """Whether TensorFlow's oneDNN ops are on in this process: by default only on CPUs
    with AVX512-VNNI/BF16/AMX-class features, whatever TF_ENABLE_ONEDNN_OPTS does not force."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except Exception:  # noqa: BLE001 - a private module: absent in some builds
        return None


def dispatch_table(ops: list[str]) -> dict[str, Any]:
    """What TensorFlow's kernel registry says of the ops a step ran: the device types
    each has a kernel for (a new device, a PluggableDevice, must register its own
    unless a DEFAULT kernel serves any device), and the oneDNN op it is rewritten to
    when oneDNN is on (``Conv2D`` -> ``_MklNativeConv2D``)."""

    from tensorflow.python.framework import kernels

    def registered(op: str) -> list[KernelDef]:
        try:
            return list(kernels.get_registered_kernels_for_op(op).kernel)
        except Exception:  # noqa: BLE001 - a record name that is no op
            return []

    computes = getattr(tf, base.dtype()).as_datatype_enum  # DT_FLOAT, or DT_BFLOAT16 in the bf16 variant

    def any_device_float(kernel: KernelDef) -> bool:
        """A DEFAULT kernel serves any device, but most are for int32 shapes in host
        memory: only one whose type constraint admits the probe's float type computes its data."""
        if kernel.device_type != "DEFAULT":
            return False
        for c in kernel.constraint:
            if c.name in ("T", "dtype") and c.allowed_values.list.type and computes not in c.allowed_values.list.type:
                return False
        return True

    out = {}
    for op in dict.fromkeys(ops):
        if not re.fullmatch(r"_?[A-Z]\w*", op):
            continue
        found = registered(op)
        if not found:
            continue
        types = sorted({k.device_type for k in found})
        declared = {t: op for t in types}
        for prefix in ("_MklNative", "_Mkl"):
            if registered(prefix + op):
                declared["oneDNN"] = prefix + op
                break
        out[op] = {"kernels": types, "new_backend": any(map(any_device_float, found)), "declared": declared}
    return {"source": "TensorFlow's kernel registry (tensorflow.python.framework.kernels)",
            "new_backend_key": "PluggableDevice", "ops": out}


#: The library a GPU kernel of these ops hands its work to, and the header of TensorFlow's
#: own source, shipped in the wheel, that says so (the expression must be found in it at
#: read time, else the library is not named): op -> (library, header, what it shows).
#: Element-wise ops run on Eigen's GPU device. Pooling is left out: its GPU kernel takes
#: cuDNN in NCHW and TensorFlow's own kernels in NHWC, a choice the headers do not settle.
_GPU_LIBRARIES: tuple[tuple[str, str, str, str], ...] = (
    (r"Conv2D\w*|Conv3D\w*|DepthwiseConv2dNative\w*", "cuDNN", "conv_ops_gpu.h", r"se::dnn::|DnnSupport"),
    (r"MatMul|BatchMatMul\w*", "cuBLAS", "matmul_op_impl.h", r"BlasLt|se::blas::"),
    (r"FusedBatchNorm\w*", "cuDNN", "fused_batch_norm_op.h", r"[Ii]n training we rely on cuDNN"),
    (r"(?:Add|AddV2|Sub|Mul|RealDiv|Div|Maximum|Minimum|Neg|Exp|Log|Tanh|Sigmoid|Relu|Rsqrt|Sqrt|Square|"
     r"SquaredDifference|Erf|Erfc|Pow|Select\w*|"
     r"(?:Relu|Relu6|Elu|Selu|LeakyRelu|Sigmoid|Tanh|Rsqrt|Sqrt|Reciprocal|Softplus|Softsign)Grad)", "Eigen",
     "cwise_ops_gpu_common.cu.h",
     r"Eigen::GpuDevice"),
)


@functools.lru_cache(maxsize=None)
def _gpu_library(op: str) -> tuple[str, str]:
    """(the library ``op``'s GPU kernel calls, the header that says so) where TensorFlow's
    shipped source shows it (:data:`_GPU_LIBRARIES`), else ("", ""). Read once per op and
    probe process: every case of a survey asks for the ops it reached."""
    import os

    headers = os.path.join(os.path.dirname(tf.__file__), "include", "tensorflow", "core", "kernels")
    for ops, lib, header, shows in _GPU_LIBRARIES:
        if not re.fullmatch(ops, op):
            continue
        try:
            with open(os.path.join(headers, header), errors="replace") as fh:
                if re.search(shows, fh.read()):
                    return lib, f"tensorflow/core/kernels/{header}"
        except OSError:
            return "", ""
        return "", ""
    return "", ""


def _gpu_kernel_docs(op: str, kernels: list[KernelDef]) -> list[dict[str, str]]:
    """``op``'s GPU registrations (KernelDefs) as implementation nodes, as the registry
    states them: those that differ only in their type T are one node listing the types;
    other constraints, host-memory arguments and labels stay apart."""
    groups: dict[str, list[str]] = {}
    for kernel in kernels:
        cons, types = [], []
        for c in kernel.constraint:
            names = [tf.dtypes.as_dtype(t).name for t in c.allowed_values.list.type]
            if c.name == "T":
                types += names
            else:
                cons.append(f"{c.name}={'|'.join(names)}" if names else c.name)
        rest = "".join(f", {c}" for c in sorted(cons))
        if kernel.host_memory_arg:
            rest += f", host_memory={'|'.join(kernel.host_memory_arg)}"
        if kernel.label:
            rest += f", label={kernel.label}"
        groups.setdefault(rest, []).extend(types)
    lib, header = _gpu_library(op)
    calls = f" -> {lib} ({header})" if lib else ""
    return [{"name": f"GPU {op} [T={'|'.join(sorted(set(types))) or 'any'}{rest}]{calls}", "module": "tensorflow.GPU",
             "lib": lib or "TensorFlow GPU kernel"} for rest, types in groups.items()]


def gpu_evidence(case: base.Case, pass_: str, run: Callable[[], object]) -> dict[str, Any]:
    """What the GPU build's kernel registry holds for every op the step ran (its
    host trace, as record_ops sees it on this CPU): each op's GPU kernels with their
    constraints. Only the full ``tensorflow`` wheel registers them (tensorflow-cpu
    has CPU kernels only); none of it needs CUDA to be read."""
    from tensorflow.python.framework import kernels

    rec = record_ops(case, pass_, run)
    reached = [n.frame.name for top in rec.ops for _, n in top.walk() if n.frame.kind == "op"]
    table = dispatch_table(reached)["ops"]
    ops, needs = [], {}
    for op, row in table.items():
        gpu = [k for k in kernels.get_registered_kernels_for_op(op).kernel if k.device_type == "GPU"]
        kids = _gpu_kernel_docs(op, gpu) or [{"name": "no GPU kernel registered", "module": "tensorflow.GPU"}]
        ops.append({"name": op, "module": "tensorflow", "children": kids})
        needs[op] = {"must": not row["new_backend"], "others": {"GPU": f"{len(gpu)} kernel(s)"} if gpu else {},
                     "free": "a DEFAULT kernel serves any device" if row["new_backend"] else ""}
    return {"evidence": "registered", "ops": ops,
            "provenance": {"read": f"tensorflow {tf.__version__} kernel registry "
                                   "(tensorflow.python.framework.kernels.get_registered_kernels_for_op); the library "
                                   "a GPU kernel calls from the wheel's own kernel headers (cuDNN, cuBLAS, Eigen)",
                           "build": "the full tensorflow wheel (GPU kernels registered; no CUDA library loaded)",
                           "reached": f"ops of the step on this CPU ({rec.source})"},
            "backend": {"key": "PluggableDevice", "ops": needs},
            "info": {"gpu_devices_visible": len(tf.config.list_physical_devices("GPU"))}}
