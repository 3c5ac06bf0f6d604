"""Run inside a framework's environment: each transformer primitive's case (its probe's
make_case), what its forward returned and the gradients its backward computed, beside a
numpy reference computed here in float64 from the same seeded data (tracer.probes.base),
so that a test (whose own environment has no numpy) can hold every framework to the same
numbers. Adam has no backward: its forward is the update, run STEPS times.

Prints one JSON line {DTYPE: {"PRIMITIVE-API": {"out": [...], "grads": [[...], ...],
"ref_out": [...], "ref_grads": [[...], ...]}}}, every array flattened to float.

    python tests/transformer_prims.py PROBE_MODULE DEVICE DTYPE[,DTYPE] PRIMITIVE:API...
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from typing import Any

import numpy as np

from tracer.contract import DTYPE_ENV, default_shape
from tracer.probes import base

STEPS = 3  # Adam updates: the first makes the state, the others use it


def _flat(a: Any) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def reference(primitive: str, shape: tuple[int, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(output, gradients of the differentiated arguments in the probes' order) in float64,
    the backward seeded with ones; for adam, the parameter after each of STEPS updates."""
    x = base.array(shape).astype(np.float64)
    if primitive == "layernorm":
        g, b = base.ln_scale(shape[-1]).astype(np.float64), base.bias(shape[-1]).astype(np.float64)
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        rstd = 1 / np.sqrt(var + base.LN_EPS)
        xhat = (x - mu) * rstd
        dxhat = np.ones_like(x) * g
        dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
        return xhat * g + b, [dx, xhat.sum(0), np.full(shape[-1], float(shape[0]))]
    if primitive == "gelu":
        phi = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return x * phi, [phi + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)]
    if primitive == "attention":
        k, v = (a.astype(np.float64) for a in base.attention_kv(shape))
        scale = 1 / math.sqrt(shape[-1])
        p = _softmax(x @ k.swapaxes(-1, -2) * scale)
        dy = np.ones_like(x)
        dp = dy @ v.swapaxes(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        return p @ v, [ds @ k * scale, ds.swapaxes(-1, -2) @ x * scale, p.swapaxes(-1, -2) @ dy]
    if primitive == "embedding":
        ids, table = base.token_ids(shape), base.embed_table().astype(np.float64)
        dtable = np.zeros_like(table)
        np.add.at(dtable, ids, 1.0)
        return table[ids], [dtable]
    if primitive == "crossentropy":
        labels = base.class_labels(shape[0], shape[1])
        logp = np.log(_softmax(x))
        onehot = np.eye(shape[1])[labels]
        return np.array(-logp[np.arange(shape[0]), labels].mean()), [(np.exp(logp) - onehot) / shape[0]]
    if primitive == "adam":
        a, g = base.ADAM, base.adam_grad(shape).astype(np.float64)
        m, v, after = np.zeros_like(x), np.zeros_like(x), []
        for t in range(1, STEPS + 1):
            m = a["beta1"] * m + (1 - a["beta1"]) * g
            v = a["beta2"] * v + (1 - a["beta2"]) * g * g
            x = x - a["lr"] * (m / (1 - a["beta1"] ** t)) / (np.sqrt(v / (1 - a["beta2"] ** t)) + a["eps"])
            after.append(x)
        return np.stack(after), []
    raise ValueError(f"no reference for {primitive}")


def _grads(probe: Any, case: Any, state: Any) -> list[Any]:
    """The gradients the case's backward computed, of its differentiated arguments only."""
    got = case.backward(state)
    if "leaves" in case.private:  # torch: the leaves' .grad (the embedding's ids have none)
        return [t.grad.float().cpu().numpy() for t in case.private["leaves"] if t.requires_grad]
    return [np.asarray(g, dtype=np.float32) for g in got]  # JAX: the pullback's cotangents


def _host(y: Any) -> np.ndarray:
    if hasattr(y, "detach"):  # torch
        return y.detach().float().cpu().numpy()
    return np.asarray(y, dtype=np.float32)


def run(probe: Any, device: str, primitive: str, api: str) -> dict[str, list[Any]]:
    shape = default_shape(primitive)
    case = probe.make_case(primitive, api, device, shape)
    ref_out, ref_grads = reference(primitive, shape)
    if primitive == "adam":
        out = np.stack([_host(case.forward()).copy() for _ in range(STEPS)])
        grads: list[Any] = []
    else:
        state = case.forward()
        out = _host(state[0] if isinstance(state, tuple) else state)
        grads = _grads(probe, case, state)
    got = {"out": _flat(out), "grads": [_flat(g) for g in grads], "ref_out": _flat(ref_out),
           "ref_grads": [_flat(g) for g in ref_grads]}
    if primitive == "gelu":  # what the tanh approximation would give: the exact form must be told from it
        x = base.array(shape).astype(np.float64)
        got["ref_tanh"] = _flat(0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))))
    return got


if __name__ == "__main__":
    module = importlib.import_module(sys.argv[1])
    device, dtypes = sys.argv[2], sys.argv[3].split(",")
    result: dict[str, dict[str, Any]] = {}
    for dtype in dtypes:
        os.environ[DTYPE_ENV] = dtype  # read by base.dtype() as each case is made
        result[dtype] = {c.replace(":", "-"): run(module, device, *c.split(":")) for c in sys.argv[4:]}
    print(json.dumps(result))
