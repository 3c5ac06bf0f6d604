"""A TensorFlow backend skeleton that proves the must-implement list (``dltrace
scaffold tensorflow``).

The list comes from running the cases on TensorFlow's stand-in PluggableDevice
(tracer.probes.tensorflow_standin, as ``dltrace probe tensorflow --device standin``
does; read by tracer.analysis.standin_needs): the op kernels that reached it. The
skeleton is a PluggableDevice of its own: its device is dltrace's
(tracer/probes/tensorflow_standin.cc, copied as it is, compiled with the skeleton's
device type), its kernels.cc registers exactly the list (each op as the stand-in
registered it: every type, or the types TensorFlow has no DEFAULT_DEVICE kernel for),
each kernel delegating to the CPU until the team replaces it; its check
(tracer/probes/tensorflow_skeleton.py) builds it and runs in TensorFlow's environment.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tracer import __version__
from tracer.contract import MODELS
from tracer.errors import DltraceError
from tracer.files import own_folder, write_bytes, write_text
from tracer.paths import PACKAGE
from tracer.analysis.standin_needs import StandinNeeds
from tracer.runner import CaseSpec
from tracer.scaffold import Kernel, case_rows, code_text, describe_cases, needs_of, template_env, \
    write_list, write_manifest
from tracer.trace import Trace

DEVICE_SOURCE = PACKAGE / "probes" / "tensorflow_standin.cc"
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


def write(folder: Path, name: str, specs: list[CaseSpec], traces: list[Trace], command: str) -> list[Kernel]:
    """Write the skeleton into ``folder`` (made by tracer.scaffold.prepare); its kernels."""
    needs = needs_of(traces)
    ks = kernels(needs)
    version = str(traces[0].info.framework_version or "?")
    what = describe_cases(specs)
    ctx: dict[str, Any] = {"name": name, "device_type": name.upper(), "what": what, "kernels": ks, "ops": ks,
                           "registrations": registrations(traces, ks), "tool_version": __version__,
                           "command": code_text(command), "tf_version": code_text(version),
                           "folder": code_text(folder.name or str(folder)), "steps": 2,
                           "models": any(s.primitive in MODELS or s.user is not None for s in specs),
                           "cases": case_rows(specs, traces)}
    env = template_env()
    pkg = own_folder(folder / name)
    write_text(pkg / "kernels.cc", env.get_template("tensorflow_kernels.cc.j2").render(ctx))
    write_bytes(pkg / "device.cc", DEVICE_SOURCE.read_bytes())
    write_text(folder / "check.py", env.get_template("tensorflow_check.py.j2").render(ctx))
    write_text(folder / "README.md", env.get_template("tensorflow_README.md.j2").render(ctx))
    write_list(folder, "tensorflow", version, what, "a TensorFlow PluggableDevice must register", ks)
    write_manifest(folder, "tensorflow", version, name, what, specs, ks, needs.evidence, command,
                   device_type=name.upper())
    return ks
