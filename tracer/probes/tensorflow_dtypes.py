"""The dtypes each TensorFlow op of a step ran with, for the kernel registrations of a
PluggableDevice skeleton (``dltrace scaffold tensorflow``): a kernel is registered
per type constraint (``T=float32``), and neither the profiler's host trace nor the
kernel registry says which types a step used.

Run inside TensorFlow's environment as ``python -m tracer.probes.tensorflow_dtypes
CASES`` (CASES: a JSON list of {"workload", "api", "shape"}, and "user" for a user's
own workload, tracer.contract.UserWorkload): each case is built by
the probe's own code, stepped once to warm it, then stepped once more (forward and
backward) with an op callback (``op_callbacks.add_op_callback``, TensorFlow's hook
for tf.debugging's dumps) that reads each executed op's type attributes from its
attrs, by the op's definition (attrs of type ``type``; ``list(type)`` kept as a list).
The callback slows eager execution, so it runs here, apart from the traced steps.
Prints one JSON object: op -> the distinct signatures, each [[attr, dtype], ...].

Exit status (tracer.contract.Exit): OK, or ERROR with the reason on one line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tracer.collect.cases import make_case
from tracer.contract import Exit, UserWorkload, workload_passes
from tracer.probes import tensorflow as probe


def _signature(op_type: str, attrs: Any) -> tuple[tuple[str, str], ...]:
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    kinds = {a.name: a.type for a in op_def.attr} if op_def is not None else {}
    sig: dict[str, str] = {}
    for i in range(0, len(attrs or ()), 2):
        name, value = attrs[i], attrs[i + 1]
        if kinds.get(name) == "type":
            sig[name] = tf.dtypes.as_dtype(value).name
        elif kinds.get(name) == "list(type)":
            sig[name] = "[" + ",".join(tf.dtypes.as_dtype(v).name for v in value) + "]"
    return tuple(sorted(sig.items()))


def dtypes_of(cases: list[dict[str, Any]]) -> dict[str, list[list[list[str]]]]:
    from tensorflow.python.framework import op_callbacks

    seen: dict[str, dict[tuple[tuple[str, str], ...], None]] = {}

    def callback(op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
                 graph: Any = None) -> None:
        name = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
        seen.setdefault(name, {})[_signature(name, attrs)] = None

    for c in cases:
        user = UserWorkload.from_json(c.get("user"))
        case = make_case(probe, c["workload"], c["api"], "/CPU:0" if user else "cpu", tuple(c["shape"]), user)
        # an optimizer step has no backward: its forward is the update (as a user's single step callable's)
        one = case.private.get("single_step") if user else "backward" not in workload_passes(c["workload"])
        step = case.forward if one else lambda: case.backward(case.forward())
        step()  # warm: first-call work is not what the step reaches
        op_callbacks.add_op_callback(callback)
        try:
            step()
        finally:
            op_callbacks.remove_op_callback(callback)
    return {op: [[list(kv) for kv in sig] for sig in sigs] for op, sigs in seen.items()}


def main(argv: list[str]) -> int:
    try:
        print(json.dumps(dtypes_of(json.loads(argv[0]))))
    except Exception as exc:  # noqa: BLE001 - one line to the tool
        print(f"{type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return Exit.ERROR
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
