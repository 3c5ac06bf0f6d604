"""TensorFlow's stand-in device: a PluggableDevice built from tensorflow_standin.cc.

A new accelerator reaches TensorFlow as a PluggableDevice: a shared library with a
StreamExecutor platform (its memory, streams, copies) and the op kernels it registers
for its device type. The stand-in is one: its memory is host memory, every copy a
memcpy, and each op it registers has one generic kernel that records the op and
re-runs it on TensorFlow's CPU kernels through the eager C API. What reached it is
what a port's kernels must cover on that path.

Which ops it registers: every op TensorFlow has, but the ops TensorFlow itself
registers for DEFAULT_DEVICE with no type constraint (variables, shapes, identity:
any device gets them), its internal ops (``_Arg``, ``_Send``...) and the ops that
take or give a resource, a variant or a reference (a handle into a device's own
state cannot be re-run on the CPU): an op of those that has no kernel for the device
fails the step, naming it, as on a real device.

The library is built here, once per TensorFlow version and source, with g++ against
the wheel's own headers and libraries, and kept with the environment; steps run
eagerly (``tf.config.run_functions_eagerly``), with soft placement off, so that no
op runs on the host unseen: in a tf.function an op without a kernel on the device
would silently run on the CPU.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import tensorflow as tf

from tracer.probes import base

SOURCE = Path(__file__).with_name("tensorflow_standin.cc")
#: The device type the library registers (its platform's ``type``).
DEVICE_TYPE = "STANDIN"
_loaded: list[ctypes.CDLL] = []
#: The library install() loads, where not dltrace's own (a backend skeleton's check: its
#: build and its device type).
_USE: dict[str, Any] = {}


def use(library: Path, device_type: str) -> None:
    """Make :func:`install` load ``library`` (a skeleton's build, registering its own
    kernels for ``device_type``) instead of dltrace's stand-in."""
    _USE.update(library=library, device_type=device_type)


def device() -> str:
    return f"/device:{_USE.get('device_type', DEVICE_TYPE)}:0"


def _tf_dir() -> Path:
    return Path(tf.__file__).parent


