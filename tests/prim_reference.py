"""The contract's transformer primitives (tracer.contract.PRIMITIVES, family
"transformer") computed with numpy in float64 from base's seeded data: the numbers
every probe's cases must reproduce (the table's formulas, torch's). Imported inside a
framework environment (numpy), by a test helper such as tests/tf_prim_values.py."""

from __future__ import annotations

import math

import numpy as np

from tracer.contract import ADAM, EMBED_VOCAB, LN_EPS, PRIMITIVES
from tracer.probes import base



def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference(primitive: str) -> dict:
    """The contract's formulas in float64 on base's data: {"out", "grads"} with the
    backward seeded with ones (grads in the probe's order: the input, then the
    parameters), or {"steps"} for adam."""
    shape = PRIMITIVES[primitive].shape
    x = base.array(shape).astype(np.float64)
    if primitive == "layernorm":
        g, b = base.ln_scale(shape[-1]).astype(np.float64), base.bias(shape[-1]).astype(np.float64)
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        xhat = (x - mu) / np.sqrt(var + LN_EPS)
        dxhat = np.ones_like(x) * g
        dx = (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)) \
            / np.sqrt(var + LN_EPS)
        return {"out": xhat * g + b, "grads": [dx, xhat.sum(0), np.full(shape[-1], float(shape[0]))]}
    if primitive == "gelu":
        phi = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return {"out": x * phi, "grads": [phi + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)]}
    if primitive == "attention":
        k, v = (a.astype(np.float64) for a in base.attention_kv(shape))
        scale = 1 / math.sqrt(shape[-1])
        p = _softmax(x @ k.swapaxes(-1, -2) * scale)
        dp = np.ones_like(x) @ v.swapaxes(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        return {"out": p @ v, "grads": [ds @ k * scale, ds.swapaxes(-1, -2) @ x * scale,
                                        p.swapaxes(-1, -2) @ np.ones_like(x)]}
    if primitive == "embedding":
        ids, table = base.token_ids(shape), base.embed_table().astype(np.float64)
        dtable = np.zeros_like(table)
        np.add.at(dtable, ids.reshape(-1), 1.0)
        assert ids.max() < EMBED_VOCAB
        return {"out": table[ids], "grads": [dtable]}
    if primitive == "crossentropy":
        labels = base.class_labels(*shape)
        p = _softmax(x)
        rows = np.arange(shape[0])
        return {"out": np.mean(-np.log(p[rows, labels])),
                "grads": [(p - np.eye(shape[1])[labels]) / shape[0]]}
    assert primitive == "adam"
    g = base.adam_grad(shape).astype(np.float64)
    m, v, steps = np.zeros_like(x), np.zeros_like(x), []
    for t in (1, 2):  # torch.optim.Adam's update
        m = ADAM["beta1"] * m + (1 - ADAM["beta1"]) * g
        v = ADAM["beta2"] * v + (1 - ADAM["beta2"]) * g * g
        mhat, vhat = m / (1 - ADAM["beta1"] ** t), v / (1 - ADAM["beta2"] ** t)
        x = x - ADAM["lr"] * mhat / (np.sqrt(vhat) + ADAM["eps"])
        steps.append(x)
    return {"steps": steps}
