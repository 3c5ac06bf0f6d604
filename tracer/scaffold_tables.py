"""The registration table of a backend interface that is not stood in here, as a
skeleton that was NOT RUN (``dltrace scaffold tensorflow``).

TensorFlow's PluggableDevice is a C API plugin that dltrace does not yet play (torch's
and JAX's skeletons are run: tracer.scaffold, tracer.scaffold_jax). What is written is
the list the report computes, from the same runs, as the skeleton of that interface's
registration table:

the CPU run's kernel registry over the ops the step executed (a trace's ``dispatch``
meta, read by tracer.process.backend_needs as the report's must-implement figure is),
one ``TF_RegisterKernelBuilder`` per op and type signature, the signatures read from
a run of the same cases with TensorFlow's op callback
(tracer.probes.tensorflow_dtypes). Its files say NOT RUN; there is no ``--check``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracer import __version__, envs, tempdirs
from tracer.contract import MODELS, Exit
from tracer.errors import DltraceError, ProbeFailed, UsageError
from tracer.files import write_text
from tracer.paths import code_path
from tracer.process.backend_needs import backend_needs
from tracer.process.scorecard import interface_entries
from tracer.registry import Framework
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, run_probe
from tracer.scaffold import INTERFACES, MANIFEST, code_text, describe_cases, template_env
from tracer.trace import Trace

#: The frameworks whose registration table is written, and the interface's name.
TABLES = {"tensorflow": "PluggableDevice"}
NOT_RUN = "NOT RUN"
#: TensorFlow's dtype names as the C API's TF_DataType (tensorflow/c/tf_datatype.h).
TF_DATATYPE = {"float32": "TF_FLOAT", "float64": "TF_DOUBLE", "int32": "TF_INT32", "uint8": "TF_UINT8",
               "int16": "TF_INT16", "int8": "TF_INT8", "string": "TF_STRING", "complex64": "TF_COMPLEX64",
               "int64": "TF_INT64", "bool": "TF_BOOL", "bfloat16": "TF_BFLOAT16", "uint16": "TF_UINT16",
               "complex128": "TF_COMPLEX128", "float16": "TF_HALF", "resource": "TF_RESOURCE",
               "variant": "TF_VARIANT", "uint32": "TF_UINT32", "uint64": "TF_UINT64"}


def check_framework(framework: str, run_check: bool) -> None:
    """TensorFlow and JAX get a table that is not run (so no --check); Chainer and
    MXNet are named, not written."""
    if framework in TABLES and run_check:
        raise UsageError(f"--check runs a skeleton, and {framework}'s ({INTERFACES[framework]}) cannot be built "
                         f"or run here: dltrace scaffold {framework} writes its registration table, NOT RUN "
                         "(--check is torch's and JAX's)")
    if framework not in TABLES and framework not in ("torch", "jax"):
        interface = INTERFACES.get(framework, "an interface dltrace does not know")
        raise UsageError(f"{framework}'s new-device interface is {interface}: it cannot be stood in from Python "
                         "here, so dltrace scaffold writes torch's and JAX's backends, and TensorFlow's "
                         "registration table (not run)")


@dataclass(frozen=True)
class Entry:
    """One op of the table: the passes that reached it and what it is registered or
    lowered with (TensorFlow: its type signatures, ``T=float32``; JAX: the primitives
    that lower to it)."""

    op: str
    passes: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass
class Table:
    framework: str
    version: str
    evidence: str  # registry / lowered / compiled
    read: str  # what the list was read from
    entries: list[Entry]


def _passes(traces: list[Trace]) -> dict[str, tuple[str, ...]]:
    """op -> the passes whose op layer reached it."""
    found: dict[str, dict[str, None]] = {}
    for t in traces:
        for run in t.runs:
            root = run.layers.get("op")
            for _, node in root.walk() if root is not None else ():
                if node.frame.kind == "op":
                    found.setdefault(node.frame.name, {})[run.pass_] = None
    return {op: tuple(p) for op, p in found.items()}


def run_cases(fw: Framework, specs: list[CaseSpec], kind: str, timeout: float, command: str) -> list[Trace]:
    """The cases' traces from one probe process: TensorFlow's CPU run (its kernel
    registry in the traces' meta)."""
    with tempdirs.owned("dltrace-scaffold-") as tmp:
        results = run_probe(fw, specs, tmp, timeout=timeout, command=command, kind=kind)
        failed = [r for r in results if r.error]
        if failed:
            r = failed[0]
            raise ProbeFailed(f"{fw.name} {r.spec.primitive} ({r.spec.api}): {r.error}")
        return [r.load() for r in results]


def tensorflow_dtypes(fw: Framework, specs: list[CaseSpec], timeout: float = DEFAULT_TIMEOUT) \
        -> dict[str, list[list[list[str]]]]:
    """op -> its type signatures in the cases' steps (tracer.probes.tensorflow_dtypes,
    in TensorFlow's environment)."""
    python = envs.python_for(fw)
    cases = json.dumps([{"workload": s.primitive, "api": s.api, "shape": list(s.resolved_shape()),
                         **({"user": s.user.to_json()} if s.user is not None else {})} for s in specs])
    with tempdirs.owned("dltrace-dtypes-") as tmp:
        env = {**os.environ, **fw.env}
        env["PYTHONPATH"] = os.pathsep.join([str(code_path(tmp)), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        try:
            proc = subprocess.run([str(python), "-m", "tracer.probes.tensorflow_dtypes", cases], capture_output=True,
                                  text=True, env=env, cwd=tmp, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise ProbeFailed(f"reading the ops' dtypes did not end in {timeout:g} s") from exc
    if proc.returncode != Exit.OK:
        said = [line for line in proc.stderr.splitlines() if line.strip()]
        raise ProbeFailed(f"reading the ops' dtypes: {said[-1] if said else f'exit status {proc.returncode}'}")
    out: dict[str, list[list[list[str]]]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def tensorflow_table(traces: list[Trace], dtypes: dict[str, list[list[list[str]]]]) -> Table:
    """The report's list (tracer.process.scorecard's registry figure: backend_needs over
    the CPU traces' kernel registry, interface entries only), with each op's signatures."""
    needs = backend_needs(traces)
    if needs is None:
        raise DltraceError("the CPU run recorded no kernel registry (no dispatch meta in its traces)")
    ops = interface_entries(needs.must_implement)
    if not ops:
        raise DltraceError("the kernel registry says no op of the run needs a kernel of a new device")
    passes = _passes(traces)
    entries = [Entry(op, passes.get(op, ()), tuple(", ".join(f"{a}={d}" for a, d in sig) for sig in dtypes.get(op, [])))
               for op in ops]
    return Table("tensorflow", _version(traces), "registry",
                 "TensorFlow's kernel registry (tensorflow.python.framework.kernels) over the ops the CPU run "
                 "executed (its profiler's host trace)", entries)


def _version(traces: list[Trace]) -> str:
    return str(traces[0].info.framework_version or "?")


def _kernel_name(op: str, signature: str) -> str:
    """TF_RegisterKernelBuilder's kernel name: the op and its signature's dtypes."""
    kinds = [part.split("=", 1)[1].strip("[]").replace(",", "_") for part in signature.split(", ") if "=" in part]
    return "_".join([op, *kinds]) if kinds else op


def _constraints(signature: str) -> list[tuple[str, str]]:
    """(attr, TF_DataType) for each single-type attribute of a signature; a list(type)
    attribute has no C API type constraint and is left to the kernel's TODO."""
    out = []
    for part in signature.split(", ") if signature else ():
        attr, dtype = part.split("=", 1)
        if not dtype.startswith("["):
            out.append((attr, TF_DATATYPE.get(dtype, f"TF_FLOAT /* {dtype}: no TF_DataType known to dltrace */")))
    return out


#: What an op's name must be to be written into C++ (TensorFlow's ``Conv2DBackpropInput``,
#: StableHLO's ``stablehlo.dot_general``).
TABLE_OP = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?", re.ASCII)


def write(folder: Path, framework: str, name: str, specs: list[CaseSpec], table: Table, command: str) -> None:
    """Write the table's skeleton into ``folder`` (made by tracer.scaffold.prepare)."""
    bad = [e.op for e in table.entries if not TABLE_OP.fullmatch(e.op)]
    if bad:  # written into C++ as identifiers and strings
        raise DltraceError(f"op name {bad[0][:80]!r} cannot be written into a skeleton (ASCII letters, digits, '_' "
                           "and a dotted dialect): refused")
    what = describe_cases(specs)
    env = template_env()
    ctx: dict[str, Any] = {"name": name, "device_type": name.upper(), "what": what, "table": table,
                           "entries": table.entries, "tool_version": __version__, "command": code_text(command),
                           "not_run": NOT_RUN,
                           "models": any(s.primitive in MODELS or s.user is not None for s in specs),
                           "interface": INTERFACES[framework]}
    ctx["builders"] = [{"entry": e, "signatures": [{"text": sig, "kernel": _kernel_name(e.op, sig),
                                                    "constraints": _constraints(sig)}
                                                   for sig in (e.notes or ("",))]} for e in table.entries]
    write_text(folder / "kernels.cc", env.get_template("tensorflow_kernels.cc.j2").render(ctx))
    write_text(folder / "README.md", env.get_template("tensorflow_README.md.j2").render(ctx))
    header = "op kernels a PluggableDevice registers"
    notes = "type signatures the step ran"
    width = max(len(e.op) for e in table.entries)
    write_text(folder / "ops.txt", "".join(
        [f"# {NOT_RUN}: the {header} for {what}: op, the passes that reached it, {notes}\n",
         f"# (dltrace {__version__}, {framework} {table.version}, evidence: {table.evidence}: {table.read})\n",
         *(f"{e.op:<{width}}  {','.join(e.passes) or '-'}  {'; '.join(e.notes)}\n".rstrip() + "\n"
           for e in table.entries)]))
    manifest = {"framework": framework, "interface": TABLES[framework], "run": False, "name": name, "what": what,
                "cases": [{"workload": s.primitive, "api": s.api, "shape": list(s.resolved_shape())} for s in specs],
                "ops": {e.op: {"passes": list(e.passes), "notes": list(e.notes)} for e in table.entries},
                "made_by": {"dltrace": __version__, "command": command, framework: table.version,
                            "evidence": table.evidence, "read": table.read}}
    write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
