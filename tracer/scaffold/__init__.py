"""A backend skeleton that proves the must-implement list (``dltrace scaffold``), and its check.

The list comes from running the cases on the framework's stand-in device (tracer.runner,
as ``dltrace probe --device standin`` does; read by tracer.analysis.standin_needs), never
from a table: the skeleton holds exactly those ops, each computing on the CPU, and refuses
every other op by name; its check runs the steps again in the framework's environment.

One table, :data:`WRITERS`: per framework the :class:`~tracer.scaffold.skeleton.Writer`
that names its kernels, templates, copied stand-in and check; the command line looks a
framework up here and has no branch of its own. The parts: ``plan`` (the cases, run on
the stand-in), ``skeleton`` (the writer, the shared files), ``check`` (the check's run),
and one module per framework. Chainer's and MXNet's interfaces are named
(:data:`INTERFACES`). docs/standin.md says what adding a framework takes.
"""

from __future__ import annotations

import keyword
import re
import sys

from tracer.errors import UsageError
from tracer.scaffold import jax, tensorflow, torch, torch_compiled
from tracer.scaffold.check import OUTPUT_TAIL, Checked, check, tail
from tracer.scaffold.plan import plan, stand_in
from tracer.scaffold.skeleton import MANIFEST, Kernel, Writer, case_rows, code_text, describe_cases, needs_of, \
    prepare, template_env, workload_refs, write_list, write_manifest

__all__ = ["COMPILED_WRITERS", "INTERFACES", "MANIFEST", "OUTPUT_TAIL", "WRITERS", "Checked", "Kernel", "Writer",
           "case_rows", "check", "check_framework", "check_name", "code_text", "describe_cases", "needs_of", "plan",
           "prepare", "stand_in", "tail", "template_env", "workload_refs", "write_list", "write_manifest"]

#: The frameworks dltrace writes a skeleton for, each with its writer.
WRITERS: dict[str, Writer] = {w.framework: w for w in (torch.WRITER, tensorflow.WRITER, jax.WRITER)}
#: The frameworks dltrace writes a compiled door's skeleton for (``--door compiled``):
#: a torch.compile backend lowering the graphs' ops.
COMPILED_WRITERS: dict[str, Writer] = {w.framework: w for w in (torch_compiled.WRITER,)}

#: The frameworks whose backend interface dltrace does not stand in: what a new device
#: would implement instead.
INTERFACES = {
    "chainer": "a ChainerX backend (C++, built into ChainerX) or a CuPy-like array module",
    "mxnet": "a C++ library of operators and a context (MXLoadLib's external library interface)",
}
#: Device types torch already has (a PrivateUse1 backend cannot take their names) and
#: module names the skeleton's package would shadow.
_TAKEN = frozenset({"cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                    "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone", "standin", "torch",
                    "tracer", "numpy", "check", "device", "kernels"})


def check_framework(framework: str) -> Writer:
    """The framework's writer; Chainer and MXNet (no writer) are named, not written."""
    if framework not in WRITERS:
        interface = INTERFACES.get(framework, "an interface dltrace does not know")
        titles = [f"{w.title}'s" for w in WRITERS.values()]
        written = ", ".join(titles[:-1]) + f" and {titles[-1]}"
        raise UsageError(f"{framework}'s new-device interface is {interface}: dltrace does not stand it in, so "
                         f"dltrace scaffold writes {written} backends only")
    return WRITERS[framework]


def check_name(name: str, framework: str = "torch") -> str:
    """``name``, when it can name the backend's package (and the framework's device)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise UsageError(f"--name {name!r}: a backend's name is a lower-case Python identifier (e.g. mydevice)")
    rule = WRITERS[framework].name_rule if framework in WRITERS else None
    if rule is not None and not re.fullmatch(rule[0], name):
        raise UsageError(f"--name {name!r}: {rule[1]}")
    if name in _TAKEN or name in sys.stdlib_module_names:
        raise UsageError(f"--name {name!r} is taken (a torch device type, or a module the skeleton or its check "
                         "imports: the package would shadow it)")
    return name
