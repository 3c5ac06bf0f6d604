"""Run inside a framework's environment: each primitive case given, made by its probe's
make_case, run once forward (and backward, seeded with ones), and, for the transformer
primitives, the same computation in NumPy from tracer.probes.base's data (float64),
written here independently of every probe, so that a test can hold each framework to
the same numbers (the tool's own environment has no NumPy). Adam runs two steps.
Prints one JSON line::

    {"PRIM-API": {"error": "", "dtype": "float32",
                  "values": {"out": [...], "grad x": [...], ...},
                  "reference": {"out": [...], ...}}}

    python tests/transformer_values.py PROBE_MODULE DEVICE PRIM:API...
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from typing import Any

import numpy as np

from tracer.contract import ADAM, LN_EPS, PRIMITIVES
from tracer.probes import base

#: The names of each case's leaves, in the order the probes keep them (case.private["leaves"]).
LEAVES = {"layernorm": ["x", "scale", "shift"], "gelu": ["x"], "attention": ["q", "k", "v"],
          "embedding": ["table"], "crossentropy": ["x"]}


def _layernorm(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = base.array(shape).astype(np.float64)
    g, b = base.ln_scale(shape[-1]).astype(np.float64), base.bias(shape[-1]).astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + LN_EPS)  # biased variance
    xhat = (x - mu) / sigma
    dxhat = np.ones_like(x) * g
    dx = (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)) / sigma
    return {"out": xhat * g + b, "grad x": dx, "grad scale": xhat.sum(0), "grad shift": np.full_like(b, shape[0])}


def _gelu(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = base.array(shape).astype(np.float64)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return {"out": x * cdf, "grad x": cdf + x * pdf}


def _attention(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    q = base.array(shape).astype(np.float64)
    k, v = (a.astype(np.float64) for a in base.attention_kv(shape))
    scale = 1 / math.sqrt(shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    seed = np.ones(shape)
    dp = seed @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return {"out": p @ v, "grad q": ds @ k * scale, "grad k": np.swapaxes(ds, -1, -2) @ q * scale,
            "grad v": np.swapaxes(p, -1, -2) @ seed}


def _embedding(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    ids, table = base.token_ids(shape), base.embed_table().astype(np.float64)
    grad = np.zeros_like(table)
    np.add.at(grad, ids.reshape(-1), 1.0)  # each row: how often its id is looked up
    return {"out": table[ids], "grad table": grad}


def _crossentropy(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = base.array(shape).astype(np.float64)
    n = shape[0]
    t = base.class_labels(n, shape[1])
    e = np.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    onehot = np.eye(shape[1])[t]
    return {"out": np.array(-np.log(p[np.arange(n), t]).mean()), "grad x": (p - onehot) / n}


def _adam(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """torch.optim.Adam's update, two steps from the same fixed gradient."""
    p = base.array(shape).astype(np.float64)
    g = base.adam_grad(shape).astype(np.float64)
    m, v, out = np.zeros(shape), np.zeros(shape), {}
    for t in (1, 2):
        m = ADAM["beta1"] * m + (1 - ADAM["beta1"]) * g
        v = ADAM["beta2"] * v + (1 - ADAM["beta2"]) * g * g
        mhat, vhat = m / (1 - ADAM["beta1"] ** t), v / (1 - ADAM["beta2"] ** t)
        p = p - ADAM["lr"] * mhat / (np.sqrt(vhat) + ADAM["eps"])
        out[f"step {t}"] = p
    return out


REFERENCES = {"layernorm": _layernorm, "gelu": _gelu, "attention": _attention, "embedding": _embedding,
              "crossentropy": _crossentropy, "adam": _adam}


def numbers(a: Any) -> list[float]:
    """A framework's array (a chainer Variable, an MXNet NDArray in any type, a NumPy array), flat."""
    a = getattr(a, "array", a)  # chainer.Variable
    if hasattr(a, "asnumpy"):  # MXNet: its bfloat16 reads back as raw uint16 unless cast first
        a = a.astype("float32").asnumpy()
    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def dtype_name(a: Any) -> str:
    a = getattr(a, "array", a)
    name = str(a.dtype)
    return "bfloat16" if "bfloat16" in name else np.dtype(a.dtype).name


def run(probe: Any, device: str, primitive: str, api: str) -> dict[str, Any]:
    shape = PRIMITIVES[primitive].shape
    try:
        case = probe.make_case(primitive, api, device, shape)
        values: dict[str, list[float]] = {}
        if primitive == "adam":
            for t in (1, 2):
                y = case.forward()
                values[f"step {t}"] = numbers(y)
            try:
                case.backward(y)
                backward_error = ""
            except Exception as exc:  # noqa: BLE001 - what asking an optimizer step for a backward says
                backward_error = f"{type(exc).__name__}: {exc}"
        else:
            y = case.forward()
            values["out"] = numbers(y)
            case.backward(y)
            leaves = case.private["leaves"]
            for name, leaf in zip(LEAVES.get(primitive, ["x"] + [f"p{i}" for i in range(len(leaves))]), leaves):
                values[f"grad {name}"] = numbers(leaf.grad)
        out: dict[str, Any] = {"error": "", "dtype": dtype_name(y), "values": values}
        if primitive == "adam":
            out["backward_error"] = backward_error
    except Exception as exc:  # noqa: BLE001 - a case that cannot run is reported, as the harness would
        return {"error": f"{type(exc).__name__}: {exc}"}
    if primitive in REFERENCES:
        out["reference"] = {k: [float(v) for v in np.asarray(a).reshape(-1)]
                            for k, a in REFERENCES[primitive](shape).items()}
    return out


if __name__ == "__main__":
    probe = importlib.import_module(sys.argv[1])
    device = sys.argv[2]
    print(json.dumps({c.replace(":", "-"): run(probe, device, *c.split(":")) for c in sys.argv[3:]}))
