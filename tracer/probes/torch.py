"""PyTorch probe: torch.nn.functional (functional) and torch.nn modules (layer)."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from tracer.contract import CANDIDATE_MODULE, PRIMITIVES
from tracer.probes import base, torch_models

if TYPE_CHECKING:
    from tracer.trace import Node


def gpu_available() -> bool:
    available: bool = torch.cuda.is_available()  # torch is Any to mypy (not installed where it runs)
    return available


def device_info(device: str) -> dict[str, str]:
    """The card and the CUDA (or ROCm) runtime and cuDNN (MIOpen) this torch build drives it with."""
    dev = torch.device(device)
    hip = getattr(torch.version, "hip", None)
    runtime = f"ROCm {hip}" if hip else f"CUDA {torch.version.cuda}"
    dnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if dnn:
        runtime += f", {'MIOpen' if hip else 'cuDNN'} {dnn}"
    return {"gpu": str(torch.cuda.get_device_name(dev)), "runtime": runtime}


def _functional(primitive: str, x: torch.Tensor,
                dev: torch.device) -> tuple[Callable[[], torch.Tensor], list[torch.Tensor]]:
    c = x.shape[1] if x.dim() > 1 else 1
    dtype = getattr(torch, base.dtype())  # the float type (x is integer for the embedding's ids)
    param: Callable[[Any], torch.Tensor] = lambda a: torch.tensor(  # noqa: E731
        a, device=dev, dtype=dtype, requires_grad=True)
    if primitive == "dense":
        w, b = param(base.dense_weight(x.shape[1])), param(base.bias(base.DENSE_OUT))
        return (lambda: F.linear(x, w, b)), [w, b]
    if primitive == "conv2d":
        w, b = param(base.conv_weight(c)), param(base.bias(base.CONV_OUT))
        return (lambda: F.conv2d(x, w, b, stride=1, padding=1)), [w, b]
    if primitive == "relu":
        return (lambda: F.relu(x)), []
    if primitive == "sigmoid":
        return (lambda: torch.sigmoid(x)), []
    if primitive == "tanh":
        return (lambda: torch.tanh(x)), []
    if primitive == "softmax":
        return (lambda: F.softmax(x, dim=-1)), []
    if primitive == "maxpool2d":
        return (lambda: F.max_pool2d(x, base.POOL_K)), []
    if primitive == "avgpool2d":
        return (lambda: F.avg_pool2d(x, base.POOL_K)), []
    if primitive == "batchnorm":
        g, b = param(base.array((c,), 3) * 0.1 + 1), param(base.bias(c))
        mean, var = torch.zeros(c, device=dev, dtype=x.dtype), torch.ones(c, device=dev, dtype=x.dtype)
        return (lambda: F.batch_norm(x, mean, var, g, b, training=True)), [g, b]
    if primitive == "layernorm":
        f = x.shape[-1]
        g, b = param(base.ln_scale(f)), param(base.bias(f))
        return (lambda: F.layer_norm(x, (f,), g, b, eps=base.LN_EPS)), [g, b]
    if primitive == "gelu":
        return (lambda: F.gelu(x)), []  # approximate="none": the exact form, torch's default
    if primitive == "attention":
        k, v = (param(a) for a in base.attention_kv(tuple(x.shape)))
        return (lambda: F.scaled_dot_product_attention(x, k, v)), [k, v]
    if primitive == "embedding":
        table = param(base.embed_table())
        return (lambda: F.embedding(x, table)), [table]
    if primitive == "crossentropy":
        labels = _labels(x, dev)
        return (lambda: F.cross_entropy(x, labels)), []
    if primitive == "adam":
        return _adam_functional(x, dev), []
    raise base.ProbeError(f"unknown primitive {primitive}")


def _labels(x: torch.Tensor, dev: torch.device) -> torch.Tensor:
    return torch.tensor(base.class_labels(x.shape[0], x.shape[1]), device=dev)


def _adam_grad(x: torch.Tensor, dev: torch.device) -> torch.Tensor:
    return torch.tensor(base.adam_grad(tuple(x.shape)), device=dev, dtype=x.dtype)


def _adam_implementation(params: list[torch.Tensor]) -> str:
    """Which of its three implementations torch.optim.Adam takes by default for these
    parameters (the device decides: foreach on CUDA and a new backend, the for-loop on the CPU)."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    if fused:
        return "fused (torch._fused_adam_)"
    if foreach:
        return "foreach (torch.optim.adam._multi_tensor_adam: torch._foreach_* ops)"
    return "for-loop (torch.optim.adam._single_tensor_adam: one tensor at a time)"


def _adam_functional(p: torch.Tensor, dev: torch.device, foreach: bool | None = None) -> Callable[[], torch.Tensor]:
    """torch.optim.adam.adam, the functional update torch.optim.Adam calls, with the state
    the optimizer would keep (m and v zeros like p, the step a CPU scalar tensor) and the
    implementation left to torch's default (foreach=None, fused=None) unless ``foreach``."""
    from torch.optim.adam import adam

    g = _adam_grad(p, dev)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    step = torch.tensor(0.0)  # as Adam keeps it when neither capturable nor fused: on the host
    a = base.ADAM

    def run() -> torch.Tensor:
        with torch.no_grad():
            adam([p], [g], [m], [v], [], [step], foreach=foreach, fused=None, amsgrad=False, beta1=a["beta1"],
                 beta2=a["beta2"], lr=a["lr"], weight_decay=0.0, eps=a["eps"], maximize=False)
        return p

    return run


