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

An op whose resource is a variable (``ResourceGather``, ``ResourceApplyAdam``) is
taken all the same (:func:`variable_op`): the kernel locks the variable on the device,
re-runs the op on a CPU copy of it and stores the new value back
(tensorflow_standin_vars.cc, since the wheel exports none of the C API's variable
functions).

The library is built here, once per TensorFlow version and source, with g++ against
the wheel's own headers and libraries, and kept with the environment. Steps run as
written: eager ops with soft placement off (an op with no kernel on the device fails,
naming it), a ``tf.function`` as a graph, as ``model.fit`` runs one, where an op the
step does not pin goes to the host when the device has no kernel of it; each such op
is recorded (tracer.probes.tensorflow_placement), per pass, beside what reached the
device: never silent.
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

from tracer.probes import base, tensorflow_placement

SOURCE = Path(__file__).with_name("tensorflow_standin.cc")
#: Its route to a resource variable on the device (C++: the wheel lacks the C API's).
VARIABLES_SOURCE = Path(__file__).with_name("tensorflow_standin_vars.cc")
#: How the two are compiled beside the include path: as the wheel's custom ops are
#: (tf.sysconfig.get_compile_flags), since the variables' file uses its C++ framework
#: (-w: its headers warn of their own deprecations by the hundred; errors still show).
CXX_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O1", "-w", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DEIGEN_MAX_ALIGN_BYTES=64")
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
    digest = hashlib.sha256(SOURCE.read_bytes() + VARIABLES_SOURCE.read_bytes()).hexdigest()[:12]
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
    fd, tmp = tempfile.mkstemp(prefix=".building-", suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = compile_command(compiler, [SOURCE, VARIABLES_SOURCE], Path(tmp))
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


def compile_command(compiler: str, sources: list[Path], out: Path, *defines: str) -> list[str]:
    """The g++ command building a stand-in library (dltrace's, or a skeleton's with its
    ``-D`` defines) from ``sources``, against this wheel's headers and libraries."""
    tf_dir = _tf_dir()
    return [compiler, *CXX_FLAGS, *defines, f"-I{tf_dir / 'include'}", *map(str, sources), "-o", str(out),
            f"-L{tf_dir}", "-l:libtensorflow_framework.so.2", "-l:libtensorflow_cc.so.2", f"-Wl,-rpath,{tf_dir}"]


#: The element types a generic kernel is registered for where an op's type attribute
#: allows any (TF_DataType values: half, bfloat16, float, double).
_FLOATS = (19, 14, 1, 2)


#: The ops taking a resource that the stand-in runs: those whose resource is a variable's
#: handle (an embedding's gather, an optimizer's update, a scatter into a variable).
VARIABLE_OPS = re.compile(r"Resource(Apply|SparseApply|Gather|Scatter|StridedSliceAssign)\w*")


def variable_op(op: Any) -> bool:
    """Whether the generic kernel runs ``op`` (an OpDef) though it takes a resource: its
    resources are variables, which it reads and updates on the device through
    tensorflow_standin_vars.cc (a copy of each on the CPU, the op re-run there, the new
    value stored back); it gives no handle and takes no variant or reference."""
    from tensorflow.core.framework import types_pb2

    return bool(VARIABLE_OPS.fullmatch(op.name)) and \
        not any(a.type == types_pb2.DT_VARIANT or a.is_ref for a in [*op.input_arg, *op.output_arg]) and \
        not any(a.type == types_pb2.DT_RESOURCE for a in op.output_arg)


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
        if op.name.startswith("_") or (not variable_op(op) and
                                       any(a.type in handles or a.is_ref for a in [*op.input_arg, *op.output_arg])):
            continue
        mine = default.get(op.name)
        if mine is None:
            out.append(op.name)
            continue
        constrained = {c.name for k in mine for c in k.constraint}
        if not constrained or any(not k.constraint for k in mine):
            continue  # any type on any device: TensorFlow's own
        # the element type where it is pinned among others (Fill: T and index_type)
        attr = next((a for a in ("T", "dtype") if a in constrained), "") or \
            (constrained.pop() if len(constrained) == 1 else "")  # ResourceGather's: dtype and Tindices
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
    tensorflow_placement.start()
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
        return (f"{op} takes a resource that is no variable (a handle into the device's own state): the stand-in's "
                "generic kernel cannot re-run it on the CPU, so the stand-in registers none (a PluggableDevice "
                "registers it itself)")
    return f"{op} has no kernel on the stand-in device (TensorFlow registers none it could take)"


class Recorder:
    """What reached the device between start and stop: each op once, in first-call order;
    each op's element types (what a kernel registration is constrained to); and, per
    pass, what reached the device in any run of it (:meth:`during`: a first step's ops,
    an optimizer's slots made lazily, are as needed as a warm step's)."""

    active = False

    def __init__(self) -> None:
        self.types: dict[str, dict[str, None]] = {}
        self.passes: dict[str, dict[str, None]] = {}
        #: pass -> the ops a graph of it placed on the host (no kernel on the device)
        self.host: dict[str, dict[str, None]] = {}
        self._held: list[tuple[str, str]] = []

    def clear(self) -> None:
        """Forget the last case's types and passes (each case has its own)."""
        self.types.clear()
        self.passes.clear()
        self.host.clear()
        tensorflow_placement.read()

    def _take(self) -> list[tuple[str, str]]:
        calls = reached()
        if self.active:
            self._held += calls
        return calls

    def start(self) -> None:
        reached()
        self._held = []
        self.active = True

    def stop(self) -> list[str]:
        calls = self._take()
        self.active = False
        calls, self._held = self._held, []
        self._typed(calls)
        return list(dict.fromkeys(op for op, _ in calls))

    def _typed(self, calls: list[tuple[str, str]]) -> None:
        for op, dtype in calls:
            self.types.setdefault(op, {})
            if dtype:
                self.types[op][dtype] = None

    def during(self, pass_: str, run: Any, *args: Any) -> Any:
        """``run(*args)``, one run of ``pass_``, with what reached the device in it kept
        as the pass's (what reached before it is whoever recorded it's)."""
        self._take()
        self.placed(pass_)
        try:
            return run(*args)
        finally:
            calls = self._take()
            self._typed(calls)
            self.passes.setdefault(pass_, {}).update(dict.fromkeys(op for op, _ in calls))
            self.placed(pass_)

    def placed(self, pass_: str) -> list[str]:
        """What the graphs instantiated since the last look placed, kept as ``pass_``'s (a
        graph is placed when it is first run: in setup, or a pass's first step): the ops
        on the host; and the ops placed on the device that TensorFlow then rewrote, which
        are on the pass's list with their types, since the placement needed their
        kernels. The ops on the host, returned."""
        placed = tensorflow_placement.read()
        self.host.setdefault(pass_, {}).update(dict.fromkeys(placed.host))
        self.passes.setdefault(pass_, {}).update(dict.fromkeys(placed.rewritten))
        for op, types in placed.rewritten.items():
            self.types.setdefault(op, {}).update(dict.fromkeys(sorted(types)))
        return placed.host

    def host_of(self) -> dict[str, list[str]]:
        """pass -> the ops a graph placed on the host in it (passes with none left out)."""
        return {p: list(ops) for p, ops in self.host.items() if ops}

    def of_pass(self, pass_: str, warm: list[str]) -> list[str]:
        """A pass's list: its recorded (warm) run's ops, then those only its other runs
        reached (a first step's)."""
        return list(dict.fromkeys([*warm, *self.passes.get(pass_, {})]))

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
                       "(TFE_Execute; a variable's ops on a CPU copy of it); eager ops with soft placement off, "
                       "tf.functions as graphs, the ops a graph placed on the host recorded (host)",
            "registered_by_name": [], "reached": {}, "host": {}}


if __name__ == "__main__":  # the set-up's build (frameworks.yaml: builds)
    print(build())
