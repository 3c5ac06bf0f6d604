"""Run inside a framework's environment: each transformer primitive's case (its probe's
make_case), what its forward returned and the gradients its backward computed, beside the
numpy reference of tests/prim_reference.py (float64, from the same seeded data), so that a
test (whose own environment has no numpy) can hold every framework to the same numbers
in every element type. Adam has no backward: its forward is the update, run as many
times as the reference's steps.

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

from tests.prim_reference import reference
from tracer.contract import DTYPE_ENV, default_shape
from tracer.probes import base


def _flat(a: Any) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


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
    ref = reference(primitive)
    if primitive == "adam":  # the first update makes the state, the second uses it
        ref_out, ref_grads = np.stack(ref["steps"]), []
        out = np.stack([_host(case.forward()).copy() for _ in ref["steps"]])
        grads: list[Any] = []
    else:
        ref_out, ref_grads = ref["out"], ref["grads"]
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
