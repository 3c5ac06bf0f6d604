"""PyTorch's training steps of the models (tracer.contract.MODELS): LeNet-5 with tensors,
torch.nn.functional and autograd alone (the lowest level a torch user writes, the update
by hand) and with torch.nn and torch.optim; the CIFAR-10 Rosetta CNN and a transformer
encoder block with torch.nn, torch's own layers and initialisation.

Imported inside torch's environment (tracer/probes/torch.py's make_model_case)."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from tracer.probes import base


def _tensor(value: Any, dev: torch.device, dtype: Any, grad: bool = False) -> torch.Tensor:
    return torch.tensor(value, device=dev, dtype=dtype, requires_grad=grad)


def _lenet_functional(dev: torch.device, dtype: Any) -> tuple[Callable[[torch.Tensor], torch.Tensor], list[Any],
                                                              Callable[[], None]]:
    """Tensors, F and autograd: the parameters made here, the SGD update written out."""
    L = base.LENET
    shapes = [(L["conv1"], 1, L["k"], L["k"]), (L["conv1"],), (L["conv2"], L["conv1"], L["k"], L["k"]),
              (L["conv2"],), (L["fc1"], L["conv2"] * 5 * 5), (L["fc1"],), (L["fc2"], L["fc1"]), (L["fc2"],),
              (base.CLASSES, L["fc2"]), (base.CLASSES,)]
    p = [_tensor(base.model_weight(s, 10 + i), dev, dtype, True) for i, s in enumerate(shapes)]

    def net(x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(F.conv2d(x, p[0], p[1], padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, p[2], p[3])), 2)
        x = torch.flatten(x, 1)
        x = F.relu(F.linear(x, p[4], p[5]))
        x = F.relu(F.linear(x, p[6], p[7]))
        return F.linear(x, p[8], p[9])

    def update() -> None:
        with torch.no_grad():
            for t in p:
                t.sub_(t.grad, alpha=L["lr"])
                t.grad = None

    return net, p, update


def _lenet_layer() -> nn.Module:
    L = base.LENET
    return nn.Sequential(
        nn.Conv2d(1, L["conv1"], L["k"], padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(L["conv1"], L["conv2"], L["k"]), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(L["conv2"] * 5 * 5, L["fc1"]), nn.ReLU(), nn.Linear(L["fc1"], L["fc2"]), nn.ReLU(),
        nn.Linear(L["fc2"], base.CLASSES))


def _cifar() -> nn.Module:
    C = base.CIFAR

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, C["k"], padding="same"), nn.ReLU(), nn.Conv2d(cout, cout, C["k"], padding="same"),
                nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(C["drop_conv"])]

    return nn.Sequential(*block(3, C["conv1"]), *block(C["conv1"], C["conv2"]), nn.Flatten(),
                         nn.Linear(C["conv2"] * 8 * 8, C["fc"]), nn.ReLU(), nn.Dropout(C["drop_fc"]),
                         nn.Linear(C["fc"], base.CLASSES))


class _Encoder(nn.Module):  # type: ignore[misc]  # torch is Any to mypy (not installed where it runs)
    """Token and learned position embeddings, torch's own pre-norm encoder layer (multi-head
    attention, GELU MLP, residuals; no dropout, so that the step is deterministic), a
    final layer norm and the projection to the vocabulary."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        T = base.TRANSFORMER
        self.embed = nn.Embedding(T["vocab"], T["embed"])
        self.pos = nn.Parameter(torch.zeros(1, seq, T["embed"]))
        self.block = nn.TransformerEncoderLayer(T["embed"], T["heads"], T["mlp"], dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(T["embed"])
        self.head = nn.Linear(T["embed"], T["vocab"])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(self.norm(self.block(self.embed(tokens) + self.pos)))
        return logits


def training_step(model: str, api: str, dev: torch.device, shape: tuple[int, ...]) -> base.Case:
    """The model's case: ``forward`` runs the network and its loss, ``backward`` the
    gradients and the optimizer's update (``case.private["parameters"]``: what it updates)."""
    base.check_model(model, api, shape)
    dtype = getattr(torch, base.dtype())
    torch.manual_seed(0)  # torch's own initialisation (the layer level), the same every run
    data, labels = base.model_data(model, shape)
    x = torch.tensor(data, device=dev, dtype=torch.int64 if model == "transformer" else dtype)
    y = torch.tensor(labels, device=dev)
    defaults: dict[str, Any] = {"layout": "NCHW (torch's own)", "threads": torch.get_num_threads()}
    if model == "lenet" and api == "functional":
        net, params, update = _lenet_functional(dev, dtype)
        names = [f"{layer}.{kind}" for layer in ("conv1", "conv2", "fc1", "fc2", "fc3") for kind in ("weight", "bias")]
        defaults["initialisation"] = "made by the probe: uniform +-1/sqrt(fan_in), seeded"
        defaults["optimizer"] = "SGD written out: p -= lr * p.grad under torch.no_grad()"
    else:
        module = {"lenet": _lenet_layer, "cifar": _cifar}.get(model, lambda: _Encoder(shape[1]))()
        module = module.to(dev, dtype).train()
        net, params = module, list(module.parameters())
        names = [n for n, _ in module.named_parameters()]
        optimizer: torch.optim.Optimizer
        if model == "transformer":
            optimizer = torch.optim.Adam(params, lr=base.TRANSFORMER["lr"])
        else:
            cfg = base.CIFAR if model == "cifar" else base.LENET
            optimizer = torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg.get("momentum", 0.0))
        defaults["initialisation"] = "torch's own: kaiming_uniform(a=sqrt(5)) weights, uniform biases " \
                                     "(nn.Linear and nn.Conv2d reset_parameters); N(0, 1) embeddings"
        defaults["optimizer"] = f"torch.optim.{type(optimizer).__name__} (foreach={optimizer.defaults.get('foreach')})"

        def update() -> None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    def forward() -> torch.Tensor:
        logits = net(x)
        loss: torch.Tensor = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        return loss

    def backward(loss: torch.Tensor) -> None:
        loss.backward()
        update()

    info = base.model_info(model, api, defaults)
    info["parameters"] = sum(p.numel() for p in params)
    # what a check of a new backend compares: the parameters the update changes; Adam divides each gradient by
    # its own size, so that one that is rounding (a true zero) still moves its parameter by up to lr
    adaptive = base.TRANSFORMER["lr"] if model == "transformer" else None
    return base.Case(forward=forward, backward=backward, info=info,
                     private={"parameters": params, "names": names, "adaptive_lr": adaptive})
