"""TensorFlow's skeleton (``dltrace scaffold tensorflow``): a PluggableDevice in C++.

The list comes from running the cases on TensorFlow's stand-in PluggableDevice
(tracer.probes.tensorflow_standin): the op kernels that reached it. The skeleton is a
PluggableDevice of its own: its device is dltrace's (tracer/probes/tensorflow_standin.cc,
copied as it is, compiled with the skeleton's device type, beside variables.cc, its route to a
resource variable: tracer/probes/tensorflow_standin_vars.cc), its kernels.cc registers
exactly the list (each op as the stand-in registered it: every type, or the types
TensorFlow has no DEFAULT_DEVICE kernel for), each kernel delegating to the CPU until the
team replaces it; its check (tracer/probes/tensorflow_skeleton.py) builds it and runs in
TensorFlow's environment.
"""

from __future__ import annotations

import re
from typing import Any

from tracer.analysis.standin_needs import StandinNeeds
from tracer.errors import DltraceError
from tracer.paths import PACKAGE
from tracer.scaffold.skeleton import Kernel, Writer
from tracer.processing.standin_record import host_placed
from tracer.trace import Trace

DEVICE_SOURCE = PACKAGE / "probes" / "tensorflow_standin.cc"
#: The device's route to a resource variable (ResourceGather's, ResourceApplyAdam's).
VARIABLES_SOURCE = PACKAGE / "probes" / "tensorflow_standin_vars.cc"
#: What a TensorFlow op's or attribute's name must be to be written into C++.
TF_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*", re.ASCII)


def kernels(needs: StandinNeeds) -> list[Kernel]:
    """One kernel per op that reached the stand-in, in first-call order, each a C++
    function of its own (``Conv2D`` -> ``Conv2D_kernel``)."""
    out = []
    for op in needs.must_implement:
        if not TF_NAME.fullmatch(op):  # written into C++ as a string and a function name
            raise DltraceError(f"op name {op[:80]!r} cannot be written into a skeleton (ASCII letters, digits, '_'): "
                               "refused")
        out.append(Kernel(op, tuple(needs.passes_of(op)), f"{op}_kernel"))
    return out


def registrations(traces: list[Trace], ks: list[Kernel]) -> list[dict[str, Any]]:
    """Each op's registrations: one per element type (``T``) it reached the stand-in in
    (its traces' meta), or one for every type where it has none."""
    typed: dict[str, dict[tuple[str, str], None]] = {}
    for t in traces:
        found = (t.meta.get("standin") or {}).get("registrations")
        for op, rows in (found.items() if isinstance(found, dict) else ()):
            mine = typed.setdefault(str(op), {})
            for r in rows if isinstance(rows, list) else ():
                if isinstance(r, list) and len(r) == 2:
                    mine[(str(r[0]), str(r[1]))] = None
    out: list[dict[str, Any]] = []
    for k in ks:
        rows = list(typed.get(k.op, {}))
        for attr, dtype in rows:
            if not TF_NAME.fullmatch(str(attr)) or not str(dtype).isdigit():
                raise DltraceError(f"{k.op}'s registration {attr!r}={dtype!r} cannot be written into a skeleton")
        out += [{"op": k.op, "function": k.function, "attr": str(a), "type": int(d)} for a, d in rows] or \
            [{"op": k.op, "function": k.function, "attr": "", "type": 0}]
    return out


def context(name: str, traces: list[Trace], ks: list[Kernel]) -> dict[str, Any]:
    """The device type (the name upper-cased), each kernel's registrations, and the ops
    the stand-in's graphs placed on the host."""
    return {"device_type": name.upper(), "registrations": registrations(traces, ks), "host": host_placed(traces)}


def manifest(name: str) -> dict[str, str]:
    """scaffold.json names the device type, which the check looks the device up by."""
    return {"device_type": name.upper()}


WRITER = Writer(
    framework="tensorflow", title="TensorFlow", kernels=kernels, version_key="tf_version",
    rendered=(("kernels.cc", "tensorflow_kernels.cc.j2"),),
    copied=(("device.cc", DEVICE_SOURCE), ("variables.cc", VARIABLES_SOURCE)),
    check_template="tensorflow_check.py.j2", readme_template="tensorflow_README.md.j2",
    must="a TensorFlow PluggableDevice must register", summary="{name}/kernels.cc registers {n} op kernels",
    context=context, manifest=manifest,
    name_rule=(r"[a-z][a-z_]*", "TensorFlow takes a device type of letters and '_' only (the name upper-cased), "
                                "no digits"))
