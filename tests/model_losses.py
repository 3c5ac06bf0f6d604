"""Run inside a framework's environment: a few training steps of each model case given,
through its probe's make_model_case, and the loss each step's forward returned, so
that a test can hold a model case to training (the loss falls) and two frameworks'
functional LeNet to the same numbers. Prints one JSON line {"MODEL-API": [losses]}.

    python tests/model_losses.py PROBE_MODULE DEVICE STEPS MODEL:API...
"""

from __future__ import annotations

import importlib
import json
import sys

from tracer.contract import default_shape


def losses(probe: object, device: str, model: str, api: str, steps: int) -> list[float]:
    case = probe.make_model_case(model, api, device, default_shape(model))  # type: ignore[attr-defined]
    out = []
    for _ in range(steps):
        state = case.forward()
        # TensorFlow's forward returns (tape, loss), JAX's (loss, pullback): the scalar is the loss
        loss = next(s for s in state if getattr(s, "ndim", None) == 0) if isinstance(state, tuple) else state
        out.append(float(loss))
        case.backward(state)
    return out


if __name__ == "__main__":
    probe = importlib.import_module(sys.argv[1])
    device, steps = sys.argv[2], int(sys.argv[3])
    print(json.dumps({c.replace(":", "-"): losses(probe, device, *c.split(":"), steps) for c in sys.argv[4:]}))
