"""PyTorch probe: torch.nn.functional (functional) and torch.nn modules (layer)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from probes import base


def gpu_available() -> bool:
    return torch.cuda.is_available()


def _functional(primitive: str, x: torch.Tensor, dev: torch.device):
    c = x.shape[1] if x.dim() > 1 else 1
    param = lambda a: torch.tensor(a, device=dev, requires_grad=True)  # noqa: E731
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
        mean, var = torch.zeros(c, device=dev), torch.ones(c, device=dev)
        return (lambda: F.batch_norm(x, mean, var, g, b, training=True)), [g, b]
    raise base.ProbeError(f"unknown primitive {primitive}")


def _layer(primitive: str, x: torch.Tensor, dev: torch.device):
    c = x.shape[1] if x.dim() > 1 else 1
    if primitive == "dense":
        m = nn.Linear(x.shape[1], base.DENSE_OUT)
        weights = {"weight": base.dense_weight(x.shape[1]), "bias": base.bias(base.DENSE_OUT)}
    elif primitive == "conv2d":
        m = nn.Conv2d(c, base.CONV_OUT, base.CONV_K, stride=1, padding=1)
        weights = {"weight": base.conv_weight(c), "bias": base.bias(base.CONV_OUT)}
    elif primitive == "batchnorm":
        m = nn.BatchNorm2d(c)
        weights = {}
    else:
        m = {
            "relu": nn.ReLU,
            "sigmoid": nn.Sigmoid,
            "tanh": nn.Tanh,
            "softmax": lambda: nn.Softmax(dim=-1),
            "maxpool2d": lambda: nn.MaxPool2d(base.POOL_K),
            "avgpool2d": lambda: nn.AvgPool2d(base.POOL_K),
        }[primitive]()
        weights = {}
    with torch.no_grad():
        for name, value in weights.items():
            getattr(m, name).copy_(torch.from_numpy(value))
    m = m.to(dev).train()
    return (lambda: m(x)), list(m.parameters())


def make_case(primitive: str, api: str, device: str, shape: tuple[int, ...]) -> base.Case:
    base.check_shape(primitive, shape)
    dev = torch.device(device)
    x = torch.tensor(base.array(shape), device=dev, requires_grad=True)
    run, params = (_functional if api == "functional" else _layer)(primitive, x, dev)
    grad = torch.ones(base.output_shape(primitive, shape), device=dev)
    leaves = [x, *params]

    def backward(y: torch.Tensor) -> None:
        for t in leaves:  # fresh gradients each run, as a training step would have
            t.grad = None
        y.backward(grad)

    sync = torch.cuda.synchronize if dev.type == "cuda" else base._noop
    info = {"device_type": dev.type, "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
            "mkldnn_available": bool(torch.backends.mkldnn.is_available())}
    return base.Case(forward=run, backward=backward, sync=sync, info=info)



def record_ops(case: base.Case, pass_: str, run) -> base.OpRecord:
    """The dispatcher's op hierarchy from torch.profiler (CPU events nested by time),
    which names the backend op that was chosen: aten::_convolution >
    aten::mkldnn_convolution (oneDNN) or > aten::thnn_conv2d > aten::_slow_conv2d_forward.
    On CUDA the kernels each op launched hang under it (cudnn, cublas...)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU]
    cuda = torch.cuda.is_available() and case.info.get("device_type") == "cuda"
    if cuda:
        acts.append(ProfilerActivity.CUDA)
    with profile(activities=acts, record_shapes=False, with_stack=False) as prof:
        run()
        case.sync()
    events = []
    for e in prof.events():
        if e.device_type.name != "CPU":
            continue
        kernels = [base.op_node(k.name, "cuda", "", 1, int(k.duration * 1000)) for k in getattr(e, "kernels", [])]
        module = "aten" if e.name.startswith("aten::") else "torch"
        events.append(base.OpEvent(e.name, e.time_range.start, e.time_range.end, module, "", e.thread, kernels))
    return base.OpRecord(base.nest(events, scale_ns=1000.0), "torch.profiler")
