"""A probe that misbehaves on purpose, so the tests can check how dltrace reports
a crashing (segfault), hanging, or failing probe."""

import atexit
import ctypes
import json
import os
import sys
import tempfile
import time

from tracer.probes import base


def gpu_available() -> bool:
    return False


def _sampled() -> bool:
    """py-spy, the only child a probe process starts, is attached to it."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                if fh.read().strip():
                    return True
        except OSError:
            pass
    return False


def _crash_when_sampled() -> int:
    if _sampled():
        ctypes.string_at(0)
    return sum(range(10))


def _corrupt_outputs() -> None:
    """After the harness wrote its traces: make them unreadable, as a broken disk or
    a buggy framework hook would."""
    with open(sys.argv[1]) as fh:
        for case in json.load(fh)["cases"]:
            if os.path.exists(case["out"]):
                with open(case["out"], "wb") as out:
                    out.write(b"\x1f\x8b\x08\x00garbage")


def make_case(primitive, api, device, shape):
    if primitive == "conv2d":  # segfault
        ctypes.string_at(0)
    if primitive == "relu":  # hang
        time.sleep(3600)
    if primitive == "tanh":  # an ordinary exception in one case
        raise RuntimeError("tanh is broken in this framework")
    if primitive == "sigmoid":  # fine when traced; segfaults once py-spy samples it
        return base.Case(forward=_crash_when_sampled, backward=lambda state: None)
    if primitive == "avgpool2d":  # writes terminal control sequences to stderr, then dies
        sys.stderr.write("\x1b]0;pwned\x07\x1b[2J\x1b[31mred alert\n")
        sys.stderr.flush()
        ctypes.string_at(0)
    if primitive == "maxpool2d":  # its traces are corrupt on disk
        atexit.register(_corrupt_outputs)
    if primitive == "dense":  # leaves a folder in the temporary folder, as MXNet's profiler does
        tempfile.mkdtemp(prefix="crashy-profile-")
    if primitive == "softmax":  # its "library" prints one good oneDNN line and malformed ones each step
        return base.Case(forward=_malformed_verbose, backward=lambda state: None)
    return base.Case(forward=lambda: sum(range(10)), backward=lambda state: None)


VERBOSE = (b"onednn_verbose,v1,primitive,exec,cpu,softmax,jit:avx2,forward_training,src:f32,,alg:softmax,mb2ic8,0.01\n"
           b"onednn_verbose,v1,primitive,exec,cpu,softmax,jit:avx2,forward_training,src:f32,,alg:softmax,mb2ic8,nan\n"
           b"onednn_verbose,v1,primitive,exec,cpu,softmax,jit:avx2,forward_training,src:f32,,alg:softmax,mb2ic8,1e400\n"
           b"MKL_VERBOSE SGEMM(N,N,4,4,4,0x1,0x2,4,0x3,4,0x4,0x5,4) 1.2.3us CNR:OFF Dyn:1\n")


def _malformed_verbose() -> int:
    os.write(1, VERBOSE)  # fd 1, where oneDNN and MKL print
    return sum(range(10))


def workload_case(build, device):
    """A user's workload (tracer.contract.WorkloadProbe): its function gets the selector."""
    return build(device)