#: torch.optim.Adam's implementation is chosen in Python (_default_to_fused_or_foreach), by
#: the parameters' device: foreach on CUDA, the for-loop on the CPU; the registered reading
#: of an adam step runs the foreach update here (case.private["cuda_default"]) so that the
#: ops it maps to their CUDA kernels are the ones a GPU runs.
_ADAM_RULE = ("torch.optim.optimizer._default_to_fused_or_foreach: foreach (torch._foreach_* ops, "
              "_multi_tensor_adam) for CUDA parameters, the for-loop (_single_tensor_adam) on the CPU; fused "
              "(torch._fused_adam_) only when asked (fused=True)")


def _mha(x: torch.Tensor, dev: torch.device) -> tuple[Callable[[], torch.Tensor], list[torch.Tensor]]:
    """nn.MultiheadAttention computing exactly softmax(q k^T / sqrt(D)) v over the heads:
    identity in and out projections and zero biases, frozen (the primitive's gradients are
    q's, k's and v's), B x H x L x D laid out as its batch_first B x L x (H*D)."""
    b, h, L, d = x.shape
    dtype = getattr(torch, base.dtype())
    m = nn.MultiheadAttention(h * d, h, dropout=0.0, bias=True, batch_first=True)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.eye(h * d).repeat(3, 1))
        m.out_proj.weight.copy_(torch.eye(h * d))
        m.in_proj_bias.zero_()
        m.out_proj.bias.zero_()
    m = m.to(dev, dtype).train()
    m.requires_grad_(False)
    k, v = (torch.tensor(a, device=dev, dtype=dtype, requires_grad=True) for a in base.attention_kv(tuple(x.shape)))

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2).reshape(b, L, h * d)

    def run() -> torch.Tensor:
        y, _ = m(flat(x), flat(k), flat(v), need_weights=False)
        return y.reshape(b, L, h, d).transpose(1, 2)

    return run, [k, v]


def _adam_layer(p: torch.Tensor, dev: torch.device) -> Callable[[], torch.Tensor]:
    """torch.optim.Adam over the one parameter, its gradient the fixed one: each call one step."""
    a = base.ADAM
    p.grad = _adam_grad(p, dev)
    opt = torch.optim.Adam([p], lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])

    def run() -> torch.Tensor:
        opt.step()
        return p

    return run


def _layer(primitive: str, x: torch.Tensor,
           dev: torch.device) -> tuple[Callable[[], torch.Tensor], list[torch.Tensor]]:
    c = x.shape[1] if x.dim() > 1 else 1
    dtype = getattr(torch, base.dtype())
    if primitive == "attention":
        return _mha(x, dev)
    if primitive == "adam":
        return _adam_layer(x, dev), []
    if primitive == "crossentropy":
        loss, labels = nn.CrossEntropyLoss(), _labels(x, dev)
        return (lambda: loss(x, labels)), []
    if primitive == "dense":
        m = nn.Linear(x.shape[1], base.DENSE_OUT)
        weights = {"weight": base.dense_weight(x.shape[1]), "bias": base.bias(base.DENSE_OUT)}
    elif primitive == "conv2d":
        m = nn.Conv2d(c, base.CONV_OUT, base.CONV_K, stride=1, padding=1)
        weights = {"weight": base.conv_weight(c), "bias": base.bias(base.CONV_OUT)}
    elif primitive == "batchnorm":
        m = nn.BatchNorm2d(c)
        weights = {}
    elif primitive == "layernorm":
        m = nn.LayerNorm(x.shape[-1], eps=base.LN_EPS)
        weights = {"weight": base.ln_scale(x.shape[-1]), "bias": base.bias(x.shape[-1])}
    elif primitive == "embedding":
        m = nn.Embedding(base.EMBED_VOCAB, base.EMBED_DIM)
        weights = {"weight": base.embed_table()}
    else:
        m = {
            "relu": nn.ReLU,
            "sigmoid": nn.Sigmoid,
            "tanh": nn.Tanh,
            "softmax": lambda: nn.Softmax(dim=-1),
            "maxpool2d": lambda: nn.MaxPool2d(base.POOL_K),
            "avgpool2d": lambda: nn.AvgPool2d(base.POOL_K),
            "gelu": nn.GELU,  # approximate="none": the exact form, torch's default
        }[primitive]()
        weights = {}
    with torch.no_grad():
        for name, value in weights.items():
            getattr(m, name).copy_(torch.from_numpy(value))
    m = m.to(dev, dtype).train()
    return (lambda: m(x)), list(m.parameters())


def device_available(device: str) -> bool:
    """The stand-in backend (``--device standin``) is always there: it is registered
    by this process; a GPU is there when torch sees one."""
    return device == STANDIN or gpu_available()


#: The device selector of the stand-in backend (frameworks.yaml devices: standin).
STANDIN = "standin"


def _device(device: str) -> torch.device:
    if device == STANDIN:
        from tracer.probes import torch_standin

        return torch_standin.install()
    return torch.device(device)