def library_path() -> Path:
    """Where this TensorFlow's build of the library is kept (in its environment)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return Path(sys.prefix) / "dltrace-standin" / f"libdltrace_standin-tf{tf.__version__}-{digest}.so"


def build() -> Path:
    """The library, built if this version and source have none yet (to a new name,
    then renamed: two probes building at once leave one whole file)."""
    target = library_path()
    if target.is_file():
        return target
    compiler = shutil.which("g++")
    if compiler is None:
        raise base.ProbeError("TensorFlow's stand-in device is a C++ library built here, and no g++ was found "
                              "(the set-up installs it: make setup)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tf_dir = _tf_dir()
    fd, tmp = tempfile.mkstemp(prefix=".building-", suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [compiler, "-std=c++17", "-shared", "-fPIC", "-O1", f"-I{tf_dir / 'include'}", str(SOURCE), "-o", tmp,
           f"-L{tf_dir}", "-l:libtensorflow_framework.so.2", "-l:libtensorflow_cc.so.2", f"-Wl,-rpath,{tf_dir}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            said = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines()
            raise base.ProbeError(f"building TensorFlow's stand-in device failed: {(said or ['?'])[0][:300]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


#: The element types a generic kernel is registered for where an op's type attribute
#: allows any (TF_DataType values: half, bfloat16, float, double).
_FLOATS = (19, 14, 1, 2)


@functools.cache
def registered_ops() -> list[str]:
    """The registrations the stand-in makes (see the module's docstring): one line per
    op, ``Op`` (every type), or ``Op<TAB>attr<TAB>type`` where TensorFlow registers the
    op for DEFAULT_DEVICE in some types of ``attr`` (``Mul``'s int32, ``Shape``'s int32
    output, in host memory): the generic kernel takes each other type it allows."""
    from tensorflow.core.framework import op_def_pb2, types_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api
    from tensorflow.python.framework import kernels

    ops = op_def_pb2.OpList()
    ops.ParseFromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    default: dict[str, list[Any]] = {}
    for k in kernels.get_all_registered_kernels().kernel:
        if k.device_type == "DEFAULT":
            default.setdefault(k.op, []).append(k)
    handles = (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT)
    out = []
    for op in ops.op:
        if op.name.startswith("_") or any(a.type in handles or a.is_ref for a in [*op.input_arg, *op.output_arg]):
            continue
        mine = default.get(op.name)
        if mine is None:
            out.append(op.name)
            continue
        constrained = {c.name for k in mine for c in k.constraint}
        if not constrained or any(not k.constraint for k in mine):
            continue  # any type on any device: TensorFlow's own
        # the element type where it is pinned among others (Fill: T and index_type)
        attr = "T" if "T" in constrained else constrained.pop() if len(constrained) == 1 else ""
        if not attr:
            continue
        taken = {t for k in mine for c in k.constraint if c.name == attr for t in c.allowed_values.list.type}
        spec = next((a for a in op.attr if a.name == attr), None)
        if spec is None or spec.type != "type":
            continue
        allowed = list(spec.allowed_values.list.type) or list(_FLOATS)
        out += [f"{op.name}\t{attr}\t{t}" for t in allowed if t not in taken]
    return out


def install() -> str:
    """Load the stand-in (once per process), registering its kernel for
    :func:`registered_ops` (or a skeleton's library: :func:`use`); the device string to
    place work on."""
    if _loaded:
        return device()
    from tensorflow.python.framework import load_library

    path = _USE.get("library") or build()
    listed = Path(tempfile.mkdtemp(prefix="dltrace-tfstandin-")) / "ops.txt"
    listed.write_text("\n".join(registered_ops()) + "\n")
    os.environ["DLTRACE_TF_STANDIN_OPS"] = str(listed)  # dltrace's library reads it; a skeleton's has its own list
    try:
        load_library.load_pluggable_device_library(str(path))
    finally:
        shutil.rmtree(listed.parent, ignore_errors=True)
    lib = ctypes.CDLL(str(path))
    lib.dltrace_standin_reached.restype = ctypes.c_char_p
    _loaded.append(lib)
    tf.config.set_soft_device_placement(False)
    tf.config.run_functions_eagerly(True)
    return device()


def reached() -> list[tuple[str, str]]:
    """The calls that reached the device since the last call, in call order: (op, its
    element type T as a TF_DataType number, or "")."""
    if not _loaded:
        return []
    said: bytes = _loaded[0].dltrace_standin_reached() or b""
    out = []
    for line in said.decode().splitlines():
        op, _, typed = line.partition("\t")
        if op:
            out.append((op, typed.partition("\t")[2]))
    return out


def unplaced(message: str) -> str | None:
    """The op TensorFlow could not place on the stand-in (no kernel there), from its
    error message (eager: ``[Op:X]``; a graph: ``operation X``), or None."""
    if DEVICE_TYPE not in message and not _USE:
        return None
    found = re.search(r"Cannot assign a device for operation (\w+):", message) or \
        re.search(r"Could not satisfy device specification .*\[Op:(\w+)\]", message, re.S)
    return found.group(1) if found else None


def no_kernel(op: str) -> str:
    """Why ``op`` has no kernel on the stand-in, in one line."""
    if op in {line.split("\t", 1)[0] for line in registered_ops()}:
        return f"{op} failed on the stand-in device"
    from tensorflow.python.framework import op_def_registry

    found = op_def_registry.get(op)
    handles = found is not None and any(a.type in (20, 21) or a.is_ref  # DT_RESOURCE, DT_VARIANT
                                        for a in [*found.input_arg, *found.output_arg])
    if handles:
        return (f"{op} takes a resource (a variable's state on the device): the stand-in's generic kernel cannot "
                "re-run it on the CPU, so the stand-in registers none (a PluggableDevice registers it itself)")
    return f"{op} has no kernel on the stand-in device (TensorFlow registers none it could take)"


class Recorder:
    """What reached the device between start and stop: each op once, in first-call order;
    and each op's element types (what a kernel registration is constrained to)."""

    active = False

    def __init__(self) -> None:
        self.types: dict[str, dict[str, None]] = {}

    def start(self) -> None:
        reached()
        self.active = True

    def stop(self) -> list[str]:
        self.active = False
        calls = reached()
        for op, dtype in calls:
            self.types.setdefault(op, {})
            if dtype:
                self.types[op][dtype] = None
        return list(dict.fromkeys(op for op, _ in calls))

    def registrations(self) -> dict[str, list[list[str]]]:
        """op -> [["T", TF_DataType], ...] for each element type it reached the device in
        ([]: it has no T; a registration for every type)."""
        return {op: [["T", t] for t in types] for op, types in self.types.items()}


RECORDER = Recorder()


def describe() -> dict[str, Any]:
    """What the trace's meta says of the stand-in: never a GPU, a run on this CPU."""
    return {"evidence": "run on the stand-in device",
            "unit": "op kernels that reached the stand-in PluggableDevice (what a PluggableDevice registers)",
            "backend": "a PluggableDevice built here (tracer/probes/tensorflow_standin.cc): host memory, one "
                       "generic kernel per op that records it and re-runs it on TensorFlow's CPU kernels "
                       "(TFE_Execute); steps run eagerly, soft placement off",
            "registered_by_name": [], "reached": {}}


if __name__ == "__main__":  # the set-up's build (frameworks.yaml: builds)
    print(build())
