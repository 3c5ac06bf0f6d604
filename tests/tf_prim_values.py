"""Run inside TensorFlow's environment: the numbers of primitive cases made by the
probe's make_case beside the numpy reference (tests/prim_reference.py, from base's
data), so that a test (whose own environment has no numpy) can hold one to the other.
Prints one JSON line {"PRIMITIVE-API": {"got": {...}, "want": {...}}}, each with the
forward's output and the backward's gradients (an IndexedSlices made dense here, after
the step) as float lists, and the gradients' types; for adam, "steps": the parameter
after each of two updates.

    python tests/tf_prim_values.py PRIMITIVE:API...
"""

from __future__ import annotations

import json
import sys
from typing import Any

import tensorflow as tf

from tests.prim_reference import reference
from tracer.contract import PRIMITIVES
from tracer.probes import tensorflow as probe


def _floats(t: Any) -> Any:
    return tf.cast(tf.convert_to_tensor(t), tf.float32).numpy().tolist()


def _lists(ref: dict[str, Any]) -> dict[str, Any]:
    return {k: [a.tolist() for a in v] if isinstance(v, list) else v.tolist() for k, v in ref.items()}


def values(primitive: str, api: str) -> dict[str, Any]:
    case = probe.make_case(primitive, api, "/CPU:0", PRIMITIVES[primitive].shape)
    if "backward" not in PRIMITIVES[primitive].passes:
        return {"steps": [_floats(case.forward()) for _ in range(2)]}
    state = case.forward()
    grads = case.backward(state)
    return {"out": _floats(state[1]), "grads": [_floats(g) for g in grads],
            "grad_types": [type(g).__name__ for g in grads]}


if __name__ == "__main__":
    print(json.dumps({c.replace(":", "-"): {"got": values(*c.split(":")), "want": _lists(reference(c.split(":")[0]))}
                      for c in sys.argv[1:]}))