def _made_on(device: str, build: Callable[[torch.device], base.Case]) -> base.Case:
    """``build(dev)``'s case on ``device``, with the facts every torch case records and,
    on the stand-in backend, the ops that putting its inputs and parameters there took."""
    dev = _device(device)
    if device == STANDIN:
        from tracer.probes import torch_standin

        torch_standin.RECORDER.start()
    try:
        case = build(dev)
    finally:
        setup = torch_standin.RECORDER.stop() if device == STANDIN else []
    case.sync = torch.cuda.synchronize if dev.type == "cuda" else base._noop
    case.info.update({"device_type": dev.type, "dtype": base.dtype(),
                      "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
                      "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
                      # the vector ISA torch's own CPU kernels dispatched to (DEFAULT, AVX2, AVX512, SVE256...)
                      "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "blas": _build_blas()})
    if device == STANDIN:
        case.info["standin"] = torch_standin.describe()
        case.info["standin"]["reached"]["setup"] = setup
    return case


def _build_blas() -> str:
    """The BLAS this torch build links (its BLAS_INFO: mkl on x86, nvpl in PyPI's aarch64
    2.13 build, open in its 2.9 one): where oneDNN takes no call (a small addmm, an mm in
    a backward), torch's own gemm hands the matrix product to it; OpenBLAS says nothing
    of which calls it ran, so the build's own word is what the audit can show."""
    found = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return found.group(1) if found else ""


def _defaults(primitive: str, api: str, leaves: list[torch.Tensor]) -> dict[str, Any]:
    """What torch chose by default for a primitive where it has a choice (case.info["defaults"])."""
    if primitive == "gelu":
        return {"gelu": "exact (approximate='none', torch's default)"}
    if primitive == "adam":
        return {"adam": _adam_implementation(leaves[:1]),
                "call": "torch.optim.adam.adam (the functional update torch.optim.Adam calls), foreach=None, "
                        "fused=None" if api == "functional" else "torch.optim.Adam (defaults: foreach=None, "
                                                                 "fused=None)"}
    if primitive == "attention":
        return {"attention": "F.scaled_dot_product_attention (its backend chosen at run time)" if api == "functional"
                else "nn.MultiheadAttention, batch_first, need_weights=False (it calls "
                     "F.scaled_dot_product_attention), identity projections and zero biases, frozen"}
    return {}


def primitive_step(primitive: str, api: str, dev: torch.device, shape: tuple[int, ...]) -> base.Case:
    """The primitive's case on ``dev``: ``forward`` its output, ``backward`` the gradients
    of its input and parameters (``case.private["leaves"]``: what a check compares).
    The embedding's input is integer ids (no gradient); an optimizer step (adam) has no
    backward: its forward is the update, one more step each call."""
    dtype = getattr(torch, base.dtype())
    if PRIMITIVES[primitive].input_kind == "ids":
        x = torch.tensor(base.token_ids(shape), device=dev)
    else:
        x = torch.tensor(base.array(shape), device=dev, dtype=dtype, requires_grad=True)
    run, params = (_functional if api == "functional" else _layer)(primitive, x, dev)
    leaves = [x, *params]
    info = {"defaults": _defaults(primitive, api, leaves)} if primitive in ("gelu", "adam", "attention") else {}
    if "backward" not in PRIMITIVES[primitive].passes:
        def no_backward(y: torch.Tensor) -> None:
            raise base.ProbeError("an optimizer step has no backward pass: its forward is the update")

        # the same update as torch.optim.Adam's default resolves it on CUDA (a copy of the state)
        cuda_default = _adam_functional(x.detach().clone(), dev, foreach=True)
        return base.Case(forward=run, backward=no_backward, info=info,
                         private={"leaves": leaves, "cuda_default": cuda_default})
    grad = torch.ones(base.output_shape(primitive, shape), device=dev, dtype=dtype)

    def backward(y: torch.Tensor) -> None:
        for t in leaves:  # fresh gradients each run, as a training step would have
            t.grad = None
        y.backward(grad)

    return base.Case(forward=run, backward=backward, info=info, private={"leaves": leaves})


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    return _made_on(device, lambda dev: primitive_step(primitive, api, dev, shape))


#: torchvision's C operators, declared here where its compiled extension cannot load (the
#: schema its C++ would register): kept alive for the process.
_TORCHVISION_DECLARED: list[Any] = []


def before_workload() -> str:
    """Let a workload import torchvision on torch's CPU build. PyPI's torchvision wheel
    carries its C operators (nms, roi_align...) built against the CUDA build
    (libtorch_cuda.so), so on the CPU build they do not load, and torchvision 0.28 then
    fails at import (its fake kernels for ``torchvision::nms`` and ``qnms`` are registered
    unconditionally). Its models need none of those operators: declaring those
    operators' schemas, as its C++ would, makes the import succeed; calling a detection operator still
    fails, saying torchvision's C operators are not loaded. What was done, in words ("" when nothing)."""
    import importlib.util

    if torch.version.cuda is not None or _TORCHVISION_DECLARED or importlib.util.find_spec("torchvision") is None:
        return ""
    lib = torch.library.Library("torchvision", "FRAGMENT")
    try:
        for op in _TORCHVISION_UNGUARDED:
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    except RuntimeError:  # declared already (its extension loaded after all)
        return ""
    _TORCHVISION_DECLARED.append(lib)
    return (f"torchvision's C operators not loaded (its wheel is built for the CUDA build); "
            f"{', '.join(_TORCHVISION_UNGUARDED)} declared")


#: The operators whose fake kernels torchvision 0.28 registers whether its C operators loaded or not.
_TORCHVISION_UNGUARDED = ("nms", "qnms")


def workload_case(build: Callable[[torch.device], base.Case], device: str) -> base.Case:
    """A user's own workload (tracer.contract.WorkloadProbe): ``build`` gets the
    ``torch.device``; torch's generator is seeded first, so that two runs (the CPU and a
    backend under check) start from the same weights. On the stand-in backend, what
    reaches it is what a port must implement to train that network."""
    def seeded(dev: torch.device) -> base.Case:
        torch.manual_seed(0)
        return build(dev)

    case = _made_on(device, seeded)
    if device == STANDIN:
        _first_step_reaches(case)
    return case


def _first_step_reaches(case: base.Case) -> None:
    """Keep what each pass's first call sends to the stand-in (``standin.first_step``):
    an optimizer makes its state on its first update (Adam: ``zeros_like`` > ``zero_``),
    which the warm step the op layer records never does, and a backend must implement
    it all the same (a skeleton without it fails its check's first step)."""
    from tracer.probes import torch_standin

    first: dict[str, list[str]] = case.info["standin"].setdefault("first_step", {})

    def once(pass_: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            if pass_ in first or torch_standin.RECORDER.active:
                return inner(*args)
            torch_standin.RECORDER.start()
            try:
                return inner(*args)
            finally:
                first[pass_] = torch_standin.RECORDER.stop()
        return run

    case.forward, case.backward = once("forward", case.forward), once("backward", case.backward)


def make_model_case(model: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    """A model's training step (tracer.contract.ModelProbe): on the stand-in backend,
    what reaches it is what a port must implement to train that network."""
    base.check_model(model, api, shape)
    return _made_on(device, lambda dev: torch_models.training_step(model, api, dev, shape))



#: Records of the profiler's own work, not the step's: CUPTI's buffer requests (Kineto
#: hangs the kernels that completed meanwhile under them a second time).
_PROFILER_OWN = frozenset({"Activity Buffer Request"})


def op_hooks(after: Callable[[str], None]) -> Any:
    """tracer.contract.OpHooks: ``after(op)`` as each ATen op returns (tracer.probes.torch_op_hooks)."""
    from tracer.probes import torch_op_hooks

    return torch_op_hooks.op_hooks(after)


def record_ops(case: base.Case, pass_: str, run: Callable[[], object]) -> base.OpRecord:
    """The dispatcher's op hierarchy from torch.profiler (CPU events nested by time),
    which names the backend op that was chosen: aten::_convolution >
    aten::mkldnn_convolution (oneDNN) or > aten::thnn_conv2d > aten::_slow_conv2d_forward.
    On CUDA the kernels each op launched hang under it (cudnn, cublas...)."""
    # torch.autograd.profiler.profile is the Kineto profiler torch.profiler.profile
    # wraps, with the same events: the wrapper's start asks hasattr(torch, "_inductor"),
    # which imports the compiler stack (1.5 s and many modules a probe never uses).
    from torch.autograd.profiler import profile

    cuda = torch.cuda.is_available() and case.info.get("device_type") == "cuda"
    standin = case.info.get("standin")
    if standin is not None:
        from tracer.probes import torch_standin

        torch_standin.RECORDER.start()
    try:
        with profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True, record_shapes=False,
                     with_stack=False) as prof:
            run()
            case.sync()
    finally:
        if standin is not None:
            standin["reached"][pass_] = torch_standin.RECORDER.stop()
    if standin is not None:
        record = torch_standin.op_record(prof.function_events, standin["reached"][pass_])
        # and what only the pass's first call reached (a user's workload: tracer.probes.torch._first_step_reaches)
        warm = standin["reached"][pass_]
        standin["reached"][pass_] = [*warm, *(op for op in standin.get("first_step", {}).get(pass_, [])
                                              if op not in warm)]
        return record
    events = []
    for e in prof.function_events:
        if e.device_type.name != "CPU" or e.name in _PROFILER_OWN:
            continue
        kernels = [base.op_node(k.name, "cuda", "", 1, int(k.duration * 1000)) for k in getattr(e, "kernels", [])]
        module = "aten" if e.name.startswith("aten::") else "torch"
        events.append(base.OpEvent(e.name, e.time_range.start, e.time_range.end, module, "", e.thread, kernels))
    return base.OpRecord(base.nest(events, scale_ns=1000.0), "torch.profiler")


def library_verbose(on: bool) -> None:
    """oneDNN's and MKL's verbose logs on or off from now (the library layer's step only:
    tracer.collect.library.StdoutLog.switch); the variables that ask for them are read once."""
    torch._C._verbose.mkldnn_set_verbose(1 if on else 0)
    torch._C._verbose.mkl_set_verbose(1 if on else 0)


#: Dispatch keys asked about: the backends torch ships, the key an out-of-tree backend
#: registers under (PrivateUse1), and the composite kernels every backend gets.
_KEYS = ("CPU", "CUDA", "MPS", "XPU", "Meta", "PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
         "CompositeExplicitAutogradNonFunctional")


@functools.lru_cache(maxsize=1)
def _native_functions() -> dict[str, dict[str, Any]]:
    """torchgen's packaged native_functions.yaml: op name -> its declared dispatch and
    structured delegate (``addmm`` computes through ``addmm.out``). Read once per
    probe process: every case asks. libyaml's safe loader where PyYAML has it: the same
    entries in 0.15 s, where the pure-Python one took 1.0 s (6.5 s under QEMU)."""
    import os

    import torchgen
    import yaml

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    with open(path) as fh:
        entries = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    out = {}
    for e in entries:
        name = e["func"].split("(", 1)[0]
        dispatch = {}
        for keys, kernel in (e.get("dispatch") or {}).items():
            for key in str(keys).split(","):
                dispatch[key.strip()] = str(kernel)
        out[name] = {"dispatch": dispatch,
                     **({"delegate": e["structured_delegate"]} if e.get("structured_delegate") else {}),
                     # no device guard: the op only changes a tensor's metadata (a view), no kernel runs
                     **({"metadata_only": True} if e.get("device_guard") is False else {}),
                     # torchgen generates its CPU and CUDA kernels from a ufunc inner loop (no kernel name)
                     **({"ufunc": True} if e.get("ufunc_inner_loop") else {})}
    return out


def dispatch_table(ops: list[str]) -> dict[str, Any]:
    """What torch's own tables say of the aten ops a step reached: which dispatch keys
    have a kernel, whether a new backend registering under PrivateUse1 has one without
    writing it (a composite kernel), and which kernel each backend declares in
    native_functions.yaml (``native_batch_norm: CUDA: batch_norm_cuda``)."""
    declared = _native_functions()
    out = {}
    for op in dict.fromkeys(ops):
        if not op.startswith("aten::"):
            continue
        try:
            kernels = [k for k in _KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(op, k)]
            new_backend = bool(torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, "PrivateUse1"))
        except RuntimeError:  # a name the profiler records that is no operator
            continue
        entry = declared.get(op[len("aten::"):], {})
        row = {"kernels": kernels, "new_backend": new_backend, "declared": entry.get("dispatch", {}),
               **({"metadata_only": True} if entry.get("metadata_only") else {})}
        if "delegate" in entry:
            row["delegate"] = entry["delegate"]
            row["delegate_declared"] = declared.get(entry["delegate"], {}).get("dispatch", {})
        out[op] = row
    return {"source": "torch._C dispatch table; torchgen/packaged/ATen/native/native_functions.yaml",
            "new_backend_key": "PrivateUse1", "ops": out}


# ----------------------------------------------------------------------------- GPU evidence: registered

#: torch's own CUDA kernels' library tag (frameworks.yaml: torch's gpu_kernels tag), the
#: same in the registered reading as in a recorded or imported run
_OWN_CUDA = "PyTorch CUDA kernels"


#: at::native::_convolution's run-time choice (ConvBackend, from _select_conv_backend in
#: ATen's Convolution.cpp) -> the op it calls; convolution_backward switches on the same
#: enum. None of it is in native_functions.yaml: _convolution is a composite kernel.
_CONV_BACKENDS = {
    "Cudnn": ("aten::cudnn_convolution", "cuDNN"), "CudnnTranspose": ("aten::cudnn_convolution_transpose", "cuDNN"),
    "Miopen": ("aten::miopen_convolution", "MIOpen"),
    "MiopenDepthwise": ("aten::miopen_depthwise_convolution", "MIOpen"),
    "MiopenTranspose": ("aten::miopen_convolution_transpose", "MIOpen"),
    "CudaDepthwise2d": ("aten::_conv_depthwise2d", _OWN_CUDA),
    "SlowDilated2d": ("aten::slow_conv_dilated2d", _OWN_CUDA),
    "Slow2d": ("aten::thnn_conv2d", _OWN_CUDA), "Overrideable": ("aten::convolution_overrideable", "new backend"),
}


#: What _convolution / convolution_backward call on a device without a ConvBackend of its
#: own (PrivateUse1): the ops a new backend implements for convolution.
_OVERRIDEABLE = {"aten::_convolution": "aten::convolution_overrideable",
                 "aten::convolution_backward": "aten::convolution_backward_overrideable"}


def _cuda_lib(kernel: str) -> str:
    low = kernel.lower()
    if "cudnn" in low:
        return "cuDNN"
    if "miopen" in low:
        return "MIOpen"
    if any(k in low for k in ("addmm", "mm_out", "bmm", "gemm")):
        return "cuBLAS"
    return _OWN_CUDA


#: convolution_backward's call for each ConvBackend (its *_backward_stub or op).
_CONV_BACKWARD = {"Cudnn": "cudnn_convolution_backward_stub",
                  "CudnnTranspose": "cudnn_convolution_transpose_backward_stub",
                  "Miopen": "miopen_convolution_backward_stub",
                  "MiopenDepthwise": "miopen_depthwise_convolution_backward_stub",
                  "MiopenTranspose": "miopen_convolution_transpose_backward_stub",
                  "CudaDepthwise2d": "conv_depthwise2d_backward_stub",
                  "SlowDilated2d": "slow_conv_dilated2d_backward_stub",
                  "Slow2d": "aten::_slow_conv2d_backward", "Overrideable": "aten::convolution_backward_overrideable"}


def _conv_choice(op: str) -> list[dict[str, str]]:
    """The run-time choice _convolution (and convolution_backward) makes among backends:
    which ConvBackend names torch has and the op each calls, with its declared CUDA kernel."""
    declared = _native_functions()
    names = [m for m in dir(torch._C._ConvBackend) if not m.startswith("_") and m not in ("name", "value")]
    kids = []
    for backend, (target, lib) in _CONV_BACKENDS.items():
        if backend not in names:
            continue
        if op == "aten::convolution_backward":
            target = _CONV_BACKWARD[backend]
        cuda = declared.get(target.split("::")[-1].split(".")[0], {}).get("dispatch", {}).get("CUDA", "")
        kids.append({"name": f"ConvBackend.{backend} -> {target}" + (f" (CUDA: {cuda})" if cuda else ""),
                     "module": "at::native::_select_conv_backend", "lib": lib})
    return kids


#: The run-time library choices torch makes inside a composite kernel, which no dispatch
#: table holds, as it resolves them by default on an NVIDIA GPU (cuDNN built in and
#: ``torch.backends.cudnn.enabled``, the default): CPU op reached -> (what runs instead,
#: its library, the rule, the other candidates with where each is taken). From ATen's
#: Convolution.cpp (_select_conv_backend) and Normalization.cpp (_batch_norm_impl_index:
#: 1 cuDNN, 2 MIOpen, 0 native); the probe's convolution is 2-d, groups 1, not transposed,
#: float32, and its batch norm has weight, bias and a batch under cuDNN's limits.
_CUDNN_RULE_CONV = ("_select_conv_backend on a CUDA tensor with cuDNN enabled (the default), groups 1, "
                    "not transposed: ConvBackend.Cudnn")
_CUDNN_RULE_BN = ("_batch_norm_impl_index on a CUDA tensor with cuDNN enabled (the default), float32, "
                  "weight and bias given, eps >= cuDNN's minimum: impl index 1, cuDNN")


#: sdp::select_sdp_backend (ATen's transformers/cuda/sdp_utils.cpp), which
#: scaled_dot_product_attention calls on a CUDA tensor through _fused_sdp_choice_stub: the
#: first backend of the priority order whose checks pass. The order is flash,
#: memory-efficient, math, cuDNN, unless check_prefer_cudnn_attention holds (a cuDNN runtime
#: newer than 9.15.0 on sm90 / sm10x, as the CUDA wheels ship): then cuDNN first. On an H100
#: (sm90) the probe's attention (dense, no mask, no dropout, head dim 8) fails cuDNN's and
#: flash's dtype checks in float32 (both half and bfloat16 only, check_dtypes_low_precision)
#: and passes the memory-efficient kernel's (float32 on sm80+, head dim a multiple of 4); in
#: bfloat16 cuDNN takes it (flash where the runtime's cuDNN is 9.15.0 or older). Seen on an
#: H100 with torch 2.11.0+cu130 and cuDNN 9.19: float32 -> _scaled_dot_product_efficient_attention,
#: bfloat16 -> _scaled_dot_product_cudnn_attention, forward and backward, F and nn.MultiheadAttention.
#: SDPBackend -> (the forward op, the library, when it is taken).
_SDP_BACKENDS = {
    "efficient_attention": ("_scaled_dot_product_efficient_attention", _OWN_CUDA,
                            "float32 on sm80+ (the CUTLASS memory-efficient kernels built into ATen)"),
    "cudnn_attention": ("_scaled_dot_product_cudnn_attention", "cuDNN",
                        "half or bfloat16 on sm80-sm121, first where torch prefers cuDNN (its runtime newer than "
                        "9.15.0, on sm90/sm10x)"),
    "flash_attention": ("_scaled_dot_product_flash_attention", _OWN_CUDA,
                        "half or bfloat16 on sm80-sm121 (FlashAttention-2 built into ATen), first where cuDNN is "
                        "not preferred"),
    "math": ("_scaled_dot_product_attention_math", _OWN_CUDA,
             "where no fused kernel's checks pass: the composite math (matmul, softmax) in ATen ops"),
}
_SDP_RULE = ("sdp::select_sdp_backend on a CUDA tensor (sdp_utils.cpp, through _fused_sdp_choice_stub): the first "
             "of the priority order (flash, memory-efficient, math, cuDNN; cuDNN first where the runtime's cuDNN "
             "is newer than 9.15.0 on sm90/sm10x) whose checks pass; on an H100 float32 fails flash's and cuDNN's "
             "dtype checks (half and bfloat16 only): memory-efficient attention "
             "(_scaled_dot_product_efficient_attention); bfloat16: cuDNN attention "
             "(_scaled_dot_product_cudnn_attention), flash attention where cuDNN is 9.15.0 or older")


def _sdp_choice() -> str:
    """The SDPBackend select_sdp_backend takes on an H100 for the probe's attention in the
    probe's dtype (:data:`_SDP_RULE`)."""
    return "efficient_attention" if base.dtype() == "float32" else "cudnn_attention"


def _sdp_runtime_choice(op: str, cuda: Callable[[str], str]) -> tuple[str, list[dict[str, Any]]]:
    """The CPU's flash kernel (or its backward) -> the op SDPA's run-time choice takes on an
    NVIDIA GPU, its CUDA kernel, and the other backends as candidates."""
    backward = op.endswith("_backward")
    chosen = _sdp_choice()
    name, lib, _ = _SDP_BACKENDS[chosen]
    target = name + ("_backward" if backward else "")
    why = "sdp::select_sdp_backend"
    kids: list[dict[str, Any]] = [{"name": f"CUDA: {cuda(target)}", "module": why, "lib": lib}]
    others = []
    for backend, (other, _, when) in _SDP_BACKENDS.items():
        if backend == chosen:
            continue
        if backend == "math":  # a composite: the backward is autograd's through its ops
            others.append({"name": f"SDPBackend.{backend} -> aten::{other} ({when})", "module": CANDIDATE_MODULE})
            continue
        other += "_backward" if backward else ""
        others.append({"name": f"SDPBackend.{backend} -> aten::{other} (CUDA: {cuda(other)}; {when})",
                       "module": CANDIDATE_MODULE})
    kids.append({"name": "other candidates", "module": CANDIDATE_MODULE + "s", "children": others})
    return f"aten::{target}", kids


def _conv_candidates(op: str) -> list[dict[str, str]]:
    """The ConvBackends _select_conv_backend did not take on an NVIDIA GPU, each with the op it calls."""
    return [{"name": c["name"], "module": CANDIDATE_MODULE} for c in _conv_choice(op)
            if not c["name"].startswith("ConvBackend.Cudnn ")]


def _runtime_choice(op: str) -> tuple[str, list[dict[str, Any]]] | None:
    """A CPU op at which torch chooses a library at run time, as the CUDA build runs it on
    an NVIDIA GPU: (the op, its children: the op the choice takes with its CUDA kernel
    tagged with the library, what the choice adds, then the candidates not taken,
    untagged: never a kernel); None for any other op."""
    declared = _native_functions()

    def cuda(name: str) -> str:
        entry = declared.get(name, {})
        if "delegate" in entry:
            entry = declared.get(entry["delegate"], {})
        # an op whose CUDA code torchgen generates from a ufunc inner loop declares no kernel name
        return str(entry.get("dispatch", {}).get("CUDA", _UFUNC_KERNEL))

    def kernel(name: str, lib: str, why: str) -> dict[str, Any]:
        return {"name": f"CUDA: {cuda(name)}", "module": why, "lib": lib}

    def others(kids: list[dict[str, str]]) -> dict[str, Any]:
        return {"name": "other candidates", "module": CANDIDATE_MODULE + "s", "children": kids}

    if op in ("aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward"):
        return _sdp_runtime_choice(op, cuda)
    conv = "at::native::_select_conv_backend"
    if op == "aten::_convolution":
        return op, [{"name": "aten::cudnn_convolution", "module": "aten",
                     "children": [kernel("cudnn_convolution", "cuDNN", conv)]},
                    {"name": "aten::add_", "module": "aten",  # the bias: cuDNN's convolution takes none
                     "children": [kernel("add_.Tensor", _OWN_CUDA, "at::native::_convolution")]},
                    others(_conv_candidates(op))]
    if op == "aten::convolution_backward":
        return op, [{"name": "ConvBackend.Cudnn -> cudnn_convolution_backward_stub (grad input, grad weight)",
                     "module": conv, "lib": "cuDNN"},
                    {"name": "aten::sum", "module": "aten",  # grad bias, computed outside cuDNN
                     "children": [kernel("sum.IntList_out", _OWN_CUDA, "at::native::convolution_backward")]},
                    others(_conv_candidates(op))]
    bn = "at::native::_batch_norm_impl_index"
    if op == "aten::_batch_norm_impl_index":
        return op, [{"name": "aten::cudnn_batch_norm", "module": "aten",
                     "children": [kernel("cudnn_batch_norm", "cuDNN", bn)]},
                    others([{"name": f"impl index 0 -> aten::native_batch_norm (CUDA: {cuda('native_batch_norm')}; "
                                     "where cuDNN's conditions fail)", "module": CANDIDATE_MODULE},
                            {"name": f"impl index 2 -> aten::miopen_batch_norm (CUDA: {cuda('miopen_batch_norm')}; "
                                     "on ROCm)", "module": CANDIDATE_MODULE}])]
    if op == "aten::native_batch_norm_backward":  # the backward of the op the forward chose
        return "aten::cudnn_batch_norm_backward", [
            kernel("cudnn_batch_norm_backward", "cuDNN", bn),
            others([{"name": f"impl index 0 -> aten::native_batch_norm_backward "
                             f"(CUDA: {cuda('native_batch_norm_backward')}; where cuDNN's conditions fail)",
                     "module": CANDIDATE_MODULE},
                    {"name": f"impl index 2 -> aten::miopen_batch_norm_backward "
                             f"(CUDA: {cuda('miopen_batch_norm_backward')}; on ROCm)", "module": CANDIDATE_MODULE}])]
    return None


#: What a ufunc op's CUDA kernel is named in the reading (torchgen declares none).
_UFUNC_KERNEL = "ATen's generated ufunc kernel"


def _cuda_by_overload(op: str) -> dict[str, str]:
    """{overload: its CUDA kernel} of an op the profiler names without its overload
    (``aten::_foreach_add_``, ``aten::add_``) and native_functions.yaml declares only with
    one: each overload with a CUDA kernel of its own (a composite overload, such as
    ``add_.Scalar``, runs one of those); {} where an overload has neither."""
    declared = _native_functions()
    name = op.removeprefix("aten::")
    if name in declared:
        return {}
    out = {}
    for full, entry in declared.items():
        if full.split(".", 1)[0] != name:
            continue
        if "delegate" in entry:
            entry = declared.get(entry["delegate"], {})
        dispatch = entry.get("dispatch", {})
        kernel = dispatch.get("CUDA") or (_UFUNC_KERNEL if entry.get("ufunc") else None)
        if kernel:
            out[full] = str(kernel)
        elif not any(k.startswith("Composite") for k in dispatch):
            return {}
    return out


def _registered_tree(node: Node, table: dict[str, Any]) -> dict[str, Any] | None:
    """One CPU op of the step as the CUDA build would run it: a run-time library choice
    resolved for an NVIDIA GPU, an op with a CUDA kernel of its own (what the CPU kernel
    called beneath it is not reached), a composite op with the ops it runs beneath it
    (as on the CPU, so that the paths part only where the device decides)."""
    op = node.frame.name
    row = table.get(op)
    by_overload = _cuda_by_overload(op) if row is None and op.startswith("aten::") else {}
    if by_overload:  # no op of that name without an overload (the foreach ops): each overload's kernel
        return {"name": op, "module": "aten", "children": [
            {"name": "CUDA by overload: " + ", ".join(f"{o}: {k}" for o, k in by_overload.items()),
             "module": "native_functions.yaml", "lib": _cuda_lib(next(iter(by_overload.values())))}]}
    if row is None:  # the autograd engine's and Python's records around the ops: kept, so the trees align
        kids = [k for c in node.children if (k := _registered_tree(c, table)) is not None]
        if kids:
            return {"name": op, "module": node.frame.module, "children": kids}
        # a record of torch's own below an op (autograd's ``detach`` under aten::detach) runs on any
        # device: kept; a name the dispatcher does not know (an overload-less aten name) is not an op
        return None if op.startswith("aten::") or node.frame.kind != "op" else {"name": op, "module": node.frame.module}
    choice = _runtime_choice(op)
    if choice is not None:
        return {"name": choice[0], "module": "aten", "children": choice[1]}
    declared = row.get("delegate_declared") if row.get("delegate") else row.get("declared")
    cuda = (declared or {}).get("CUDA")
    composite = [k for k in ("CompositeImplicitAutograd", "CompositeExplicitAutograd")
                 if k in (declared or {}) or k in row["kernels"]]
    if "mkldnn" in op:
        kids = [{"name": "not reached on CUDA: the CPU path's choice (ConvBackend.Mkldnn / oneDNN)",
                 "module": "at::native::_select_conv_backend"}]
    elif cuda and row.get("metadata_only"):
        kids = [{"name": f"CUDA: {cuda} (metadata only: no kernel runs)", "module": "native_functions.yaml"}]
    elif cuda:
        via = f"{row['delegate']}: " if row.get("delegate") else ""
        kids = [{"name": f"CUDA: {via}{cuda}", "module": "native_functions.yaml", "lib": _cuda_lib(cuda)}]
    elif composite and node.children:
        kids = [k for c in node.children if (k := _registered_tree(c, table)) is not None]
    elif composite:
        kids = [{"name": f"{composite[0]}: no CUDA kernel of its own (runs other ops)",
                 "module": "native_functions.yaml"}]
    else:
        kids = [{"name": "no CUDA kernel declared (a CPU-only choice of the CPU path)",
                 "module": "native_functions.yaml"}]
    return {"name": op, "module": "aten", "children": kids}


def gpu_evidence(case: base.Case, pass_: str, run: Callable[[], object]) -> dict[str, Any]:
    """What torch's CUDA build would run for the aten ops the step reached (on this CPU,
    torch.profiler), in the step's own op hierarchy: the CUDA kernel native_functions.yaml
    declares, and where torch chooses a library at run time (convolution's backend,
    batch norm's implementation index), that choice resolved as torch resolves it by
    default on an NVIDIA GPU, the other candidates listed."""
    if pass_ == "forward" and "cuda_default" in case.private:  # a step whose implementation torch picks in Python
        run = case.private["cuda_default"]
    rec = record_ops(case, pass_, run)
    reached = [n.frame.name for top in rec.ops for _, n in top.walk() if n.frame.kind == "op"]
    table = dispatch_table(reached)["ops"]
    ops = [d for top in rec.ops if (d := _registered_tree(top, table)) is not None]
    needs: dict[str, Any] = {}
    for op, row in table.items():
        declared = row.get("delegate_declared") if row.get("delegate") else row.get("declared")
        cuda = (declared or {}).get("CUDA")
        if op in _OVERRIDEABLE:  # the composite picks ConvBackend.Overrideable for a new backend
            needs[op] = {"must": True, "implement": [_OVERRIDEABLE[op]],
                         "others": {"CUDA": "cuDNN / MIOpen / ATen (ConvBackend)"}}
        elif "mkldnn" in op:
            needs[op] = {"must": False, "free": "the CPU path's choice: not reached on another device"}
        else:
            # read by tracer.analysis.backend_needs as it reads the CPU traces' dispatch table
            needs[op] = {"dispatch_row": row, "others": {"CUDA": cuda} if cuda else {}}
    return {"evidence": "registered", "ops": ops,
            "provenance": {"read": f"torch {torch.__version__} torchgen/packaged/ATen/native/native_functions.yaml "
                                   "(dispatch: CUDA entries), torch._C._ConvBackend, and the run-time choices of "
                                   "ATen's Convolution.cpp, Normalization.cpp and transformers/cuda/sdp_utils.cpp "
                                   "and torch.optim's implementation choice resolved for an NVIDIA GPU (H100) with "
                                   "cuDNN enabled",
                           "reached": f"aten ops of the step on this CPU ({rec.source})"},
            "backend": {"key": "PrivateUse1", "ops": needs},
            "info": {"cudnn_in_build": bool(torch.backends.cudnn.is_available()),
                     "runtime_choices": {"convolution": _CUDNN_RULE_CONV, "batch norm": _CUDNN_RULE_BN,
                                         "scaled dot product attention": _SDP_RULE,
                                         "adam": _ADAM_RULE}}}


def compile_case(case: base.Case, passes: tuple[str, ...]) -> None:
    """The compiled door (tracer.contract.CompiledDoor): the case's passes under
    torch.compile with a recording backend (tracer/probes/torch_compiled.py)."""
    from tracer.probes import torch_compiled

    torch_compiled.compile_case(case, passes)
