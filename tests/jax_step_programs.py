"""Run inside JAX's environment: for each primitive given, the HLO opcodes the probe's
op layer records for each pass, and the opcodes of the programs XLA itself compiled
while the step ran that pass (its own dump, --xla_dump_to), so that a test can hold the
op layer to the program the step runs. A model is named with its level, MODEL@API
(lenet@functional): its training step is the case. Prints one JSON line.

    python tests/jax_step_programs.py DUMP_DIR DEVICE WORKLOAD...     (DEVICE: cpu or gpu)
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

DUMP = Path(sys.argv[1])
os.environ["XLA_FLAGS"] = f"--xla_dump_to={DUMP} --xla_dump_hlo_as_text"

from tracer.contract import default_shape, workload_passes  # noqa: E402
from tracer.probes import jax as probe  # noqa: E402


def compiled_since(seen: set[str]) -> list[str]:
    """Entry-computation opcodes of the modules XLA optimised since ``seen`` was taken."""
    ops: Counter[str] = Counter()
    for f in sorted(DUMP.glob("*after_optimizations.txt")):
        if f.name in seen:
            continue
        for node in probe._hlo_nodes(f.read_text()):
            ops[node.frame.name] += node.count
    return sorted(ops.elements())


def recorded(case: object, pass_: str) -> list[str]:
    rec = probe.record_ops(case, pass_, lambda: None)  # type: ignore[arg-type]
    (xla,) = [n for n in rec.ops if n.frame.name.startswith("XLA:")]
    return sorted(Counter({c.frame.name: c.count for c in xla.children}).elements())


out = {}
for prim in sys.argv[3:]:
    name, _, api = prim.partition("@")
    make = probe.make_model_case if api else probe.make_case
    case = make(name, api or "functional", sys.argv[2], default_shape(name))
    seen = {f.name for f in DUMP.glob("*")}
    state = case.forward()
    case.sync()
    ran_forward = compiled_since(seen)
    out[prim] = {"forward": {"ran": ran_forward, "recorded": recorded(case, "forward")}}
    if "backward" in workload_passes(name):  # an optimizer step has its update alone
        seen = {f.name for f in DUMP.glob("*")}
        case.backward(state)
        ran_backward = compiled_since(seen)
        out[prim]["backward"] = {"ran": ran_backward, "recorded": recorded(case, "backward")}
print(json.dumps(out))
