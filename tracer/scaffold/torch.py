"""torch's skeleton (``dltrace scaffold torch``): a PrivateUse1 backend in Python.

The list comes from running the cases on torch's stand-in device
(tracer.probes.torch_standin). The skeleton registers exactly those ops, each computing
on the CPU, and refuses every other op by name. Its device plumbing is dltrace's own
(tracer/probes/torch_device.py, copied as it is), its kernels are generated from
templates/scaffold/, and its check (tracer/probes/torch_skeleton.py) runs in torch's
environment: the steps match the CPU's, no op outside the list is reached, and each op
on it is needed.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

from tracer.analysis.standin_needs import StandinNeeds
from tracer.errors import DltraceError
from tracer.paths import PACKAGE
from tracer.scaffold.skeleton import Kernel, Writer
from tracer.trace import Trace

#: What the plumbing is copied from.
DEVICE_SOURCE = PACKAGE / "probes" / "torch_device.py"
#: Names kernels.py defines besides the kernels.
_RESERVED = frozenset({"annotations", "Any", "torch", "device", "NAME", "KERNELS", "MUST_IMPLEMENT", "REFUSED",
                       "register", "unregister", "install"})
_RANDOM = re.compile(r"bernoulli|dropout|rand|normal_|uniform_|multinomial")
#: What an op's name must be to be written into generated code (``aten::addmm.out``).
OP_NAME = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*(?:\.\w+)?", re.ASCII)


def kernels(needs: StandinNeeds) -> list[Kernel]:
    """One kernel per op on the list, in the order the passes first reached them, each
    a function name of its own (``aten::fill_.Scalar`` -> ``fill__Scalar``)."""
    out: list[Kernel] = []
    taken = set(_RESERVED)
    for op in needs.must_implement:
        if not OP_NAME.fullmatch(op):  # it is written into Python as a string and an attribute path
            raise DltraceError(f"op name {op[:80]!r} cannot be written into a skeleton (namespace::name[.overload], "
                               "ASCII letters, digits and '_'): refused")
        name = re.sub(r"\W", "_", op.split("::", 1)[1] if op.startswith("aten::") else op)
        while name in taken or keyword.iskeyword(name):
            name += "_"
        taken.add(name)
        out.append(Kernel(op, tuple(needs.passes_of(op)), name))
    return out


def context(name: str, traces: list[Trace], ks: list[Kernel]) -> dict[str, Any]:
    """kernels.py seeds the generator when an op on the list draws random numbers."""
    return {"random": any(_RANDOM.search(k.op) for k in ks)}


WRITER = Writer(
    framework="torch", title="torch", kernels=kernels, version_key="torch_version",
    rendered=(("kernels.py", "kernels.py.j2"), ("__init__.py", "__init__.py.j2")),
    copied=(("device.py", DEVICE_SOURCE),),
    check_template="check.py.j2", readme_template="README.md.j2",
    must="a torch backend must implement", summary="{name}/kernels.py registers {n} ops", context=context)
